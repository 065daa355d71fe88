"""OpenEnv's MCP tool environments (openenv-core's MCPEnvironment, RFC 003: step(ListToolsAction) lists the tools,
step(CallToolAction) calls one) played as text, in the tool-call format the policy's chat template trained it on
(`environment.tool_format`):

    tools        the episode's tools (Episode.tools), JSON function schemas the rollout shows: through the chat template
                 where it renders tools, else as text heading the opening: how to call, then <tools> a line per tool
    hermes       Hermes, Qwen2.5, Qwen3: a JSON object in tags; the turn stops at the closing tag
                     <tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call>
                 answered <tool_response>12</tool_response>
    qwen3_coder  Qwen3-Coder: XML in the same tags, each parameter's text read as its JSON schema's type says
                     <tool_call><function=multiply><parameter=a>3</parameter><parameter=b>4</parameter></function></tool_call>
                 answered <tool_response>12</tool_response>
    llama3_json  Llama 3.1-3.3: the whole message a JSON object, ended by the EOS token (no stop string)
                     {"name": "multiply", "parameters": {"a": 3, "b": 4}}
                 answered with the result's text (the template's ipython role, where chat_role says so)

The environment ends the episode (a `submit` tool, say) with its reward. A turn with no call, or a call that does not
parse, is answered with why (an error turn), as any message that is no valid action is; a tool's own failure comes
back as its response, marked as an error. Both openenv.py (in process) and openenv_server.py (over the wire) use this
on the observations' JSON, so they read tools and results alike; http.py checks the tools a service's reset offers
(functions_of), and recipes/episodes.py and chat_turns.py show them (listed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_REASON_CHARS = 200  # of an error's first line, kept for the log (the policy is shown all of it)
_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)


@dataclass(frozen=True)
class ToolFormat:
    """How one family of chat templates writes a tool call and its result."""

    close: str | None  # where a turn that calls a tool stops (None: at the EOS token)
    usage: str  # how to call a tool, as a listing of the tools says it
    read: Callable[[str, list[dict[str, Any]]], tuple[str, Any]]  # (message, tools) -> (tool name, arguments)
    answered: Callable[[str], str]  # a result as the policy reads it


def _tagged(text: str) -> str:
    return f"<tool_response>\n{text}\n</tool_response>\n"


def _last_tagged(message: str, example: str) -> str:
    """The body of the message's last <tool_call> ... </tool_call>."""
    start = message.rfind(OPEN)
    if start < 0:
        raise ValueError(f"no tool call: call a tool as {example}")
    close = message.find(CLOSE, start)
    if close < 0:
        raise ValueError(f"a {OPEN} left open (no {CLOSE})")
    return message[start + len(OPEN) : close].strip()


def _json_call(body: str, arguments_key: str) -> tuple[str, Any]:
    try:
        call = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the tool call is not JSON ({exc.msg})") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ValueError(f'the tool call needs a "name" (a string) and "{arguments_key}" (an object)')
    return call["name"], call.get(arguments_key, {})


_HERMES_USAGE = f'{OPEN}{{"name": "<tool>", "arguments": {{...}}}}{CLOSE}'
_CODER_USAGE = f"{OPEN}<function=<tool>><parameter=<name>><value></parameter>...</function>{CLOSE}"
_LLAMA_USAGE = 'your whole message a JSON object: {"name": "<tool>", "parameters": {...}}'


def _read_hermes(message: str, _tools: list[dict[str, Any]]) -> tuple[str, Any]:
    return _json_call(_last_tagged(message, _HERMES_USAGE), "arguments")


def _read_coder(message: str, tools: list[dict[str, Any]]) -> tuple[str, Any]:
    body = _last_tagged(message, _CODER_USAGE)
    function = _FUNCTION.search(body)
    if function is None:
        raise ValueError(f"the tool call names no <function=...>: call a tool as {_CODER_USAGE}")
    name = function.group(1).strip()
    properties = _parameters_of(name, tools)
    arguments = {}
    for key, raw in _PARAMETER.findall(function.group(2)):
        key = key.strip()
        arguments[key] = _typed(raw.removeprefix("\n").removesuffix("\n"), properties.get(key))
    return name, arguments


def _read_llama(message: str, _tools: list[dict[str, Any]]) -> tuple[str, Any]:
    body = message.strip().removeprefix("<|python_tag|>").strip()
    if not body.startswith("{"):
        raise ValueError(f"no tool call: call a tool with {_LLAMA_USAGE}")
    return _json_call(body, "parameters")


