"""OpenEnv's MCP tool environments (openenv-core's MCPEnvironment, RFC 003: step(ListToolsAction) lists the tools,
step(CallToolAction) calls one) played as text, in the tool-call format the policy's chat template trained it on
(`environment.tool_format`):

    tools        the episode's tools (Episode.tools), JSON function schemas the rollout shows: through the chat template
                 where it renders tools, else as text heading the opening: how to call, then <tools> a line per tool
    a call       the policy's turn read in the format its chat template writes calls (tool_formats.py: hermes,
                 qwen3_coder, llama3_json, mistral, deepseek_v3, deepseek_v31, kimi_k2, glm45, gpt_oss), and the
                 result answered as that format answers one

The environment ends the episode (a `submit` tool, say) with its reward. A turn with no call, or a call that does not
parse, is answered with why (an error turn), as any message that is no valid action is; a tool's own failure comes
back as its response, marked as an error. Both openenv.py (in process) and openenv_server.py (over the wire) use this
on the observations' JSON, so they read tools and results alike; http.py checks the tools a service's reset offers
(functions_of), and rollout/episodes.py and chat_turns.py show them (listed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from trainer_core.environments.base import Reply, ToolResult, answer
from trainer_core.environments.tool_formats import FORMATS, Call

_REASON_CHARS = 200  # of an error's first line, kept for the log (the policy is shown all of it)


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


def read_call(message: str, fmt: str = "hermes", tools: list[dict[str, Any]] | None = None) -> Call:
    """The policy's message's last tool call, in format `fmt` (`tools`: the episode's, whose schemas type the values
    that Qwen3-Coder and GLM write as text), its arguments an object; ValueError says what is wrong."""
    call = FORMATS[fmt].read(message, tools or [])
    arguments = call.arguments
    if isinstance(arguments, str):  # some templates write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    if not isinstance(arguments, dict):
        raise ValueError(f"the tool call's arguments must be an object, not {type(arguments).__name__}")
    return Call(call.name, arguments, call.ref)


def outcome(observation: Mapping[str, Any]) -> tuple[str, str | None]:
    """A CallToolObservation's JSON as the tool gave it: the result's text (a failure's as `error: why`), and the
    failure's reason when the call failed (a framework error, or a result that is one)."""
    error, result = observation.get("error"), observation.get("result")
    if isinstance(error, Mapping):
        message = str(error.get("message") or error.get("error_type") or "the call failed")
        return f"error: {message}", f"tool {observation.get('tool_name')!r}: {_first_line(message)}"
    text = _result_text(result)
    if isinstance(result, Mapping) and result.get("is_error"):
        return text, f"tool {observation.get('tool_name')!r}: {_first_line(text)}"
    return text, None


def answered(observation: Mapping[str, Any], fmt: str = "hermes", call: Call | None = None) -> Reply:
    """The reply to `call` that `observation` answers: outcome()'s text in format `fmt` (which may refer back to the
    call), the failure's reason, and the call with the result as the tool gave it, for a chat template that renders
    tool messages itself."""
    text, failed = outcome(observation)
    result = ToolResult(call.name, call.arguments, call.ref, text) if call is not None else None
    return answer(FORMATS[fmt].answered(text, call), tool_call=True, error=failed is not None, reason=failed, tool=result)


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
    return FORMATS[fmt].answered(f"error: {why}", None)


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:_REASON_CHARS]
