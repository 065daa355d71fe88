"""How each family of chat templates writes a tool call and is answered (`environment.tool_format`): one ToolFormat per
family, read from the templates and the model makers' own encoders (cited per format below).

    hermes       Hermes, Qwen2.5, Qwen3: <tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call>
                 answered <tool_response>12</tool_response>; the turn stops at </tool_call>
    qwen3_coder  Qwen3-Coder: <tool_call><function=multiply><parameter=a>3</parameter>...</function></tool_call>, each
                 parameter's text read as its JSON schema's type says; answered as hermes
    llama3_json  Llama 3.1-3.3: the whole message {"name": "multiply", "parameters": {"a": 3, "b": 4}}, ended by EOS;
                 answered with the result's text
    mistral      Mistral (tokenizer v11 and later): [TOOL_CALLS]multiply[ARGS]{"a": 3, "b": 4}, ended by EOS (also read:
                 v11's [CALL_ID]id before [ARGS], and v3's [TOOL_CALLS][{"name": ..., "arguments": ...}]); answered
                 [TOOL_RESULTS]12[/TOOL_RESULTS] (v11, after a call id: [TOOL_RESULTS]id[TOOL_CONTENT]12[/TOOL_RESULTS])
    deepseek_v3  DeepSeek-V3, R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>multiply
                 ```json {"a": 3, "b": 4} ```<｜tool▁call▁end｜><｜tool▁calls▁end｜> (the JSON fenced, on lines of its
                 own); answered <｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>12<｜tool▁output▁end｜><｜tool▁outputs▁end｜>
    deepseek_v31 DeepSeek-V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>multiply<｜tool▁sep｜>{"a": 3, "b": 4}
                 <｜tool▁call▁end｜><｜tool▁calls▁end｜>; answered <｜tool▁output▁begin｜>12<｜tool▁output▁end｜>
    kimi_k2      Kimi K2: <|tool_calls_section_begin|><|tool_call_begin|>functions.multiply:0
                 <|tool_call_argument_begin|>{"a": 3, "b": 4}<|tool_call_end|><|tool_calls_section_end|>; answered as
                 its template's tool message says: "## Return of functions.multiply:0\n12"
    glm45        GLM-4.5, 4.6: <tool_call>multiply\n<arg_key>a</arg_key>\n<arg_value>3</arg_value>\n...</tool_call>,
                 a value JSON unless the schema types it a string; answered <tool_response>\n12\n</tool_response>
    gpt_oss      gpt-oss (OpenAI's harmony): <|channel|>commentary to=functions.multiply <|constrain|>json<|message|>
                 {"a": 3, "b": 4}<|call|> (the recipient also read from the role, `assistant to=functions.multiply`);
                 answered with harmony's tool message, the assistant's next message opened:
                 <|start|>functions.multiply to=assistant<|channel|>commentary<|message|>12<|end|><|start|>assistant

(The DeepSeek markers are ASCII < and >, FULLWIDTH VERTICAL LINE U+FF5C, and words joined by LOWER ONE EIGHTH BLOCK
U+2581.) Sources: Mistral's mistral-common encoders (InstructTokenizerV3, V11, V13); DeepSeek's templates for V3/R1
and V3.1; Moonshot's Kimi-K2 tool-call guide and template; zai-org's GLM-4.5/4.6 templates; OpenAI's harmony
format (docs/format.md). vLLM's and SGLang's parsers of the same were read to check them.

A format's `markers` are the strings the real tokenizers hold as special tokens: decoding with skip_special_tokens
would drop them, so a policy's turn is decoded keeping these (rollout/episodes.py: policy_text), and the stop strings
that end a call can be matched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)
_GLM_ARGUMENT = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


@dataclass(frozen=True)
class Call:
    """A tool call read from a policy's message. `ref`: how the answer refers back to it (Kimi's call id, Mistral
    v11's, gpt-oss's recipient), where the format does."""

    name: str
    arguments: Any
    ref: str | None = None


@dataclass(frozen=True)
class ToolFormat:
    """How one family of chat templates writes a tool call and its result."""

    close: str | None  # where a turn that calls a tool stops (None: at the EOS token)
    usage: str  # how to call a tool, as a listing of the tools says it
    read: Callable[[str, list[dict[str, Any]]], Call]  # (message, tools) -> its last call; ValueError says why not
    answered: Callable[[str, Call | None], str]  # a result (of the call, where one was read) as the policy reads it
    markers: tuple[str, ...] = field(default=())  # special tokens of the format, kept when a turn is decoded


def _last_between(message: str, open_: str, close: str | None, example: str) -> str:
    """The body of the message's last `open_` ... `close` (to the end where `close` is None or missing and allowed)."""
    start = message.rfind(open_)
    if start < 0:
        raise ValueError(f"no tool call: call a tool as {example}")
    body = message[start + len(open_) :]
    if close is None:
        return body.strip()
    end = body.find(close)
    if end < 0:
        raise ValueError(f"a {open_} left open (no {close})")
    return body[:end].strip()


