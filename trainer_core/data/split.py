"""Train/eval splits that keep every copy of a problem on one side, and seeded shuffles.

All randomness comes from `random.Random` seeded with a string built from the run's seed, so a
split depends only on (seed, purpose, rows) - never on PYTHONHASHSEED, the platform or the
order in which other code drew random numbers.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Split:
    """Training rows and held-out evaluation rows; no problem appears in both."""

    train: list[dict] = field(default_factory=list)
    eval: list[dict] = field(default_factory=list)


def seeded_rng(seed: int, purpose: str) -> random.Random:
    """A generator for one purpose ("split", "shuffle", "arithmetic", ...) of one seed."""
    return random.Random(f"rlplane:{purpose}:{seed}")


def eval_count(groups: int, eval_fraction: float) -> int:
    """How many of `groups` problems to hold out: at least one when eval_fraction > 0, never all."""
    if eval_fraction <= 0 or groups < 2:
        return 0
    return min(groups - 1, max(1, math.ceil(groups * eval_fraction)))


def split_by_key(rows: list[dict], key: Callable[[dict], Hashable], eval_fraction: float, seed: int) -> Split:
    """Hold out eval_fraction of the distinct keys (problems), chosen by the seed; rows keep their order."""
    keys = list(dict.fromkeys(key(row) for row in rows))
    seeded_rng(seed, "split").shuffle(keys)
    held_out = set(keys[: eval_count(len(keys), eval_fraction)])
    return Split(
        train=[row for row in rows if key(row) not in held_out],
        eval=[row for row in rows if key(row) in held_out],
    )


def shuffled(rows: list[dict], seed: int, purpose: str = "shuffle") -> list[dict]:
    out = list(rows)
    seeded_rng(seed, purpose).shuffle(out)
    return out
