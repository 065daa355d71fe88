"""The fence on a run's directory (rlplane.layout.ATTEMPT_FILE): a trainer of a fenced attempt writes no checkpoint,
and stops after its current step (recipes/run_dir_signals.py)."""

from __future__ import annotations

from pathlib import Path

from rlplane.layout import attempt_of_this_process, claimed_by_another
from trainer_core.checkpoint.errors import CheckpointError


class Fenced(CheckpointError):
    """Another attempt owns the run's directory now: this trainer's attempt was ended by the control plane."""


def owner_if_fenced(run_dir: Path) -> int | None:
    """The attempt that owns `run_dir` when it is not this trainer's; None while this trainer may write there.
    A trainer not started by a worker (no ATTEMPT_ENV) or a directory without a fence is never fenced."""
    return claimed_by_another(run_dir, attempt_of_this_process())


def check(run_dir: Path, doing: str = "writes no checkpoint") -> None:
    """Raise Fenced, saying that this trainer `doing`, if another attempt owns `run_dir`."""
    current = owner_if_fenced(run_dir)
    if current is not None:
        raise Fenced(ended(run_dir, doing, current))


def ended(run_dir: Path, doing: str, current: int | None) -> str:
    """Why this trainer `doing`: its attempt was ended, and which one owns `run_dir` now (`current`: where this rank
    sees it)."""
    now = f"attempt {current}" if current is not None else "another attempt"
    return f"attempt {attempt_of_this_process()} was ended: {now} owns {run_dir} now, so this trainer {doing}"