def _json_value(text: str, what: str) -> Any:
    """The JSON value at the start of `text` (what follows it is ignored: a stop token's text, say)."""
    try:
        return json.JSONDecoder().raw_decode(text.strip())[0]
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not JSON ({exc.msg})") from None


def _json_call(body: str, arguments_key: str) -> Call:
    call = _json_value(body, "the tool call")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ValueError(f'the tool call needs a "name" (a string) and "{arguments_key}" (an object)')
    return Call(call["name"], call.get(arguments_key, {}))


def _named(name: str) -> str:
    name = name.strip()
    if not name:
        raise ValueError("the tool call names no tool")
    return name


# --- hermes, qwen3_coder, llama3_json ---

_HERMES_USAGE = f'{OPEN}{{"name": "<tool>", "arguments": {{...}}}}{CLOSE}'
_CODER_USAGE = f"{OPEN}<function=<tool>><parameter=<name>><value></parameter>...</function>{CLOSE}"
_LLAMA_USAGE = 'your whole message a JSON object: {"name": "<tool>", "parameters": {...}}'


def _tagged(text: str, _call: Call | None = None) -> str:
    return f"<tool_response>\n{text}\n</tool_response>\n"


def _read_hermes(message: str, _tools: list[dict[str, Any]]) -> Call:
    return _json_call(_last_between(message, OPEN, CLOSE, _HERMES_USAGE), "arguments")


def _read_coder(message: str, tools: list[dict[str, Any]]) -> Call:
    body = _last_between(message, OPEN, CLOSE, _CODER_USAGE)
    function = _FUNCTION.search(body)
    if function is None:
        raise ValueError(f"the tool call names no <function=...>: call a tool as {_CODER_USAGE}")
    name = function.group(1).strip()
    properties = _parameters_of(name, tools)
    arguments = {}
    for key, raw in _PARAMETER.findall(function.group(2)):
        key = key.strip()
        arguments[key] = _typed(raw.removeprefix("\n").removesuffix("\n"), properties.get(key))
    return Call(name, arguments)


def _read_llama(message: str, _tools: list[dict[str, Any]]) -> Call:
    body = message.strip().removeprefix("<|python_tag|>").strip()
    if not body.startswith("{"):
        raise ValueError(f"no tool call: call a tool with {_LLAMA_USAGE}")
    return _json_call(body, "parameters")


# --- Mistral ---

_MISTRAL = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CONTENT]")
_MISTRAL_USAGE = '[TOOL_CALLS]<tool>[ARGS]{"<name>": <value>, ...}'


def _read_mistral(message: str, _tools: list[dict[str, Any]]) -> Call:
    body = _last_between(message, "[TOOL_CALLS]", None, _MISTRAL_USAGE)
    if body.startswith("["):  # v3 and earlier: a JSON list of calls; the last one is the call
        calls = _json_value(body, "the tool calls")
        if not isinstance(calls, list) or not calls:
            raise ValueError("[TOOL_CALLS] must be followed by a call: <tool>[ARGS]{...}")
        return _json_call(json.dumps(calls[-1]), "arguments")
    head, has_args, arguments = body.partition("[ARGS]")
    if not has_args:
        raise ValueError(f"the tool call has no [ARGS]: call a tool as {_MISTRAL_USAGE}")
    name, has_id, call_id = head.partition("[CALL_ID]")
    return Call(_named(name), _json_value(arguments, "the tool call's arguments"), call_id.strip() if has_id else None)


def _mistral_answer(text: str, call: Call | None) -> str:
    if call is not None and call.ref:  # v11 names the call it answers
        return f"[TOOL_RESULTS]{call.ref}[TOOL_CONTENT]{text}[/TOOL_RESULTS]"
    return f"[TOOL_RESULTS]{text}[/TOOL_RESULTS]"


# --- DeepSeek ---


def _deepseek(word: str) -> str:
    return "<\uff5c" + word.replace(" ", "\u2581") + "\uff5c>"


