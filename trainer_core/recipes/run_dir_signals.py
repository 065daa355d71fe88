"""What the trainer reads in its run directory after every optimizer step.

- A hand-back: a worker that is shutting down asks for its run back (OUT/.hand-back, rlplane.layout.HAND_BACK_FILE).
  The trainer checkpoints after this step and leaves.
- A fence: another attempt owns the directory (OUT/.attempt names it; checkpoint/fence.py). The control plane ended
  this attempt, its worker silent (a partition, a stopped process), and started the run again elsewhere; the
  trainer leaves at once, reporting and writing nothing more, instead of training on beside the new attempt.

Every rank looks, and the ranks agree (a rank on another node may not see the file): the checkpoint that follows a
hand-back is collective under the sharding backends, so all or none must take it, and all must leave together.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from rlplane.layout import HAND_BACK_FILE
from trainer_core.backends import Backend
from trainer_core.checkpoint import fence


@dataclass(frozen=True)
class Signals:
    hand_back: bool  # checkpoint after this step, then leave
    fenced: bool  # another attempt owns the run directory: leave now


def read(out_dir: Path, backend: Backend) -> Signals:
    """The same answer on every rank once any rank sees a signal (one small all-reduce per step)."""
    flags = [(out_dir / HAND_BACK_FILE).exists(), fence.owner_if_fenced(out_dir) is not None]
    if dist.is_initialized() and dist.get_world_size() > 1:
        shared = torch.tensor([1.0 if flag else 0.0 for flag in flags], device=backend.device)
        dist.all_reduce(shared, op=dist.ReduceOp.MAX)  # over every rank, model-parallel ones included
        flags = [bool(value) for value in shared.tolist()]
    return Signals(hand_back=flags[0], fenced=flags[1])
