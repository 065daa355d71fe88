"""Reward sources of online RL (ppo, grpo): the spec's `reward` section -> a callable that scores responses.

    make_reward(spec, device=..., seed=...)(prompts, responses, metadata) -> RewardScores(total, components)

One module per kind: builtin, model (a reward-model checkpoint), python (an allow-listed function),
http (a scoring service; `server` is a reference one), combine (sum of weighted terms, and the
scale/clip/normalise wrapper every source gets) and normalize (the running mean/std).
Only the kind a spec asks for is imported, and importing this package loads no torch, so the API
can use `allowlist` for its submit check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from trainer_core.rewards.base import Reward, RewardError, RewardScores

if TYPE_CHECKING:
    import torch
    from torch import nn

    from rlplane.spec.sections import RewardSpec
    from trainer_core.models import RunResolver

__all__ = ["Reward", "RewardError", "RewardScores", "make_reward"]


def make_reward(
    spec: RewardSpec,
    *,
    device: torch.device,
    seed: int,
    reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None,
    resolver: RunResolver | None = None,
    place: Callable[[nn.Module], nn.Module] | None = None,
) -> Reward:
    """The reward `spec` describes. `reduce_sum` sums a tensor over data-parallel ranks (None: one
    process), so a normaliser sees the global batch; `resolver` finds run:<id> reward models (None: the
    same lookup as model.path, i.e. the worker's RLPLANE_RUNS_DIR); `place` puts a frozen reward model
    where the backend keeps frozen models (None: whole, on `device`)."""
    from trainer_core.rewards.combine import build

    return build(spec, "reward", device=device, seed=seed, reduce_sum=reduce_sum, resolver=resolver, place=place)
