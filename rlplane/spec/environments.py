"""grpo.environment and ppo.environment: multi-turn episodes instead of one scored response (docs/rl.md, "Environments").

The policy's turn goes to an environment that answers (a tool's result, a user's turn) or ends the episode with
its reward. One kind per place an environment lives: builtin (in the trainer), http (a service of our protocol),
openenv (an OpenEnv environment server), python (an allow-listed factory: ours, or an OpenEnv environment).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from rlplane.spec.base import StrictModel

BUILTIN_ENVIRONMENTS: tuple[str, ...] = ("calculator", "python")


def _max_turns() -> Any:
    return Field(
        4,
        ge=1,
        le=64,
        description="Policy turns per episode at most: an episode the environment has not ended after them is cut off "
        "(the environment gives its verdict for a cut-off episode).",
    )


def _max_tokens() -> Any:
    return Field(
        128,
        ge=1,
        description="Longest episode after the prompt, in tokens: the policy's turns and the environment's answers "
        "together (model.max_seq_len must hold it and the prompt); an episode that would grow past it is cut off.",
    )


def _chat_role() -> Any:
    return Field(
        "user",
        pattern=r"^[a-z_]{1,32}$",
        description="In an episode whose prompt is a conversation (messages), the role of the environment's messages: "
        "each joins the conversation through the model's chat template (e.g. user, or tool where the template renders "
        "tool results), the assistant's turn closed before it and opened after it. With tool, an MCP tool "
        "environment's results go to the template as its own tool messages, answering the call the policy made. "
        "Prompts of plain text take the environment's text as it is.",
    )


ToolFormatName = Literal[
    "hermes", "qwen3_coder", "llama3_json", "mistral", "deepseek_v3", "deepseek_v31", "kimi_k2", "glm45", "gpt_oss"
]


def _tool_format() -> Any:
    return Field(
        "hermes",
        description="For an MCP tool environment: the tool-call format the policy's chat template trained it on. hermes "
        '(Hermes, Qwen2.5, Qwen3): <tool_call>{"name": ..., "arguments": {...}}</tool_call>, answered in '
        "<tool_response> tags; qwen3_coder (Qwen3-Coder): <tool_call><function=NAME><parameter=KEY>value</parameter>"
        "</function></tool_call>, each value read as the tool's schema types it, answered in <tool_response> tags; "
        'llama3_json (Llama 3.1-3.3): the whole message {"name": ..., "parameters": {...}}, ended by EOS, answered '
        "with the result's text (set chat_role: ipython in conversations); mistral (tokenizer v11+): [TOOL_CALLS]NAME"
        "[ARGS]{...}, ended by EOS, answered [TOOL_RESULTS]...[/TOOL_RESULTS]; deepseek_v3 (DeepSeek-V3, R1) and "
        "deepseek_v31 (DeepSeek-V3.1): DeepSeek's tool-call tokens, answered in its tool-output tokens; kimi_k2 (Kimi "
        "K2): <|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}<|tool_call_end|>; glm45 (GLM-4.5, "
        "4.6): <tool_call>NAME<arg_key>KEY</arg_key><arg_value>value</arg_value></tool_call>; gpt_oss (harmony): "
        "to=functions.NAME ... <|message|>{...}<|call|>, answered with harmony's tool message. A format's special "
        "tokens are kept when the policy's turns are decoded (docs/rl.md).",
    )


def _stop() -> Any:
    return Field(
        default_factory=list,
        max_length=16,
        description="Strings that end a policy turn, so the environment can answer (e.g. a tool call's closing tag); "
        "grpo.gen.stop and the EOS token end one too.",
    )


class SandboxLimits(StrictModel):
    """What code run by the builtin python environment may use (a subprocess with no network and none of the
    trainer's environment variables, in a scratch directory removed after)."""

    cpu_s: float = Field(5.0, gt=0, le=600, description="CPU seconds (RLIMIT_CPU); past them the code is killed.")
    wall_s: float = Field(10.0, gt=0, le=3600, description="Wall-clock seconds; past them the code is killed.")
    memory_mb: int = Field(512, ge=64, le=1_048_576, description="Address space in MiB (RLIMIT_AS).")
    output_kb: int = Field(
        64, ge=1, le=65536, description="The most the code may write to a file, stdout or stderr, in KiB (RLIMIT_FSIZE)."
    )


class BuiltinEnvironment(StrictModel):
    """An environment that ships with the trainer: calculator (a tool the policy calls as <calc>17*23</calc> and
    that answers <result>391</result>; the reward is the final answer's correctness against the row's answer), or
    python (the policy's code runs in a sandbox with the row's tests; the reward is 1 when they pass)."""

    kind: Literal["builtin"] = Field("builtin", description="builtin: an environment of the trainer's own.")
    name: Literal["calculator", "python"] = Field(description="Which: " + ", ".join(BUILTIN_ENVIRONMENTS) + ".")
    max_turns: int = _max_turns()
    max_tokens: int = _max_tokens()
    chat_role: str = _chat_role()
    sandbox: SandboxLimits = Field(
        default_factory=SandboxLimits, description="Limits of the code the python environment runs (python only)."
    )


class HttpEnvironment(StrictModel):
    """Episodes played by a service over HTTP: POST <url>/reset, <url>/step and <url>/cutoff (docs/rl.md)."""

    kind: Literal["http"] = Field("http", description="http: an environment service over HTTP.")
    url: Annotated[str, StringConstraints(pattern=r"^https?://[^\s/?#]+[^\s?#]*$")] = Field(
        description="http:// or https:// base URL; /reset, /step and /cutoff are posted to under it."
    )
    timeout_s: float = Field(30.0, gt=0, description="Seconds to wait for one answer before retrying.")
    attempts: int = Field(
        3, ge=1, le=10, description="Tries per request when the service is unreachable, times out or answers 429/5xx."
    )
    backoff_s: float = Field(1.0, ge=0, le=60, description="Wait before the second try; doubled before each later one.")
    concurrency: int = Field(8, ge=1, le=256, description="Requests in flight at once (one per live episode).")
    headers: dict[str, str] = Field(
        default_factory=dict, description="Extra request headers; stored in plain text with the run, so no secrets."
    )
    tool_format: ToolFormatName | None = Field(
        None,
        description="Where the service reads tool calls: the format the policy writes them in (as an MCP environment's "
        "tool_format). Its special tokens are kept in the turns sent, its end of a call ends a turn, and the tools a "
        "reset offers are listed with its way to call one. Unset: turns are sent without special tokens, and tools "
        "are listed as hermes.",
    )
    stop: list[str] = _stop()
    max_turns: int = _max_turns()
    max_tokens: int = _max_tokens()
    chat_role: str = _chat_role()


class OpenEnvEnvironment(StrictModel):
    """Episodes played by an OpenEnv environment server (openenv-core's: one WebSocket session per episode at
    <url>/ws, its Action's JSON schema at <url>/schema), as HF's OpenEnv environments are served. A server whose Action
    is CallToolAction serves an MCP tool environment: the policy calls its tools in tool_format (docs/rl.md)."""

    kind: Literal["openenv"] = Field("openenv", description="openenv: an OpenEnv environment server.")
    url: Annotated[str, StringConstraints(pattern=r"^(https?|wss?)://[^\s/?#]+[^\s?#]*$")] = Field(
        description="The server's base URL (http://, https://, ws:// or wss://); its /ws and /schema are under it."
    )
    timeout_s: float = Field(60.0, gt=0, description="Seconds to wait to connect, and for each answer.")
    sessions: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Sessions the server allows at once (its max_concurrent_envs; 1 unless its environment supports "
        "concurrent sessions). Every live episode holds one, so each rank plays at most this many episodes at once, "
        "the next starting as one ends (with several ranks, give each its own server or divide the server's limit); "
        "null: a "
        "rank's episodes all at once (its share of train.batch_size, or of an evaluation's batch).",
    )
    concurrency: int = Field(8, ge=1, le=256, description="Calls to the server in flight at once.")
    stop: list[str] = _stop()
    max_turns: int = _max_turns()
    max_tokens: int = _max_tokens()
    chat_role: str = _chat_role()
    tool_format: ToolFormatName = _tool_format()


class PythonEnvironment(StrictModel):
    """An allow-listed factory, called with no arguments, that returns an environment: one of ours (reset, step,
    cut_off; docs/rl.md) or an OpenEnv one (openenv-core's Environment: reset, step(action) -> observation),
    which is then made once per episode; an OpenEnv MCPEnvironment's tools are called in tool_format."""

    kind: Literal["python"] = Field("python", description="python: an environment from an allow-listed factory.")
    entrypoint: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")] = Field(
        description="module:factory, e.g. my_envs.wordle:make; only entrypoints matching RLPLANE_REWARD_ENTRYPOINTS on "
        "the server and the worker run (the setting that allows python rewards)."
    )
    stop: list[str] = _stop()
    max_turns: int = _max_turns()
    max_tokens: int = _max_tokens()
    chat_role: str = _chat_role()
    tool_format: ToolFormatName = _tool_format()


EnvironmentSpec = Annotated[
    BuiltinEnvironment | HttpEnvironment | OpenEnvEnvironment | PythonEnvironment, Field(discriminator="kind")
]
