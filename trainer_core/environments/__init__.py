"""Environments of multi-turn GRPO and PPO (grpo and ppo .environment): the spec's section -> an object that plays episodes.

    make_environment(spec.grpo.environment) -> Environment: reset(episode), step(episode, message), cut_off(...)

One module per job: base (the protocol, Episode, Reply), calculator (the builtin tool task), sandbox (running
untrusted Python) and python_exec (the builtin verifier on it), http (a service; `server` is a reference one),
openenv (OpenEnv environments in process), openenv_server (an OpenEnv environment server), tool_calls (OpenEnv's
MCP tool environments, for both). rollout/episodes.py plays them with the policy. Importing this package loads no
torch.
"""

from __future__ import annotations

import importlib

from rlplane.allowlist import allowed_from_env, is_allowed, refusal
from rlplane.spec.environments import (
    BuiltinEnvironment,
    EnvironmentSpec,
    HttpEnvironment,
    OpenEnvEnvironment,
    PythonEnvironment,
)
from trainer_core.environments.base import EnvError, Environment, Episode, Reply, answer, end

__all__ = ["Environment", "EnvError", "Episode", "Reply", "answer", "end", "make_environment"]

FIELD = "grpo.environment"


def make_environment(spec: EnvironmentSpec, field: str = FIELD) -> Environment:
    """The environment `spec` describes; EnvError (naming `field`) when it cannot be made."""
    if isinstance(spec, BuiltinEnvironment):
        if spec.name == "calculator":
            from trainer_core.environments.calculator import Calculator

            return Calculator()
        from trainer_core.environments.python_exec import PythonExecution

        return PythonExecution(spec.sandbox, spec.max_turns)
    if isinstance(spec, HttpEnvironment):
        from trainer_core.environments.http import HttpEnvironment as Client

        return Client(spec, field)
    if isinstance(spec, OpenEnvEnvironment):
        from trainer_core.environments.openenv_server import OpenEnvServer

        return OpenEnvServer(spec, field)
    assert isinstance(spec, PythonEnvironment)
    return _from_entrypoint(spec, field)


def _from_entrypoint(spec: PythonEnvironment, field: str) -> Environment:
    """The allow-list is checked before the module is imported (importing runs its code), here as well as at submit."""
    from trainer_core.environments.openenv import OpenEnvAdapter, is_tool_environment, looks_like_openenv

    patterns = allowed_from_env()
    if not is_allowed(spec.entrypoint, patterns):
        raise EnvError(refusal(spec.entrypoint, f"{field}.entrypoint", patterns))
    module_name, name = spec.entrypoint.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise EnvError(
            f"{field}.entrypoint: cannot import module {module_name!r} ({exc}); install it on the workers or put it on "
            "their PYTHONPATH"
        ) from exc
    factory = getattr(module, name, None)
    if not callable(factory):
        raise EnvError(f"{field}.entrypoint: module {module_name!r} has no callable {name!r} (a factory of environments)")
    made = factory()
    if looks_like_openenv(made):
        tools = is_tool_environment(made)
        made.close()  # this one only told us its kind: OpenEnv environments are made afresh for every episode
        return OpenEnvAdapter(factory, tuple(spec.stop), tools=tools, tool_format=spec.tool_format)
    for method in ("reset", "step", "cut_off", "close"):
        if not callable(getattr(made, method, None)):
            raise EnvError(
                f"{field}.entrypoint {spec.entrypoint} made a {type(made).__name__}, which has no {method}(); return "
                "an environment (reset, step, cut_off, close: docs/rl.md) or an OpenEnv Environment"
            )
    return made
