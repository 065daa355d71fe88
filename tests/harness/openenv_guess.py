"""A small environment written against openenv-core's own base classes (Environment, Action, Observation), as an
OpenEnv environment would be: guess a number from 1 to 10; each wrong guess costs 0.1 and says higher or lower, the
right one earns 0.9 and ends the episode. tests/test_environments.py plays it through our adapter."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State


class GuessAction(Action):
    guess: int


class GuessObservation(Observation):
    message: str


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True  # each instance holds one episode: a server may run several at once

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self.target = 5

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        self.target = seed if seed else 5
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(message="Guess a number from 1 to 10.")

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        if action.guess == self.target:
            return GuessObservation(message="right", done=True, reward=0.9)
        return GuessObservation(message="higher" if action.guess < self.target else "lower", reward=-0.1)

    @property
    def state(self) -> State:
        return self._state


def make() -> GuessEnvironment:
    return GuessEnvironment()
