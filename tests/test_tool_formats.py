"""The tool-call formats of MCP tool environments (environment.tool_format; trainer_core/environments/tool_calls.py):
each family of chat templates' calls read, typed and answered as it writes them, in process with an OpenEnv MCP
environment (tests/harness/openenv_tools.py) as well as by hand."""

from __future__ import annotations

import pytest

from rlplane.spec.environments import PythonEnvironment
from trainer_core.environments import make_environment, tool_calls
from trainer_core.environments.base import Episode

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": "integer"},
                    "score": {"type": "number"},
                    "exact": {"type": "boolean"},
                    "filters": {"type": "object"},
                    "tags": {"type": "array"},
                    "after": {"type": ["string", "null"]},
                },
            },
        },
    }
]


def coder(name: str, **parameters: str) -> str:
    """A call as Qwen3-Coder writes one: each parameter's value on lines of its own."""
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in parameters.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def test_qwen3_coder_calls_are_read_and_their_values_typed_by_the_tools_schema() -> None:
    message = "Let me look.\n" + coder(
        "search",
        query="  two words  ",
        limit="3",
        score="0.5",
        exact="True",
        filters='{"lang": "en"}',
        tags='["a", "b"]',
        after="null",
        extra="7",
    )
    assert tool_calls.call_fields(message, "qwen3_coder", TOOLS)["arguments"] == {
        "query": "  two words  ",  # a string as written (one newline each side is the format's)
        "limit": 3,
        "score": 0.5,
        "exact": True,
        "filters": {"lang": "en"},
        "tags": ["a", "b"],
        "after": None,
        "extra": "7",  # not in the schema: text
    }
    refused = tool_calls.call_fields(coder("search", limit="three", filters="[1]"), "qwen3_coder", TOOLS)
    assert refused["arguments"] == {"limit": "three", "filters": "[1]"}  # no value of the type: the tool says why
    twice = coder("search", limit="1") + "\n" + coder("search", limit="2")
    assert tool_calls.call_fields(twice, "qwen3_coder", TOOLS)["arguments"] == {"limit": 2}  # the last call
    assert tool_calls.call_fields(coder("other", x="1"), "qwen3_coder", TOOLS)["arguments"] == {"x": "1"}
    for bad, why in [
        ("I know it: 42", "no tool call: call a tool as <tool_call><function=<tool>>"),
        ("<tool_call>\n<parameter=a>\n1\n</parameter>\n</tool_call>", "names no <function=...>"),
        ("<tool_call>\n<function=search>\n<parameter=limit>\n1\n", "left open"),
    ]:
        with pytest.raises(ValueError, match=why):
            tool_calls.call_fields(bad, "qwen3_coder", TOOLS)


def test_llama3_json_calls_are_the_whole_message_ended_by_eos() -> None:
    call = '{"name": "search", "parameters": {"limit": 3}}'
    for message in (call, f"<|python_tag|>{call}", f"\n {call} \n"):
        assert tool_calls.call_fields(message, "llama3_json") == {
            "type": "call_tool",
            "tool_name": "search",
            "arguments": {"limit": 3},
        }
    as_string = '{"name": "search", "parameters": "{\\"limit\\": 3}"}'
    assert tool_calls.call_fields(as_string, "llama3_json")["arguments"] == {"limit": 3}
    for bad, why in [("It is 42.", "no tool call"), ('{"name": "search", "parameters": [', "not JSON"), ("{}", "needs a")]:
        with pytest.raises(ValueError, match=why):
            tool_calls.call_fields(bad, "llama3_json")
    assert tool_calls.with_call_stop(("\n\n",), "llama3_json") == ("\n\n",)  # the EOS token ends the turn
    assert tool_calls.refusal("no tool call", "llama3_json") == "error: no tool call"
    assert tool_calls.response({"tool_name": "f", "result": "12"}, "llama3_json") == ("12", None)
    assert '{"name": "<tool>", "parameters": {...}}' in tool_calls.listed(TOOLS, "llama3_json")


