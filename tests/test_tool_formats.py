"""The tool-call formats of MCP tool environments (environment.tool_format; trainer_core/environments/tool_calls.py):
each family of chat templates' calls read, typed and answered as it writes them, in process with an OpenEnv MCP
environment (tests/harness/openenv_tools.py) as well as by hand."""

from __future__ import annotations

import pytest

from rlplane.spec.environments import PythonEnvironment
from tests.harness.environments import replied
from trainer_core.environments import make_environment, tool_calls, tool_formats
from trainer_core.environments.base import Episode, ToolResult

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
    assert tool_calls.read_call(message, "qwen3_coder", TOOLS).arguments == {
        "query": "  two words  ",  # a string as written (one newline each side is the format's)
        "limit": 3,
        "score": 0.5,
        "exact": True,
        "filters": {"lang": "en"},
        "tags": ["a", "b"],
        "after": None,
        "extra": "7",  # not in the schema: text
    }
    refused = tool_calls.read_call(coder("search", limit="three", filters="[1]"), "qwen3_coder", TOOLS)
    assert refused.arguments == {"limit": "three", "filters": "[1]"}  # no value of the type: the tool says why
    twice = coder("search", limit="1") + "\n" + coder("search", limit="2")
    assert tool_calls.read_call(twice, "qwen3_coder", TOOLS).arguments == {"limit": 2}  # the last call
    assert tool_calls.read_call(coder("other", x="1"), "qwen3_coder", TOOLS).arguments == {"x": "1"}
    for bad, why in [
        ("I know it: 42", "no tool call: call a tool as <tool_call><function=<tool>>"),
        ("<tool_call>\n<parameter=a>\n1\n</parameter>\n</tool_call>", "names no <function=...>"),
        ("<tool_call>\n<function=search>\n<parameter=limit>\n1\n", "left open"),
    ]:
        with pytest.raises(ValueError, match=why):
            tool_calls.read_call(bad, "qwen3_coder", TOOLS)


def test_llama3_json_calls_are_the_whole_message_ended_by_eos() -> None:
    call = '{"name": "search", "parameters": {"limit": 3}}'
    for message in (call, f"<|python_tag|>{call}", f"\n {call} \n"):
        assert tool_calls.read_call(message, "llama3_json") == tool_calls.Call("search", {"limit": 3})
    as_string = '{"name": "search", "parameters": "{\\"limit\\": 3}"}'
    assert tool_calls.read_call(as_string, "llama3_json").arguments == {"limit": 3}
    for bad, why in [("It is 42.", "no tool call"), ('{"name": "search", "parameters": [', "not JSON"), ("{}", "needs a")]:
        with pytest.raises(ValueError, match=why):
            tool_calls.read_call(bad, "llama3_json")
    assert tool_calls.with_call_stop(("\n\n",), "llama3_json") == ("\n\n",)  # the EOS token ends the turn
    assert tool_calls.refusal("no tool call", "llama3_json") == "error: no tool call"
    assert replied({"tool_name": "f", "result": "12"}, "llama3_json") == ("12", None)
    assert '{"name": "<tool>", "parameters": {...}}' in tool_calls.listed(TOOLS, "llama3_json")


def test_each_format_stops_lists_and_answers_as_its_templates_do() -> None:
    assert tool_calls.with_call_stop((), "hermes") == tool_calls.with_call_stop((), "qwen3_coder") == ("</tool_call>",)
    assert 'as <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>:' in tool_calls.listed(TOOLS)
    listing = tool_calls.listed(TOOLS, "qwen3_coder")
    assert "as <tool_call><function=<tool>><parameter=<name>><value></parameter>...</function></tool_call>:" in listing
    assert '"name": "search"' in listing
    assert replied({"tool_name": "f", "result": "12"}, "qwen3_coder") == (
        "<tool_response>\n12\n</tool_response>\n",
        None,
    )
    # The format a chat template writes, from its text (a warning at the start of a run whose tool_format differs).
    assert tool_formats.template_format("{{- '<tool_call>\\n<function=' + name + '>' }}<parameter=x>") == "qwen3_coder"
    assert tool_formats.template_format('{{- \'<tool_call>\\n{"name": "\' }}') == "hermes"
    assert tool_formats.template_format("{%- if message.role == 'ipython' %}<|python_tag|>") == "llama3_json"
    assert tool_formats.template_format("{{ message.content }}") is None and tool_formats.template_format(None) is None


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


