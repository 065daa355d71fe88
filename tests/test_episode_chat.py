"""Episodes of conversations (trainer_core/rollout/chat_turns.py): the environment's answers and tools join a chat
prompt through the model's chat template, as the model was tuned to read them; templates that cannot take them are
named at the start."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.harness.scripted_episodes import TOOL, Scripted, play, tiny_policy
from trainer_core.data import DataError
from trainer_core.environments import Episode
from trainer_core.environments.tool_calls import listed
from trainer_core.rollout import rollouts
from trainer_core.rollout.chat_turns import ChatTurns

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def policy() -> tuple[torch.nn.Module, object, object]:
    return tiny_policy()


def test_a_conversation_takes_the_environments_answers_as_chat_messages(policy) -> None:
    """A row whose prompt is messages: the opening joins the conversation as a user message before the assistant's
    turn opens, and each answer follows the policy's turn as the builtin template writes a message (<|user|>text</s>)
    with the assistant's next turn opened (<|assistant|>), after the </s> that ends the assistant's message unless
    the policy's own EOS ended it. Only the policy's tokens are in response_mask."""
    _, tokenizer, _ = policy
    messages = [{"role": "user", "content": "what is 12*34?"}]
    scored = play(policy, Scripted(turns=3, opening="Use the tool."), [{"prompt": messages}] * 2, greedy=False)
    opened = [*messages, {"role": "user", "content": "Use the tool."}]
    prompt = tokenizer.apply_chat_template(opened, tokenize=True, add_generation_prompt=True, return_dict=False)
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    g = scored.generation
    for i in range(2):
        real = g.attention_mask[i].bool()
        assert g.input_ids[i][real][: len(prompt)].tolist() == prompt
        ids = g.response_ids[i][real[g.prompt_width :]].tolist()
        mine = g.response_mask[i][real[g.prompt_width :]].tolist()
        spans, start = [], 0  # (policy's, environment's) runs of tokens, in turn
        for k in range(1, len(ids) + 1):
            if k == len(ids) or mine[k] != mine[start]:
                spans.append((mine[start], ids[start:k]))
                start = k
        assert [m for m, _ in spans] == [True, False, True, False, True]
        for (_, turn), (_, answer_ids) in zip(spans[0::2], spans[1::2], strict=False):
            closed = "" if turn[-1] == tokenizer.eos_token_id else "</s>"
            assert answer_ids == encode(f"{closed}<|user|>{TOOL}</s><|assistant|>"), tokenizer.decode(answer_ids)


class Tooled(Scripted):
    """Scripted, offering one tool on each episode."""

    TOOLS = [{"type": "function", "function": {"name": "add", "description": "a+b", "parameters": {"type": "object"}}}]

    def reset(self, episode: Episode) -> str:
        episode.tools = self.TOOLS
        return super().reset(episode)


def test_an_environments_tools_are_shown_through_the_template_that_renders_them_else_as_text(policy) -> None:
    """The tools an environment offers: as text heading the opening after a plain prompt; in a conversation, through
    the chat template's own tool rendering where it has one (here a template that lists them in a system turn), else
    as text in the environment's opening message."""
    _, tokenizer, _ = policy
    text = listed(Tooled.TOOLS)
    plain = play(policy, Tooled(turns=1), [{"prompt": "2+3="}], length=512)
    whole = tokenizer("2+3=")["input_ids"] + tokenizer(text, add_special_tokens=False)["input_ids"]
    assert plain.prompts == ["2+3=" + text] and _prompt_ids(plain.generation, 0) == whole
    messages = [{"role": "user", "content": "2+3?"}]
    conversation = play(policy, Tooled(turns=1), [{"prompt": messages}], length=512)
    as_text = [*messages, {"role": "user", "content": text}]  # the builtin template renders no tools
    assert _prompt_ids(conversation.generation, 0) == tokenizer.apply_chat_template(
        as_text, tokenize=True, add_generation_prompt=True, return_dict=False
    )
    native = copy.deepcopy(tokenizer)
    native.chat_template = (
        "{% if tools %}<|system|>{% for t in tools %}{{ t['function']['name'] }};{% endfor %}{{ eos_token }}{% endif %}"
        + native.chat_template
    )
    model, _, backend = policy
    with_native = play((model, native, backend), Tooled(turns=1), [{"prompt": messages}], length=512)
    expected = native.apply_chat_template(
        messages, tools=Tooled.TOOLS, tokenize=True, add_generation_prompt=True, return_dict=False
    )
    assert _prompt_ids(with_native.generation, 0) == expected and native.decode(expected).startswith("<|system|>add;")


def _prompt_ids(generation, row: int) -> list[int]:
    keep = generation.attention_mask[row, : generation.prompt_width].bool()
    return generation.input_ids[row, : generation.prompt_width][keep].tolist()


