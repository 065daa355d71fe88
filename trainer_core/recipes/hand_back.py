"""A worker that is shutting down asks for its run back: the trainer checkpoints and leaves.

The worker writes OUT/.hand-back (rlplane.layout.HAND_BACK_FILE). After each optimizer step
every rank looks for it, and the ranks agree (a rank on another node may not see the file): the
checkpoint that follows is collective under the sharding backends, so all or none must take it.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

from rlplane.layout import HAND_BACK_FILE
from trainer_core.backends import Backend


def requested(out_dir: Path, backend: Backend) -> bool:
    """True on every rank once any rank sees the worker's request (one small all-reduce per step)."""
    asked = (out_dir / HAND_BACK_FILE).exists()
    if dist.is_initialized() and dist.get_world_size() > 1:
        flag = torch.tensor([1.0 if asked else 0.0], device=backend.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # over every rank, model-parallel ones included
        asked = bool(flag.item())
    return asked