_DS_CALLS, _DS_CALLS_END = _deepseek("tool calls begin"), _deepseek("tool calls end")
_DS_CALL, _DS_SEP, _DS_CALL_END = _deepseek("tool call begin"), _deepseek("tool sep"), _deepseek("tool call end")
_DS_OUTPUTS, _DS_OUTPUTS_END = _deepseek("tool outputs begin"), _deepseek("tool outputs end")
_DS_OUTPUT, _DS_OUTPUT_END = _deepseek("tool output begin"), _deepseek("tool output end")
_DEEPSEEK = (_DS_CALLS, _DS_CALLS_END, _DS_CALL, _DS_SEP, _DS_CALL_END, _DS_OUTPUTS, _DS_OUTPUTS_END, _DS_OUTPUT, _DS_OUTPUT_END)
_V3_USAGE = f'{_DS_CALLS}{_DS_CALL}function{_DS_SEP}<tool>\n```json\n{{"<name>": <value>}}\n```{_DS_CALL_END}{_DS_CALLS_END}'
_V31_USAGE = f'{_DS_CALLS}{_DS_CALL}<tool>{_DS_SEP}{{"<name>": <value>}}{_DS_CALL_END}{_DS_CALLS_END}'
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def _read_deepseek_v3(message: str, _tools: list[dict[str, Any]]) -> Call:
    body = _last_between(message, _DS_CALL, _DS_CALL_END, _V3_USAGE)
    kind, has_sep, rest = body.partition(_DS_SEP)
    if not has_sep:
        raise ValueError(f"the tool call has no {_DS_SEP}: call a tool as {_V3_USAGE}")
    name, _, arguments = rest.partition("\n")
    fenced = _FENCE.match(arguments.strip())
    return Call(_named(name), _json_value(fenced.group(1) if fenced else arguments, "the tool call's arguments"))


def _read_deepseek_v31(message: str, _tools: list[dict[str, Any]]) -> Call:
    body = _last_between(message, _DS_CALL, _DS_CALL_END, _V31_USAGE)
    name, has_sep, arguments = body.partition(_DS_SEP)
    if not has_sep:
        raise ValueError(f"the tool call has no {_DS_SEP}: call a tool as {_V31_USAGE}")
    return Call(_named(name), _json_value(arguments, "the tool call's arguments"))


# --- Kimi K2 ---

_KIMI_SECTION, _KIMI_SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
_KIMI_CALL, _KIMI_ARGS, _KIMI_CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_KIMI = (_KIMI_SECTION, _KIMI_SECTION_END, _KIMI_CALL, _KIMI_ARGS, _KIMI_CALL_END)
_KIMI_USAGE = f'{_KIMI_SECTION}{_KIMI_CALL}functions.<tool>:0{_KIMI_ARGS}{{"<name>": <value>}}{_KIMI_CALL_END}{_KIMI_SECTION_END}'


def _read_kimi(message: str, _tools: list[dict[str, Any]]) -> Call:
    body = _last_between(message, _KIMI_CALL, _KIMI_CALL_END, _KIMI_USAGE)
    call_id, has_args, arguments = body.partition(_KIMI_ARGS)
    if not has_args:
        raise ValueError(f"the tool call has no {_KIMI_ARGS}: call a tool as {_KIMI_USAGE}")
    call_id = call_id.strip()
    name = call_id.removeprefix("functions.").rsplit(":", 1)[0]  # functions.NAME:INDEX
    return Call(_named(name), _json_value(arguments, "the tool call's arguments"), call_id)


def _kimi_answer(text: str, call: Call | None) -> str:
    return f"## Return of {call.ref}\n{text}" if call is not None and call.ref else text


# --- GLM-4.5 / 4.6 ---

_GLM_USAGE = f"{OPEN}<tool>\n<arg_key><name></arg_key>\n<arg_value><value></arg_value>\n{CLOSE}"


def _read_glm(message: str, tools: list[dict[str, Any]]) -> Call:
    body = _last_between(message, OPEN, CLOSE, _GLM_USAGE)
    name = _named(body.split("<arg_key>", 1)[0])
    properties = _parameters_of(name, tools)
    arguments = {}
    for key, raw in _GLM_ARGUMENT.findall(body):
        key = key.strip()
        schema = properties.get(key)
        kinds = schema.get("type") if isinstance(schema, Mapping) else None
        kinds = [kinds] if isinstance(kinds, str) else kinds if isinstance(kinds, list) else []
        if "string" in kinds:  # GLM writes a string as it is (and a null as JSON's)
            arguments[key] = None if raw == "null" and "null" in kinds else raw
            continue
        try:
            arguments[key] = json.loads(raw)  # and any other value as JSON
        except json.JSONDecodeError:
            arguments[key] = _typed(raw, schema)
    return Call(name, arguments)


# --- gpt-oss (harmony) ---

_HARMONY = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>")
_OSS_USAGE = '<|channel|>commentary to=functions.<tool> <|constrain|>json<|message|>{"<name>": <value>}<|call|>'
_RECIPIENT = re.compile(r"to=functions\.([^\s<]+)")


