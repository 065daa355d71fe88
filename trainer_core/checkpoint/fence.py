"""The fence on a run's directory (rlplane.layout.ATTEMPT_FILE): a trainer of a fenced attempt writes no checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

from rlplane.layout import ATTEMPT_ENV, owner
from trainer_core.checkpoint.errors import CheckpointError


class Fenced(CheckpointError):
    """Another attempt owns the run's directory now: this trainer's attempt was ended by the control plane."""


def check(run_dir: Path) -> None:
    """Raise Fenced if a worker started this trainer as one attempt and another one owns `run_dir` now.
    A trainer not started by a worker (no ATTEMPT_ENV) or a directory without a fence is never fenced."""
    mine = os.environ.get(ATTEMPT_ENV)
    current = owner(run_dir)
    if mine and current is not None and current != int(mine):
        raise Fenced(f"attempt {mine} was ended: attempt {current} owns {run_dir} now, so this trainer writes no checkpoint")
