"""An OpenEnv MCP environment (openenv-core's MCPEnvironment, RFC 003), as OpenEnv's tool environments are written:
its tools are FastMCP tools the policy calls through step(CallToolAction), and the episode ends when it calls `submit`.

The task is the row's (builtin:calculator's: "37*48=", with its `answer`): `multiply(a, b)` answers a product;
`submit(answer)` ends the episode with reward 1 when it is the row's answer, else 0. Arguments a tool refuses (multiply
of a non-number) are a tool error.
tests/test_environments.py plays it in process and served by openenv-core's own server.
"""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import Action, Observation, State


class ProductEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("product")

        @mcp.tool
        def multiply(a: int, b: int) -> int:
            """The product of two integers."""
            return a * b

        @mcp.tool
        def submit(answer: int) -> str:
            """Give the final answer; the episode ends."""
            return "submitted"

        super().__init__(mcp)
        self._state = State(step_count=0)
        self.target = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, answer: str = "", **kwargs: Any) -> Observation:
        self.target = int(answer)
        self._state = State(episode_id=episode_id, step_count=0)
        return Observation()

    # In process, step() runs the tools; openenv-core's server calls step_async(). Both grade a submit.
    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._graded(action, super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._graded(action, await super().step_async(action, timeout_s=timeout_s, **kwargs))

    def _graded(self, action: Action, observation: Observation) -> Observation:
        self._state.step_count += 1
        if isinstance(action, CallToolAction) and action.tool_name == "submit" and observation.error is None:
            observation.done = True
            observation.reward = 1.0 if action.arguments.get("answer") == self.target else 0.0
        return observation

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(metadata={"error": f"unknown action {type(action).__name__}"})

    @property
    def state(self) -> State:
        return self._state


def make() -> ProductEnvironment:
    return ProductEnvironment()
