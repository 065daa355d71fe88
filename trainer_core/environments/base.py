"""What every environment shares: the episode it is given, the reply it gives, the protocol, the error.

Shaped after OpenEnv's reset/step (openenv-core: `reset() -> observation`, `step(action) -> observation` with
`done` and `reward`), on text: the policy's message is the action and the reply's text the observation. One
environment object serves a whole batch, so what it keeps per episode lives on the Episode (`state`), not on itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from trainer_core.data import DataError

# How a policy turn ended: its EOS token, one of the stop strings, or gen.max_new_tokens.
TurnEnd = Literal["eos", "stop", "length"]


@dataclass
class Episode:
    """One episode so far: its prompt row and, after the prompt, the policy's messages and the environment's
    answers in turn."""

    row: Mapping[str, Any]  # the prompt row: prompt, answer, tests, ... (the dataset's columns)
    messages: list[tuple[str, str]] = field(default_factory=list)  # ("policy" | "environment", text)
    state: Any = None  # the environment's own, set by reset()
    ended_by: TurnEnd | None = None  # how the policy's last turn ended
    # Tools the environment offers, set by reset(): JSON function schemas ({"type": "function", "function": {name,
    # description, parameters}}), which the rollout shows the policy (through a chat template that renders tools,
    # else as text after the opening). None: none to show.
    tools: list[dict[str, Any]] | None = None

    @property
    def turns(self) -> int:
        """The policy's turns so far."""
        return sum(1 for role, _ in self.messages if role == "policy")


@dataclass(frozen=True)
class ToolResult:
    """The call a reply answers and its result as the tool gave it (not yet in the tool format's markup): what a chat
    template renders as its own tool message (environment.chat_role: tool)."""

    name: str
    arguments: Any
    call_id: str | None  # the call's id where the format writes one (Kimi's functions.NAME:0, Mistral v11's)
    text: str


@dataclass(frozen=True)
class Reply:
    """The environment's answer to one policy turn: text to append (the episode goes on), or the end with its
    reward. `reason` says why it ended or what went wrong (shown in the logs); `error` marks a turn the environment
    could not use (a malformed call, code it could not run); `tool_call` marks a turn that ran a tool."""

    text: str = ""
    done: bool = False
    reward: float = 0.0
    components: Mapping[str, float] = field(default_factory=dict)
    reason: str | None = None
    error: bool = False
    tool_call: bool = False
    tool: ToolResult | None = None  # the call `text` answers, where an MCP tool environment read one


def answer(
    text: str, *, tool_call: bool = False, error: bool = False, reason: str | None = None, tool: ToolResult | None = None
) -> Reply:
    """The episode goes on with `text` after the policy's turn."""
    return Reply(text=text, tool_call=tool_call, error=error, reason=reason, tool=tool)


def end(reward: float, *, components: Mapping[str, float] | None = None, reason: str | None = None, error: bool = False) -> Reply:
    """The episode ends with `reward`."""
    return Reply(done=True, reward=float(reward), components=dict(components or {}), reason=reason, error=error)


class Environment(Protocol):
    stop: Sequence[str]  # strings that end a policy turn so the environment can answer (besides EOS)

    def reset(self, episode: Episode) -> str:
        """Start `episode` (set episode.state); the text that opens it after the prompt ('' for none)."""
        ...

    def step(self, episode: Episode, message: str) -> Reply:
        """Answer the policy's `message` (already the last of episode.messages), or end the episode."""
        ...

    def cut_off(self, episode: Episode, why: str) -> Reply:
        """The verdict on an episode the limits ended (`why`: max_turns, max_tokens) before the environment did."""
        ...

    def close(self) -> None: ...


class EnvError(DataError):
    """An environment that cannot be built or that broke its protocol: the run fails with this message."""
