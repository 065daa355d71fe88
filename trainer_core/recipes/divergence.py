"""Training that went non-finite (train.on_nonfinite): a step whose loss, gradient norm or mean reward is NaN
or infinite ends the run ("fail") or is skipped ("skip") and counted, until max_consecutive_skips in a row.

The backends never apply an update whose gradient norm is not finite (Backend.step), so in both modes the
weights and the optimizer stay as they were before the bad step: a failed run's checkpoints are all healthy,
and a skipped step leaves nothing behind. A NaN reward or advantage reaches the loss and so the gradients.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from rlplane.spec.sections import TrainSpec
from trainer_core.failures import Diverged
from trainer_core.reporting import Reporter

# What a step is judged by, where the recipe reports it; causes first (a NaN reward makes a NaN loss). Other
# keys (perf/*, entropy, explained variance...) may be undefined on a healthy step without the run being in trouble.
__all__ = ["Diverged", "NonFiniteGuard", "WATCHED", "describe", "first_nonfinite"]

WATCHED = ("reward/mean", "train/loss", "train/grad_norm")


def describe(value: float) -> str:
    return "NaN" if math.isnan(value) else ("+inf" if value > 0 else "-inf")


def first_nonfinite(values: Mapping[str, float], keys: tuple[str, ...] = WATCHED) -> tuple[str, float] | None:
    """The first watched key whose value is NaN or infinite, with that value."""
    for key in keys:
        value = values.get(key)
        if value is not None and not math.isfinite(value):
            return key, value
    return None


class NonFiniteGuard:
    """Judges each step's reported values (every rank calls it with the same, already reduced, values).

    `loss_scaled`: the backend runs fp16 with dynamic loss scaling, where an infinite gradient norm is an
    overflow the scaler skips by design; then only the loss and the reward are watched."""

    def __init__(self, train: TrainSpec, reporter: Reporter, *, loss_scaled: bool = False) -> None:
        self.policy, self.max_skips, self.reporter = train.on_nonfinite, train.max_consecutive_skips, reporter
        self.keys = tuple(k for k in WATCHED if not (loss_scaled and k == "train/grad_norm"))
        self.consecutive = 0

    def check(self, step: int, values: Mapping[str, float]) -> bool:
        """True when step `step`'s update counted; False when it was skipped. Raises Diverged when the run
        must end, after reporting that step's values (so the charts show where it went)."""
        bad = first_nonfinite(values, self.keys)
        if bad is None:
            self.consecutive = 0
            return True
        key, value = bad
        what = f"{key} is {describe(value)} at step {step}"
        if self.policy == "fail":
            self.reporter.metrics(step, values)
            raise Diverged(f"diverged: {what} (train.on_nonfinite: fail)")
        self.consecutive += 1
        self.reporter.log(f"skipped the update of step {step}: {what} (train.on_nonfinite: skip)")
        if self.consecutive >= self.max_skips:
            self.reporter.metrics(step, values)
            raise Diverged(
                f"diverged: {self.consecutive} steps in a row skipped (train.max_consecutive_skips {self.max_skips}); "
                f"the last: {what}"
            )
        return False
