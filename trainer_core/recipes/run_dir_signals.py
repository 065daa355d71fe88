"""What the trainer reads in its run directory after every optimizer step.

- A hand-back: a worker that is shutting down asks for its run back (OUT/.hand-back, rlplane.layout.HAND_BACK_FILE),
  or, in a Slurm job, the trainer itself got SIGTERM (Slurm signals every process of a job it preempts or whose time
  is up, and may do so more than once): it checkpoints after this step and leaves (exit EXIT_HANDED_BACK). Outside
  Slurm, SIGTERM ends the trainer as it always did (its worker asks through the file).
- A fence: another attempt owns the directory (OUT/.attempt names it; checkpoint/fence.py). The control plane ended
  this attempt, its worker silent (a partition, a stopped process), and started the run again elsewhere; the
  trainer leaves at once, reporting and writing nothing more, instead of training on beside the new attempt.

Every rank looks, and the ranks agree (a rank on another node may not see the file): the checkpoint that follows a
hand-back is collective under the sharding backends, so all or none must take it, and all must leave together.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from rlplane.layout import HAND_BACK_FILE
from trainer_core.backends import Backend
from trainer_core.checkpoint import fence

_terminated = False  # this process got SIGTERM (handle_sigterm)
handed_back = False  # the training loop left early on a hand-back: the process exits EXIT_HANDED_BACK


def handle_sigterm() -> None:
    """In a Slurm job (SLURM_JOB_ID), SIGTERM asks for a hand-back after the current step (called in the main thread,
    before training); SIGKILL, which Slurm sends KillWait later, still ends it."""
    if not os.environ.get("SLURM_JOB_ID"):
        return

    def asked(signum: int, frame: object) -> None:
        global _terminated
        _terminated = True

    signal.signal(signal.SIGTERM, asked)


@dataclass(frozen=True)
class Signals:
    hand_back: bool  # checkpoint after this step, then leave
    fenced: bool  # another attempt owns the run directory: leave now


def read(out_dir: Path, backend: Backend) -> Signals:
    """The same answer on every rank once any rank sees a signal (one small all-reduce per step)."""
    flags = [_terminated or (out_dir / HAND_BACK_FILE).exists(), fence.owner_if_fenced(out_dir) is not None]
    if dist.is_initialized() and dist.get_world_size() > 1:
        shared = torch.tensor([1.0 if flag else 0.0 for flag in flags], device=backend.device)
        dist.all_reduce(shared, op=dist.ReduceOp.MAX)  # over every rank, model-parallel ones included
        flags = [bool(value) for value in shared.tolist()]
    return Signals(hand_back=flags[0], fenced=flags[1])