def test_an_mcp_environment_answers_kimi_calls_by_their_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process, in Kimi K2's calls: each result is headed by the id of the call it answers, and submit ends the
    episode with the environment's reward."""
    monkeypatch.setenv("RLPLANE_REWARD_ENTRYPOINTS", "tests.harness.openenv_tools:*")
    environment = make_environment(PythonEnvironment(entrypoint="tests.harness.openenv_tools:make", tool_format="kimi_k2"))
    assert environment.stop == ("<|tool_calls_section_end|>",)
    episode = Episode(row={"prompt": "13*17=", "answer": "221"})
    environment.reset(episode)
    product = environment.step(episode, KIMI.format("multiply", 3, '{"a": 13, "b": 17}'))
    assert product.text == "## Return of functions.multiply:3\n221" and not product.error
    assert product.tool == ToolResult("multiply", {"a": 13, "b": 17}, "functions.multiply:3", "221")  # for the template
    assert environment.step(episode, KIMI.format("submit", 4, '{"answer": 221}')).reward == 1.0
    environment.close()


def test_a_service_that_reads_tool_calls_gets_its_formats_special_tokens_and_stop() -> None:
    from rlplane.spec.environments import HttpEnvironment
    from trainer_core.rollout.episodes import markers_of

    kimi = HttpEnvironment(url="http://127.0.0.1:9/env", tool_format="kimi_k2", stop=["\n\n"])
    assert make_environment(kimi).stop == ("\n\n", "<|tool_calls_section_end|>")
    assert markers_of(kimi) == tool_calls.FORMATS["kimi_k2"].markers
    plain = HttpEnvironment(url="http://127.0.0.1:9/env")
    assert make_environment(plain).stop == () and markers_of(plain) == ()


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


DS = {w: "<\uff5c" + w.replace(" ", "\u2581") + "\uff5c>" for w in ("tool calls begin", "tool calls end", "tool call begin")}
DS |= {w: "<\uff5c" + w.replace(" ", "\u2581") + "\uff5c>" for w in ("tool sep", "tool call end", "tool output begin")}
DS |= {w: "<\uff5c" + w.replace(" ", "\u2581") + "\uff5c>" for w in ("tool output end", "tool outputs begin", "tool outputs end")}
KIMI = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.{}:{}<|tool_call_argument_begin|>{}<|tool_call_end|>"
    "<|tool_calls_section_end|>"
)

