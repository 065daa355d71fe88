"""Running mean and std of every reward seen so far, over all data-parallel ranks.

Each batch contributes (count, sum, sum of squares) summed over ranks through `reduce_sum`, so
every rank merges the same global statistics and normalises identically. The sums are taken
around the running mean (a shift every rank shares), which keeps the sum-of-squares variance
accurate once the mean is far from zero; batches merge into the running state with Chan et al.'s
parallel update. The std is the population one (numpy's default, ddof=0).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

EPS = 1e-8  # a constant stream of rewards (std 0) normalises to 0, not to NaN


class RunningNorm:
    def __init__(self, device: torch.device, reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        self.device = device
        self.reduce_sum = reduce_sum
        self.count, self.mean, self.m2 = 0.0, 0.0, 0.0

    @property
    def std(self) -> float:
        return (self.m2 / self.count) ** 0.5 if self.count else 0.0

    def update(self, values: list[float]) -> None:
        """Merge this rank's `values` (and, through reduce_sum, every other rank's) into the running state. A NaN
        or infinite reward is left out: it fails or skips its own step (train.on_nonfinite), not every later one."""
        shifted = torch.tensor([v for v in values if math.isfinite(v)], dtype=torch.float64) - self.mean
        local = torch.stack([torch.tensor(float(len(shifted)), dtype=torch.float64), shifted.sum(), (shifted**2).sum()])
        total = local.to(self.device)
        if self.reduce_sum is not None:
            total = self.reduce_sum(total)
        count, total_sum, total_sq = total.cpu().tolist()
        if count == 0:
            return
        batch_mean = total_sum / count  # relative to the shift
        batch_m2 = max(total_sq - total_sum * batch_mean, 0.0)
        merged = self.count + count
        self.m2 += batch_m2 + batch_mean**2 * self.count * count / merged
        self.mean += batch_mean * count / merged
        self.count = merged

    def __call__(self, values: list[float]) -> list[float]:
        """Update with `values`, then standardise them with the statistics so far (this batch included)."""
        self.update(values)
        std = self.std
        return [(value - self.mean) / (std + EPS) for value in values]

    def state_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: dict) -> None:
        self.count, self.mean, self.m2 = float(state["count"]), float(state["mean"]), float(state["m2"])