def test_chat_templates_that_can_and_cannot_take_the_environments_messages(policy) -> None:
    """A template that refuses the role, or drops an assistant's message once another follows, fails the run at the
    start with environment.chat_role; one that writes the last assistant message differently from earlier ones (an
    empty thinking block, as Qwen3's) appends what follows an earlier one; with a ChatML-like template, a turn the
    policy ended with its EOS gets only the rest of the template's end of message."""
    _, tokenizer, _ = policy
    strict = copy.deepcopy(tokenizer)
    strict.chat_template = (
        "{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}{{ raise_exception('roles alternate') }}"
        "{% endif %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}{% endfor %}"
    )
    with pytest.raises(DataError, match=r"environment.chat_role: .* refused a 'tool' message .*roles alternate"):
        ChatTurns(strict, "tool")
    plain = copy.deepcopy(tokenizer)
    plain.chat_template = None
    with pytest.raises(DataError, match="the prompts are conversations .* but the model's tokenizer has no chat template"):
        rollouts.prompt_ids({"prompt": [{"role": "user", "content": "2+2?"}]}, plain)
    forgetful = copy.deepcopy(tokenizer)  # an assistant's message is shown whole only when it is the last
    forgetful.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{% if m['role'] != 'assistant' or loop.last %}{{ m['content'] }}"
        "{% endif %}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    with pytest.raises(DataError, match="drops an assistant's message once a 'user' message follows"):
        ChatTurns(forgetful, "user")
    thinking = copy.deepcopy(tokenizer)  # the last assistant message gets an empty thinking block, earlier ones not
    thinking.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{% if m['role'] == 'assistant' and loop.last %}<think></think>"
        "{% endif %}{{ m['content'] }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    assert ChatTurns(thinking, "tool").reply("42", ended_with_eos=False) == "</s><|tool|>42</s><|assistant|>"
    chatml = copy.deepcopy(tokenizer)
    chatml.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    turns = ChatTurns(chatml, "tool")
    assert turns.reply("42", ended_with_eos=True) == "\n<|im_start|>tool\n42</s>\n<|im_start|>assistant\n"
    assert turns.reply("42", ended_with_eos=False) == "</s>\n<|im_start|>tool\n42</s>\n<|im_start|>assistant\n"


def test_a_tools_result_goes_to_the_template_as_its_own_tool_message(policy) -> None:
    """With chat_role: tool, a call's result is rendered by the template as the tool message it was tuned on (the
    assistant's message carrying the call): after the call the policy wrote, the rest of its turn's end, then the
    tool message, then the next turn. Templates that take the call's arguments as JSON text, and ones that take a
    tool message only after a call (a turn with no call is then answered as the user), are served too."""
    from trainer_core.environments.base import ToolResult

    _, tokenizer, _ = policy
    result = ToolResult("multiply", {"a": 13, "b": 17}, None, "221")
    qwen_like = copy.deepcopy(tokenizer)  # Qwen's way: calls in <tool_call> tags, results as a user's <tool_response>
    qwen_like.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n"
        "</tool_response><|im_end|>\n{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}{% for c in m.get('tool_calls') "
        "or [] %}<tool_call>\n{{ {'name': c['function']['name'], 'arguments': c['function']['arguments']} | tojson }}\n"
        "</tool_call>{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% endif %}"
    )
    turns = ChatTurns(qwen_like, "tool", "hermes")
    assert turns.reply("<tool_response>\n221\n</tool_response>\n", ended_with_eos=False, tool=result) == (
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n221\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )  # the result wrapped once, by the template, where the role's plain message would wrap it twice
    assert (
        ChatTurns(qwen_like, "user", "hermes")
        .reply("x", ended_with_eos=False, tool=result)
        .endswith("<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n")
    )  # another chat_role: the answer's text as that role's message, as before
    joined = copy.deepcopy(tokenizer)  # DeepSeek's way: arguments joined as text; results in tool-output tokens
    joined.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'tool' %}<out>{{ m['content'] }}</out>{% else %}<|{{ m['role'] }}|>"
        "{{ m['content'] }}{% for c in m.get('tool_calls') or [] %}<call>{{ c['function']['name'] + ':' + "
        "c['function']['arguments'] }}</call>{% endfor %}{{ eos_token }}{% endif %}{% endfor %}"
    )
    ended_by_eos = ChatTurns(joined, "tool", "mistral")  # a format whose calls end with the EOS token
    assert ended_by_eos.reply("", ended_with_eos=True, tool=result) == "<out>221</out>"
    assert ended_by_eos.reply("", ended_with_eos=False, tool=result) == "</s><out>221</out>"
    harmony_like = copy.deepcopy(tokenizer)  # a tool message names the call it answers, and needs one before it
    harmony_like.chat_template = (
        "{% set ns = namespace(name=none) %}{% for m in messages %}{% if m['role'] == 'tool' %}{% if ns.name is none %}"
        "{{ raise_exception('a tool message needs a call before it') }}{% endif %}<|start|>functions.{{ ns.name }} "
        "to=assistant<|message|>{{ m['content'] }}<|end|>{% else %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}"
        "{% for c in m.get('tool_calls') or [] %}{% set ns.name = c['function']['name'] %} to=functions.{{ ns.name }}"
        "<|message|>{{ c['function']['arguments'] | tojson }}<|call|>{% endfor %}{% if not m.get('tool_calls') %}<|end|>"
        "{% endif %}{% endif %}{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}"
    )
    harmony = ChatTurns(harmony_like, "tool", "gpt_oss")
    assert harmony.plain_role == "user"
    assert harmony.reply("", ended_with_eos=False, tool=result) == (
        "<|start|>functions.multiply to=assistant<|message|>221<|end|><|start|>assistant"
    )
    assert harmony.reply("error: no tool call", ended_with_eos=False) == (
        "<|end|><|start|>user<|message|>error: no tool call<|end|><|start|>assistant"
    )