FORMATS: dict[str, ToolFormat] = {
    "hermes": ToolFormat(CLOSE, _HERMES_USAGE, _read_hermes, _tagged),
    "qwen3_coder": ToolFormat(CLOSE, _CODER_USAGE, _read_coder, _tagged),
    "llama3_json": ToolFormat(None, _LLAMA_USAGE, _read_llama, lambda text: text),
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
    """The tool-call format a chat template writes (its text names the tags), where it shows one."""
    text = template if isinstance(template, str) else json.dumps(template) if template else ""
    if "<function=" in text and "<parameter=" in text:
        return "qwen3_coder"
    if OPEN in text:
        return "hermes"
    if "<|python_tag|>" in text or "ipython" in text:
        return "llama3_json"
    return None


def with_call_stop(stop: tuple[str, ...], fmt: str = "hermes") -> tuple[str, ...]:
    """An MCP environment's stop strings: the spec's, and the end of a tool call where the format has one."""
    close = FORMATS[fmt].close
    return stop if close is None or close in stop else (*stop, close)


def is_tool_action(schema: Mapping[str, Any]) -> bool:
    """Whether an Action's JSON schema is OpenEnv's CallToolAction (an MCP environment's server is built with it)."""
    kind = (schema.get("properties") or {}).get("type") or {}
    return isinstance(kind, Mapping) and kind.get("const") == "call_tool"


def schemas(tools: Any) -> list[dict[str, Any]]:
    """A ListToolsObservation's tools as JSON function schemas (what chat templates take as `tools`); ValueError when
    `tools` is no list of named tools."""
    if not isinstance(tools, list) or not all(isinstance(t, Mapping) and isinstance(t.get("name"), str) for t in tools):
        raise ValueError(f"list_tools answered {json.dumps(tools, default=str)[:200]}, not a list of named tools")
    return [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool.get("description") or "",
                "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]


def functions_of(value: Any) -> list[dict[str, Any]]:
    """`value` as a list of JSON function schemas ({"type": "function", "function": {"name": ..., ...}}); ValueError
    says what is wrong."""
    if not isinstance(value, list):
        raise ValueError(f"tools must be a list of function schemas, not {type(value).__name__}")
    for i, item in enumerate(value):
        function = item.get("function") if isinstance(item, Mapping) else None
        if not (isinstance(item, Mapping) and item.get("type") == "function" and isinstance(function, Mapping)):
            raise ValueError(f'tools[{i}] must be {{"type": "function", "function": {{"name": ..., ...}}}}')
        if not isinstance(function.get("name"), str):
            raise ValueError(f"tools[{i}].function needs a name (a string)")
    return [dict(item) for item in value]


def listed(functions: list[dict[str, Any]], fmt: str = "hermes") -> str:
    """Function schemas as text, with how to call one: what a prompt shows where no chat template renders them."""
    lines = "\n".join(json.dumps(function) for function in functions)
    return f"\nTools you may call, one per turn as {FORMATS[fmt].usage}:\n<tools>\n{lines}\n</tools>\n"


def call_fields(message: str, fmt: str = "hermes", tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The CallToolAction's fields of the policy's message (its last tool call, in format `fmt`; `tools`: the episode's,
    whose schemas type a Qwen3-Coder call's parameters); ValueError says what is wrong."""
    name, arguments = FORMATS[fmt].read(message, tools or [])
    if isinstance(arguments, str):  # some templates write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    if not isinstance(arguments, dict):
        raise ValueError(f"the tool call's arguments must be an object, not {type(arguments).__name__}")
    return {"type": "call_tool", "tool_name": name, "arguments": arguments}


def response(observation: Mapping[str, Any], fmt: str = "hermes") -> tuple[str, str | None]:
    """A CallToolObservation's JSON as the policy is answered (in format `fmt`), and the error's reason when the call
    failed (a framework error, or a result that is one)."""
    answered = FORMATS[fmt].answered
    error, result = observation.get("error"), observation.get("result")
    if isinstance(error, Mapping):
        message = str(error.get("message") or error.get("error_type") or "the call failed")
        return answered(f"error: {message}"), f"tool {observation.get('tool_name')!r}: {_first_line(message)}"
    text = _result_text(result)
    if isinstance(result, Mapping) and result.get("is_error"):
        return answered(text), f"tool {observation.get('tool_name')!r}: {_first_line(text)}"
    return answered(text), None


def _result_text(result: Any) -> str:
    """An MCP CallToolResult's text contents (other contents by their type), else its structured content; any other
    result as text or JSON."""
    if isinstance(result, Mapping) and isinstance(result.get("content"), list):
        parts = [
            str(item.get("text", "")) if item.get("type") == "text" else f"[{item.get('type')}]"
            for item in result["content"]
            if isinstance(item, Mapping)
        ]
        if parts:
            return "\n".join(parts)
        result = result.get("structured_content") or result.get("data")
    return result if isinstance(result, str) else json.dumps(result, default=str)


def refusal(why: str, fmt: str = "hermes") -> str:
    """The answer to a turn with no usable tool call."""
    return FORMATS[fmt].answered(f"error: {why}")


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:_REASON_CHARS]
