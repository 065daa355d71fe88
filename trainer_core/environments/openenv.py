"""OpenEnv environments (openenv-core's `Environment`: reset() and step(action) return an Observation with `done`
and `reward`) played as ours, in the trainer's process, without importing openenv: any object with that shape.

One environment is made per episode (OpenEnv's hold one episode each). reset() gets the row's columns its
signature names (seed, episode_id, ...) and its observation opens the episode. Each policy message becomes the
environment's Action, as verifiers' OpenEnv taskset does it: a JSON object (fenced or not) is the action's fields;
other text fills the action's one required field (an Action with several needs JSON). An observation is shown as
its one text field, or as JSON of its fields. A done observation ends the episode with the rewards of its steps
summed; a message that is no valid action is answered with why (an error), and the episode goes on.

An MCP environment (openenv-core's MCPEnvironment: tools the policy calls through step) is played in tool-call tags
instead (tool_calls.py): its tools offered on the episode (Episode.tools) after the reset, each turn's call made a CallToolAction
(imported from openenv then: such an environment brings it), the result answered as its tool_format says.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainer_core.environments import tool_calls
from trainer_core.environments.base import EnvError, Episode, Reply, answer, end

_STANDARD = {"done", "reward", "metadata"}  # every Observation has these; the rest is what the policy sees


def looks_like_openenv(environment: Any) -> bool:
    """An OpenEnv environment has reset and step but not our cut_off."""
    return (
        callable(getattr(environment, "reset", None))
        and callable(getattr(environment, "step", None))
        and not hasattr(environment, "cut_off")
    )


def is_tool_environment(environment: Any) -> bool:
    """Whether `environment` is an OpenEnv MCP environment (a subclass of openenv-core's MCPEnvironment)."""
    return any(cls.__name__ == "MCPEnvironment" and cls.__module__.startswith("openenv.") for cls in type(environment).__mro__)


def action_class(environment: Any) -> type:
    """The Action model step() takes, from its annotation (OpenEnv environments annotate step(action: MyAction))."""
    try:
        hints = typing.get_type_hints(type(environment).step)
    except Exception as exc:  # annotations that do not resolve: say so rather than guess
        raise EnvError(f"{type(environment).__name__}.step's annotations do not resolve ({exc})") from None
    parameters = [p for p in inspect.signature(type(environment).step).parameters if p != "self"]
    cls = hints.get(parameters[0]) if parameters else None
    if not (isinstance(cls, type) and hasattr(cls, "model_validate")):
        raise EnvError(
            f"{type(environment).__name__}.step must annotate its action with the Action model it takes, e.g. "
            "def step(self, action: MyAction) -> MyObservation"
        )
    return cls


def to_action(cls: type, message: str) -> Any:
    """The policy's message as an instance of the Action model `cls`; ValueError says why it is none."""
    required = [name for name, field in cls.model_fields.items() if field.is_required()]
    fields = action_fields(message, required)
    try:
        return cls.model_validate(fields)
    except Exception as exc:  # pydantic's ValidationError, without importing pydantic's internals here
        raise ValueError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None


def action_fields(message: str, required: list[str]) -> dict[str, Any]:
    """The policy's message as an Action's fields: a JSON object (fenced or not) as it is, other text as the value
    of the one field `required` names (metadata aside); ValueError when the Action needs more than one."""
    text = message.strip()
    if text.startswith("```") and text.endswith("```"):
        text = "\n".join(text.splitlines()[1:-1]).strip()
    try:
        fields = json.loads(text)
    except json.JSONDecodeError:
        fields = None
    if isinstance(fields, dict):
        return fields
    required = [name for name in required if name != "metadata"]
    if len(required) != 1:
        raise ValueError(f"write the action as a JSON object with {', '.join(required) or 'its fields'}")
    return {required[0]: text}


def observation_text(observation: Any) -> str:
    return shown_text(observation.model_dump())


def shown_text(observation: dict[str, Any]) -> str:
    """What the policy sees of an observation's fields: its one text field, or JSON of its fields (none: '')."""
    shown = {k: v for k, v in observation.items() if k not in _STANDARD}
    if not shown:
        return ""
    if len(shown) == 1 and isinstance(next(iter(shown.values())), str):
        return next(iter(shown.values()))
    return json.dumps(shown, default=str)


@dataclass
class _Playing:
    environment: Any
    action: type | None  # the Action model step() takes; None for an MCP environment's tool calls
    total: float = 0.0


class OpenEnvAdapter:
    def __init__(
        self, make: Callable[[], Any], stop: tuple[str, ...] = (), *, tools: bool = False, tool_format: str = "hermes"
    ) -> None:
        self.make, self.tools, self.tool_format = make, tools, tool_format
        self.stop = tool_calls.with_call_stop(stop, tool_format) if tools else stop

    def reset(self, episode: Episode) -> str:
        environment = self.make()
        accepted = inspect.signature(environment.reset).parameters
        observation = environment.reset(**{k: v for k, v in episode.row.items() if k in accepted})
        episode.state = _Playing(environment, None if self.tools else action_class(environment), float(observation.reward or 0.0))
        if not self.tools:
            return observation_text(observation)
        from openenv.core.env_server.mcp_types import ListToolsAction

        found = environment.step(ListToolsAction()).model_dump(mode="json")
        try:
            episode.tools = tool_calls.schemas(found.get("tools"))
        except ValueError as exc:
            raise EnvError(f"{type(environment).__name__}: {exc}") from None
        return observation_text(observation)

    def step(self, episode: Episode, message: str) -> Reply:
        playing: _Playing = episode.state
        if playing.action is None:
            return self._call(playing, message, episode.tools)
        try:
            action = to_action(playing.action, message)
        except ValueError as exc:
            return answer(f"invalid action: {exc}", error=True, reason=f"invalid action: {exc}")
        observation = playing.environment.step(action)
        return self._observed(playing, observation) or answer(observation_text(observation))

    def _call(self, playing: _Playing, message: str, tools: list[dict[str, Any]] | None) -> Reply:
        from openenv.core.env_server.mcp_types import CallToolAction

        try:
            call = tool_calls.read_call(message, self.tool_format, tools)
        except ValueError as exc:
            return answer(tool_calls.refusal(str(exc), self.tool_format), error=True, reason=f"invalid tool call: {exc}")
        observation = playing.environment.step(CallToolAction(tool_name=call.name, arguments=call.arguments))
        return self._observed(playing, observation) or tool_calls.answered(
            observation.model_dump(mode="json"), self.tool_format, call
        )

    def _observed(self, playing: _Playing, observation: Any) -> Reply | None:
        """The episode's end, when `observation` is done (its rewards summed); None while it goes on."""
        playing.total += float(observation.reward or 0.0)
        if not observation.done:
            return None
        playing.environment.close()
        return end(playing.total, components={"openenv": playing.total})

    def cut_off(self, episode: Episode, why: str) -> Reply:
        playing: _Playing = episode.state
        playing.environment.close()
        return end(playing.total, components={"openenv": playing.total}, reason=f"cut off by {why}")

    def close(self) -> None:
        pass
