"""Splitting a global batch across ranks and micro-batches, so a spec gives the same update on 1 or N processes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from rlplane.spec.sections import TrainSpec

T = TypeVar("T")


class BatchSplitError(ValueError):
    """A batch size that does not split evenly across ranks or micro-batches."""


def local_batch_range(global_batch_size: int, rank: int, world_size: int) -> range:
    """Indices of the global batch that `rank` trains on: contiguous, equal shares."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside world_size {world_size}.")
    if global_batch_size % world_size:
        raise BatchSplitError(
            f"train.batch_size={global_batch_size} does not split over {world_size} ranks: make it a multiple of {world_size}."
        )
    share = global_batch_size // world_size
    return range(rank * share, (rank + 1) * share)


def micro_batch_ranges(local: range, micro_batch_size: int | None) -> list[range]:
    """The rank's share cut into micro-batches of equal size (None: one micro-batch)."""
    size = micro_batch_size or len(local)
    if len(local) % size:
        raise BatchSplitError(
            f"train.micro_batch_size={size} does not divide the per-rank batch of {len(local)}: "
            "pick a divisor of train.batch_size / world_size."
        )
    return [local[start : start + size] for start in range(0, len(local), size)]


def accumulation_steps(train: TrainSpec, world_size: int) -> int:
    """Micro-batches per optimizer step on each rank."""
    return len(micro_batch_ranges(local_batch_range(train.batch_size, 0, world_size), train.micro_batch_size))


def rank_chunks(items: Sequence[T], size: int, backend: Any) -> Iterator[tuple[list[T], bool]]:
    """This rank's share of `items` (every data_world_size-th, from its data_rank: `backend`'s) in chunks of `size`, as
    (chunk, real).

    Every rank gets as many chunks as the rank with the largest share: one whose share runs out first
    gets stand-in chunks (real=False) to run and discard, because a forward pass through a sharded
    model (ZeRO-3, FSDP2) gathers parameters from every rank and hangs unless every rank joins it."""
    mine = list(items[backend.data_rank :: backend.data_world_size])
    largest_share = -(-len(items) // backend.data_world_size)
    for i in range(-(-largest_share // size)):
        chunk = mine[i * size : (i + 1) * size]
        yield (chunk, True) if chunk else (list(items[:1]), False)
