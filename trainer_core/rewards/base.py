"""What every reward source shares: the result type, the protocol, the error, and the checks on scores."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from trainer_core.data import DataError


class RewardScores(NamedTuple):
    total: list[float]  # one per response: the reward the RL recipe uses
    components: dict[str, list[float]]  # each named component, per response (reported as reward/<name>)


class Reward(Protocol):
    def __call__(self, prompts: list[str], responses: list[str], metadata: list[dict]) -> RewardScores: ...

    def state_dict(self) -> dict:
        """Plain JSON (e.g. the running normaliser), saved in checkpoints."""
        ...

    def load_state_dict(self, state: dict) -> None: ...

    def close(self) -> None: ...


class Scorer(Protocol):
    """One source's raw scores, before scale, clip and normalisation (builtin, model, python, http)."""

    def __call__(self, prompts: list[str], responses: list[str], metadata: list[dict]) -> list[float]: ...

    def close(self) -> None: ...


class RewardError(DataError):
    """A reward source that cannot be built or that gave unusable scores: bad input, never retried."""


def checked_scores(values: Any, count: int, source: str) -> list[float]:
    """`values` as `count` floats, or a RewardError saying what `source` got wrong. A NaN or infinite score is a
    number: it reaches reward/mean, where train.on_nonfinite fails or skips that step (recipes/divergence.py)."""
    if hasattr(values, "tolist"):  # numpy arrays, torch tensors
        values = values.tolist()
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise RewardError(f"{source} must return a list of {count} numbers, one per response; got {type(values).__name__}")
    if len(values) != count:
        raise RewardError(f"{source} returned {len(values)} rewards for {count} responses; return exactly one per response")
    scores = []
    for i, value in enumerate(values):
        if not isinstance(value, numbers.Real):
            raise RewardError(f"{source} returned {value!r} ({type(value).__name__}) for response {i}; rewards must be numbers")
        scores.append(float(value))
    return scores