# Each family's call as its template (or maker's encoder) writes it, what is read of it, and the answer to "12".
FAMILIES = [
    (  # Mistral, tokenizer v13 and later (mistral-common InstructTokenizerV13): two calls, the last is the call
        "mistral",
        '[TOOL_CALLS]other[ARGS]{}[TOOL_CALLS]search[ARGS]{"query": "x", "limit": 3}',
        tool_calls.Call("search", {"query": "x", "limit": 3}),
        "[TOOL_RESULTS]12[/TOOL_RESULTS]",
    ),
    (  # v11 names the call, and its result names it back
        "mistral",
        '[TOOL_CALLS]search[CALL_ID]abc123XYZ[ARGS]{"limit": 3}',
        tool_calls.Call("search", {"limit": 3}, "abc123XYZ"),
        "[TOOL_RESULTS]abc123XYZ[TOOL_CONTENT]12[/TOOL_RESULTS]",
    ),
    (  # v3 (a SentencePiece tokenizer's space after the token): a JSON list of calls
        "mistral",
        '[TOOL_CALLS] [{"name": "other", "arguments": {}}, {"name": "search", "arguments": {"limit": 3}, "id": "abc123XYZ"}]',
        tool_calls.Call("search", {"limit": 3}),
        "[TOOL_RESULTS]12[/TOOL_RESULTS]",
    ),
    (  # DeepSeek-V3 and R1: the type, then the name, then the arguments fenced as JSON
        "deepseek_v3",
        f"{DS['tool calls begin']}{DS['tool call begin']}function{DS['tool sep']}search\n```json\n"
        f'{{"limit": 3}}\n```{DS["tool call end"]}{DS["tool calls end"]}',
        tool_calls.Call("search", {"limit": 3}),
        f"{DS['tool outputs begin']}{DS['tool output begin']}12{DS['tool output end']}{DS['tool outputs end']}",
    ),
    (
        "deepseek_v31",
        f'{DS["tool calls begin"]}{DS["tool call begin"]}search{DS["tool sep"]}{{"limit": 3}}{DS["tool call end"]}'
        f"{DS['tool calls end']}",
        tool_calls.Call("search", {"limit": 3}),
        f"{DS['tool output begin']}12{DS['tool output end']}",
    ),
    (  # Kimi K2: the call's id is functions.NAME:INDEX, and its template heads the result with it
        "kimi_k2",
        "<think>search</think>" + KIMI.format("search", 1, '{"limit": 3}'),
        tool_calls.Call("search", {"limit": 3}, "functions.search:1"),
        "## Return of functions.search:1\n12",
    ),
    (  # GLM-4.5/4.6: a string as it is, any other value as JSON (a string-typed "3" stays a string)
        "glm45",
        "\n<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>3</arg_value>\n<arg_key>limit</arg_key>\n"
        '<arg_value>3</arg_value>\n<arg_key>filters</arg_key>\n<arg_value>{"lang": "en"}</arg_value>\n'
        "<arg_key>exact</arg_key>\n<arg_value>true</arg_value>\n<arg_key>after</arg_key>\n<arg_value>null</arg_value>\n"
        "</tool_call>",
        tool_calls.Call("search", {"query": "3", "limit": 3, "filters": {"lang": "en"}, "exact": True, "after": None}),
        "\n<tool_response>\n12\n</tool_response>",
    ),
    (  # gpt-oss (harmony): an analysis message, then the call on the commentary channel, answered by the tool's message
        "gpt_oss",
        "<|channel|>analysis<|message|>Search it.<|end|><|start|>assistant<|channel|>commentary to=functions.search "
        '<|constrain|>json<|message|>{"limit": 3}<|call|>',
        tool_calls.Call("search", {"limit": 3}, "functions.search"),
        "<|start|>functions.search to=assistant<|channel|>commentary<|message|>12<|end|><|start|>assistant",
    ),
    (  # the recipient in the role, as harmony's templates write a call into the history
        "gpt_oss",
        '<|start|>assistant to=functions.search<|channel|>commentary json<|message|>{"limit": 3}<|call|>',
        tool_calls.Call("search", {"limit": 3}, "functions.search"),
        "<|start|>functions.search to=assistant<|channel|>commentary<|message|>12<|end|><|start|>assistant",
    ),
]


@pytest.mark.parametrize(("fmt", "message", "call", "answer"), FAMILIES, ids=[f[0] for f in FAMILIES])
def test_each_family_reads_its_calls_and_answers_as_its_template_does(fmt, message, call, answer) -> None:
    read = tool_calls.read_call(message, fmt, TOOLS)
    assert read == call
    assert replied({"tool_name": "search", "result": "12"}, fmt, read) == (answer, None)
    with pytest.raises(ValueError, match="no tool call"):
        tool_calls.read_call("It is 42.", fmt, TOOLS)
    assert tool_calls.FORMATS[fmt].usage in tool_calls.listed(TOOLS, fmt)