def _read_gpt_oss(message: str, _tools: list[dict[str, Any]]) -> Call:
    at = message.rfind("to=functions.")
    if at < 0:
        raise ValueError(f"no tool call: call a tool as {_OSS_USAGE}")
    name = _RECIPIENT.match(message, at)
    start = message.find("<|message|>", at)
    if name is None or start < 0:
        raise ValueError(f"the tool call has no <|message|>: call a tool as {_OSS_USAGE}")
    arguments = message[start + len("<|message|>") :].split("<|call|>", 1)[0]
    return Call(name.group(1), _json_value(arguments, "the tool call's arguments"), f"functions.{name.group(1)}")


def _gpt_oss_answer(text: str, call: Call | None) -> str:
    author = call.ref if call is not None and call.ref else "functions"
    return f"<|start|>{author} to=assistant<|channel|>commentary<|message|>{text}<|end|><|start|>assistant"


FORMATS: dict[str, ToolFormat] = {
    "hermes": ToolFormat(CLOSE, _HERMES_USAGE, _read_hermes, _tagged),
    "qwen3_coder": ToolFormat(CLOSE, _CODER_USAGE, _read_coder, _tagged),
    "llama3_json": ToolFormat(None, _LLAMA_USAGE, _read_llama, lambda text, _call: text, ("<|python_tag|>",)),
    "mistral": ToolFormat(None, _MISTRAL_USAGE, _read_mistral, _mistral_answer, _MISTRAL),
    "deepseek_v3": ToolFormat(
        _DS_CALLS_END,
        _V3_USAGE,
        _read_deepseek_v3,
        lambda text, _call: f"{_DS_OUTPUTS}{_DS_OUTPUT}{text}{_DS_OUTPUT_END}{_DS_OUTPUTS_END}",
        _DEEPSEEK,
    ),
    "deepseek_v31": ToolFormat(
        _DS_CALLS_END, _V31_USAGE, _read_deepseek_v31, lambda text, _call: f"{_DS_OUTPUT}{text}{_DS_OUTPUT_END}", _DEEPSEEK
    ),
    "kimi_k2": ToolFormat(_KIMI_SECTION_END, _KIMI_USAGE, _read_kimi, _kimi_answer, _KIMI),
    "glm45": ToolFormat(CLOSE, _GLM_USAGE, _read_glm, lambda text, _call: f"\n<tool_response>\n{text}\n</tool_response>"),
    "gpt_oss": ToolFormat("<|call|>", _OSS_USAGE, _read_gpt_oss, _gpt_oss_answer, _HARMONY),
}


def _parameters_of(name: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema properties of tool `name`'s parameters (none for a tool not offered: its call is refused later)."""
    for tool in tools:
        function = tool.get("function") or {}
        if function.get("name") == name:
            properties = (function.get("parameters") or {}).get("properties")
            return properties if isinstance(properties, dict) else {}
    return {}


def _typed(text: str, schema: Any) -> Any:
    """A parameter's text as its schema's type: what Qwen3-Coder writes as text is typed by the tool's schema. Text
    that is no value of the type stays text, and the tool refuses it with why."""
    kinds = schema.get("type") if isinstance(schema, Mapping) else None
    kinds = [kinds] if isinstance(kinds, str) else [k for k in kinds or [] if isinstance(k, str)]
    value = text.strip()
    if "null" in kinds and value.lower() in ("null", "none"):
        return None
    for kind in kinds:
        try:
            if kind == "integer":
                return int(value)
            if kind == "number":
                number = float(value)
                return int(number) if number.is_integer() and re.fullmatch(r"-?\d+", value) else number
            if kind == "boolean" and value.lower() in ("true", "false"):
                return value.lower() == "true"
            if kind in ("object", "array"):
                parsed = json.loads(value)
                if isinstance(parsed, dict if kind == "object" else list):
                    return parsed
        except ValueError:
            continue
    return text


def template_format(template: Any) -> str | None:
    """The tool-call format a chat template writes (its text names the markers), where it shows one."""
    text = template if isinstance(template, str) else json.dumps(template, ensure_ascii=False) if template else ""
    if "[TOOL_CALLS]" in text:
        return "mistral"
    if _DS_CALL in text or "tool▁call▁begin" in text:
        return "deepseek_v3" if "```json" in text else "deepseek_v31"
    if _KIMI_SECTION in text:
        return "kimi_k2"
    if "<arg_key>" in text:
        return "glm45"
    if "to=functions." in text or ("<|channel|>" in text and "<|call|>" in text):
        return "gpt_oss"
    if "<function=" in text and "<parameter=" in text:
        return "qwen3_coder"
    if OPEN in text:
        return "hermes"
    if "<|python_tag|>" in text or "ipython" in text:
        return "llama3_json"
    return None
