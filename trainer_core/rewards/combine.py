"""A spec -> a Reward: each source's scores scaled, clipped and (optionally) normalised, and sums of them.

    SourceReward   one scorer (builtin, model, python, http) -> total and its one component
    SumReward      weighted terms, each a SourceReward: total = normalise(clip(scale * sum of weight * term))

A sum's components are its terms' own totals (after each term's scale, clip and normaliser),
unweighted, so reward/<name> reads in the term's own units.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rlplane.spec.sections import BuiltinReward, HttpReward, ModelReward, PythonReward, SumReward
from trainer_core.rewards.base import RewardScores, Scorer
from trainer_core.rewards.normalize import RunningNorm

if TYPE_CHECKING:
    from rlplane.spec.sections import RewardSource, RewardSpec
    from trainer_core.models import RunResolver


class _Shaping:
    """scale, then clip, then the running normaliser: what every kind applies to its own output."""

    def __init__(self, spec: Any, device: torch.device, reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
        self.scale, self.clip = spec.scale, spec.clip
        self.norm = RunningNorm(device, reduce_sum) if spec.normalize else None

    def scaled(self, values: list[float]) -> list[float]:
        values = [value * self.scale for value in values]
        if self.clip is not None:
            values = [min(max(value, -self.clip), self.clip) for value in values]
        return values

    def normalized(self, values: list[float]) -> list[float]:
        return values if self.norm is None else self.norm(values)

    def state_dict(self) -> dict:
        return {} if self.norm is None else {"normalizer": self.norm.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if self.norm is not None and "normalizer" in state:
            self.norm.load_state_dict(state["normalizer"])


class SourceReward:
    def __init__(self, name: str, scorer: Scorer, shaping: _Shaping) -> None:
        self.name, self.scorer, self.shaping = name, scorer, shaping

    def __call__(self, prompts: list[str], responses: list[str], metadata: list[dict]) -> RewardScores:
        values = self.shaping.scaled(self.scorer(prompts, responses, metadata))
        return RewardScores(self.shaping.normalized(values), {self.name: values})

    def state_dict(self) -> dict:
        return self.shaping.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.shaping.load_state_dict(state)

    def close(self) -> None:
        self.scorer.close()


class WeightedSum:
    def __init__(self, terms: list[tuple[str, float, SourceReward]], shaping: _Shaping) -> None:
        self.terms, self.shaping = terms, shaping

    def __call__(self, prompts: list[str], responses: list[str], metadata: list[dict]) -> RewardScores:
        components = {name: reward(prompts, responses, metadata).total for name, _, reward in self.terms}
        weighted = [sum(weight * components[name][i] for name, weight, _ in self.terms) for i in range(len(responses))]
        return RewardScores(self.shaping.normalized(self.shaping.scaled(weighted)), components)

    def state_dict(self) -> dict:
        return {**self.shaping.state_dict(), "terms": {name: reward.state_dict() for name, _, reward in self.terms}}

    def load_state_dict(self, state: dict) -> None:
        self.shaping.load_state_dict(state)
        for name, _, reward in self.terms:
            reward.load_state_dict(state.get("terms", {}).get(name, {}))

    def close(self) -> None:
        for _, _, reward in self.terms:
            reward.close()


def build(
    spec: RewardSpec,
    field: str,
    *,
    device: torch.device,
    seed: int,
    reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None,
    resolver: RunResolver | None,
    place: Callable[[nn.Module], nn.Module] | None = None,
) -> SourceReward | WeightedSum:
    """The Reward for `spec`, found at `field` of the run spec (named in errors)."""
    shaping = _Shaping(spec, device, reduce_sum)
    if not isinstance(spec, SumReward):
        name, scorer = _scorer(spec, field, device=device, seed=seed, resolver=resolver, place=place)
        return SourceReward(name, scorer, shaping)
    terms: list[tuple[str, float, SourceReward]] = []
    try:
        for i, term in enumerate(spec.terms):
            where = f"{field}.terms[{i}].source"
            _, scorer = _scorer(term.source, where, device=device, seed=seed, resolver=resolver, place=place)
            terms.append((term.name, term.weight, SourceReward(term.name, scorer, _Shaping(term.source, device, reduce_sum))))
    except BaseException:
        for _, _, reward in terms:  # a later term failed: free the reward models already loaded
            reward.close()
        raise
    return WeightedSum(terms, shaping)


def _scorer(
    spec: RewardSource,
    field: str,
    *,
    device: torch.device,
    seed: int,
    resolver: RunResolver | None,
    place: Callable[[nn.Module], nn.Module] | None = None,
) -> tuple[str, Scorer]:
    """(component name, scorer) of one source; each kind's module is imported only when used."""
    if isinstance(spec, BuiltinReward):
        from trainer_core.rewards.builtin import BuiltinScorer

        return spec.name, BuiltinScorer(spec.name)
    if isinstance(spec, PythonReward):
        from trainer_core.rewards.python import PythonScorer

        scorer = PythonScorer(spec.entrypoint, f"{field}.entrypoint")
        return scorer.function_name, scorer
    if isinstance(spec, HttpReward):
        from trainer_core.rewards.http import HttpScorer

        return "http", HttpScorer(spec, field)
    if isinstance(spec, ModelReward):
        from trainer_core.rewards.model import ModelScorer

        if spec.device:  # a device of its own: whole there, outside the backend's placement
            return "model", ModelScorer(spec, torch.device(spec.device), seed=seed, resolver=resolver)
        return "model", ModelScorer(spec, device, seed=seed, resolver=resolver, place=place)
    raise TypeError(f"unknown reward spec {type(spec).__name__}")  # the spec's union and this function disagree