def test_calls_that_do_not_parse_are_refused_with_why() -> None:
    for fmt, bad, why in [
        ("mistral", "[TOOL_CALLS]search{}", r"no \[ARGS\]"),
        ("mistral", '[TOOL_CALLS]search[ARGS]{"limit": ', "arguments is not JSON"),
        ("mistral", "[TOOL_CALLS][]", "must be followed by a call"),
        ("deepseek_v3", f"{DS['tool call begin']}function search{DS['tool call end']}", "has no"),
        ("deepseek_v31", f"{DS['tool call begin']}search{DS['tool sep']}{{", "left open"),
        ("kimi_k2", KIMI.format("search", 0, "[1]"), "must be an object, not list"),
        ("kimi_k2", "<|tool_call_begin|>functions.search:0{}<|tool_call_end|>", "has no <|tool_call_argument_begin|>"),
        ("glm45", "<tool_call>\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n</tool_call>", "names no tool"),
        ("gpt_oss", "<|channel|>commentary to=functions.search <|constrain|>json", "has no <|message|>"),
    ]:
        with pytest.raises(ValueError, match=why):
            tool_calls.read_call(bad, fmt, TOOLS)
    assert tool_calls.refusal("no tool call", "mistral") == "[TOOL_RESULTS]error: no tool call[/TOOL_RESULTS]"
    assert tool_calls.refusal("no tool call", "gpt_oss").startswith("<|start|>functions to=assistant<|channel|>")


def test_each_family_stops_where_its_call_ends_and_is_told_from_its_template() -> None:
    stops = {fmt: tool_calls.with_call_stop((), fmt) for fmt in tool_calls.FORMATS}
    assert stops["mistral"] == stops["llama3_json"] == ()  # the EOS token ends the turn
    assert stops["deepseek_v3"] == stops["deepseek_v31"] == (DS["tool calls end"],)
    assert stops["kimi_k2"] == ("<|tool_calls_section_end|>",) and stops["gpt_oss"] == ("<|call|>",)
    assert stops["glm45"] == stops["hermes"] == ("</tool_call>",)
    templates = {  # a line of each family's template
        "mistral": "{{- '[TOOL_CALLS]' + tool.function.name + '[ARGS]' + arguments }}",
        "deepseek_v3": "{{'<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + name + '\\n' + '```json' }}",
        "deepseek_v31": "{{'<｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>' + arguments }}",
        "kimi_k2": "{%- if message['tool_calls'] -%}<|tool_calls_section_begin|>{%- for tool_call in message['tool_calls'] -%}",
        "glm45": "<tool_call>{{ tc.name }}{% for k, v in _args.items() %}<arg_key>{{ k }}</arg_key>",
        "gpt_oss": "{{- '<|start|>assistant to=' + 'functions.' + name + '<|channel|>commentary json<|message|>' }}<|call|>",
    }
    for fmt, template in templates.items():
        assert tool_formats.template_format(template) == fmt


def test_a_formats_special_tokens_survive_decoding_and_end_the_turn() -> None:
    """A real tokenizer holds Kimi's markers as special tokens, which decoding drops: the policy's turn is decoded
    keeping its format's, so the call is read, and the stop string that ends a call is matched on the token."""
    import torch
    from transformers.generation.stopping_criteria import StopStringCriteria

    from trainer_core.models import build_builtin
    from trainer_core.rollout.episodes import marker_ids, policy_text

    _, tokenizer = build_builtin("tiny-gpt2", "causal", seed=0)
    markers = tool_calls.FORMATS["kimi_k2"].markers
    tokenizer.add_special_tokens({"additional_special_tokens": [*markers, "<|im_end|>"]})
    message = "Let me see." + KIMI.format("search", 0, '{"limit": 3}')
    ids = tokenizer(message + "<|im_end|>", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == 'Let me see.functions.search:0{"limit": 3}'
    kept = marker_ids(tokenizer, markers)
    assert sorted(kept.values()) == sorted(markers)
    assert policy_text(tokenizer, ids, kept) == message  # other special tokens still dropped
    assert policy_text(tokenizer, ids, {}) == tokenizer.decode(ids, skip_special_tokens=True)
    assert tool_calls.read_call(policy_text(tokenizer, ids, kept), "kimi_k2") == tool_calls.Call(
        "search", {"limit": 3}, "functions.search:0"
    )
    stop = StopStringCriteria(tokenizer, list(tool_calls.with_call_stop((), "kimi_k2")))
    ended = ids.index(tokenizer.convert_tokens_to_ids("<|tool_calls_section_end|>")) + 1
    assert stop(torch.tensor([ids[:ended]]), None).item() and not stop(torch.tensor([ids[: ended - 1]]), None).item()