def test_each_format_stops_lists_and_answers_as_its_templates_do() -> None:
    assert tool_calls.with_call_stop((), "hermes") == tool_calls.with_call_stop((), "qwen3_coder") == ("</tool_call>",)
    assert 'as <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>:' in tool_calls.listed(TOOLS)
    listing = tool_calls.listed(TOOLS, "qwen3_coder")
    assert "as <tool_call><function=<tool>><parameter=<name>><value></parameter>...</function></tool_call>:" in listing
    assert '"name": "search"' in listing
    assert tool_calls.response({"tool_name": "f", "result": "12"}, "qwen3_coder") == (
        "<tool_response>\n12\n</tool_response>\n",
        None,
    )
    # The format a chat template writes, from its text (a warning at the start of a run whose tool_format differs).
    assert tool_calls.template_format("{{- '<tool_call>\\n<function=' + name + '>' }}<parameter=x>") == "qwen3_coder"
    assert tool_calls.template_format('{{- \'<tool_call>\\n{"name": "\' }}') == "hermes"
    assert tool_calls.template_format("{%- if message.role == 'ipython' %}<|python_tag|>") == "llama3_json"
    assert tool_calls.template_format("{{ message.content }}") is None and tool_calls.template_format(None) is None


def test_an_mcp_environment_is_played_in_qwen3_coder_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: the product tool called in Qwen3-Coder's XML answers the product; a value the tool refuses is
    answered with why; submit ends the episode with the environment's reward."""
    monkeypatch.setenv("RLPLANE_REWARD_ENTRYPOINTS", "tests.harness.openenv_tools:*")
    spec = PythonEnvironment(entrypoint="tests.harness.openenv_tools:make", tool_format="qwen3_coder")
    environment = make_environment(spec)
    assert environment.stop == ("</tool_call>",)
    episode = Episode(row={"prompt": "13*17=", "answer": "221"})
    environment.reset(episode)
    refused = environment.step(episode, coder("multiply", a="x", b="4"))
    assert refused.error and refused.reason.startswith("tool 'multiply'") and refused.text.startswith("<tool_response>")
    product = environment.step(episode, coder("multiply", a="13", b="17"))
    assert product.text == "<tool_response>\n221\n</tool_response>\n" and not product.error
    no_call = environment.step(episode, "It is 221.")
    assert no_call.error and "<function=<tool>>" in no_call.text
    submitted = environment.step(episode, coder("submit", answer="221"))
    assert submitted.done and submitted.reward == 1.0
    environment.close()


def test_a_run_says_its_tool_format_and_warns_when_the_template_writes_another(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from rlplane.spec import parse_spec
    from trainer_core.recipes import online

    monkeypatch.setenv("RLPLANE_REWARD_ENTRYPOINTS", "tests.harness.openenv_tools:*")
    environment = {"kind": "python", "entrypoint": "tests.harness.openenv_tools:make"}
    spec = parse_spec(
        {
            "name": "tools",
            "algorithm": "grpo",
            "train": {"steps": 1},
            "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 512},
            "data": {"source": "builtin:calculator"},
            "grpo": {"environment": environment},
        }
    )
    said: list[str] = []
    reporter = SimpleNamespace(log=said.append)
    coder_template = SimpleNamespace(chat_template="{{ '<tool_call>\\n<function=' }}{{ '<parameter=' }}")
    online.reward_or_environment(spec, spec.grpo.environment, "grpo", None, reporter, coder_template)
    assert said[0] == (
        "warning: grpo.environment.tool_format is hermes, but the model's chat template writes tool calls as "
        "qwen3_coder: set grpo.environment.tool_format: qwen3_coder, unless the policy is to learn another format"
    )
    assert said[1].startswith("environment python tests.harness.openenv_tools:make tool_format=hermes max_turns=4")
    said.clear()
    online.reward_or_environment(spec, spec.grpo.environment, "grpo", None, reporter, SimpleNamespace(chat_template=None))
    assert len(said) == 1 and "tool_format=hermes" in said[0]
