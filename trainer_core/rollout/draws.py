"""Random draws that depend on what is sampled, not on which thread ran first.

Asynchronous GRPO samples in a generator thread while the trainer's thread may sample as well (the tracked prompts'
samples). torch keeps one global generator per device, so two threads drawing from it interleave and a run's samples
would depend on timing. A batch's sampling therefore runs `seeded` by the run's seed, the batch and the rank: the global
generators are set from that seed for the call and given back as they were afterwards, under one lock that every other
sampling call takes too (`drawing`). A batch's draws then depend on its seed alone, whichever thread ran first, and the
caller's own stream goes on as if the call had not happened. The synchronous loop seeds its batches the same way, so an
asynchronous run at bound 0 samples as it does.

Not covered: a forward that draws at random outside these calls (dropout in training) still shares the generator with
a seeded call running in another thread. The builtin models and most RL fine-tuning run without dropout.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator

import torch

LOCK = threading.RLock()


def seed_of(seed: int, *keys: object) -> int:
    """A seed for one sampling call of a run seeded `seed`, named by `keys` (what it samples: a recipe, a batch, a rank);
    unrelated keys give unrelated streams."""
    digest = hashlib.sha256(":".join(str(part) for part in (seed, *keys)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1  # torch.manual_seed takes 63 bits


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Draws inside come from `seed` alone; the global generators are as they were afterwards."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with LOCK, torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def drawing() -> Iterator[None]:
    """A sampling call on the caller's own stream: never interleaved with a seeded call in another thread."""
    with LOCK:
        yield
