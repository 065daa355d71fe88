"""A run's directory, as the trainer writes it, the worker uploads it and the API serves it.

    runs/<id>/checkpoints/step-000100/manifest.json   a complete checkpoint (its manifest is written last)
    runs/<id>/.hand-back                              the worker asks the trainer to checkpoint and exit
    runs/<id>/.attempt                                the attempt that owns the directory (the fence)
    $RLPLANE_HOME/broker.db                           the embedded broker of one machine

Which checkpoints are kept is one rule (`rotated`), applied by the trainer to its files, by the worker to
a remote root's copies and by the API to its records, so the three always agree on what exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"  # every file's size and sha256; its own hash is the checkpoint's
STEP_PREFIX = "step-"
# Written into the run's directory by a worker that must stop (its node is drained): the trainer
# checkpoints after its current step and exits, so the next attempt redoes no steps.
HAND_BACK_FILE = ".hand-back"
# The number of the attempt that owns the run's directory, written by its worker before the trainer starts;
# the trainer is told its own (ATTEMPT_ENV) and writes no checkpoint once another attempt owns the directory:
# a trainer that outlives its fenced attempt (its worker silent, a partition) cannot overwrite the new one's.
ATTEMPT_FILE = ".attempt"
ATTEMPT_ENV = "RLPLANE_ATTEMPT"


def owner(run_dir: Path) -> int | None:
    """The attempt that owns `run_dir`, if a worker said."""
    try:
        return int((Path(run_dir) / ATTEMPT_FILE).read_text())
    except (OSError, ValueError):
        return None


def step_dir_name(step: int) -> str:
    return f"{STEP_PREFIX}{step:06d}"


def step_of(name: str) -> int | None:
    """The step of a `.../step-000100` directory name; None for anything else."""
    last = name.rstrip("/").rsplit("/", 1)[-1]
    digits = last.removeprefix(STEP_PREFIX)
    return int(digits) if last.startswith(STEP_PREFIX) and digits.isdigit() else None


def run_checkpoint(run_id: int, step: int) -> str:
    """A checkpoint's path relative to the artifact root."""
    return f"runs/{run_id}/{CHECKPOINTS}/{step_dir_name(step)}"


def rotated(steps: Iterable[int], keep_last: int) -> list[int]:
    """The steps of complete checkpoints to delete: all but the newest `keep_last` (train.keep_last)."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 (got {keep_last}); rotating to zero would delete the resume point")
    return sorted(set(steps))[:-keep_last]


def has_checkpoint(run_dir: Path) -> bool:
    """A complete checkpoint to resume from."""
    return any((Path(run_dir) / CHECKPOINTS).glob(f"{STEP_PREFIX}*/{MANIFEST}"))


def embedded_broker_url(home: Path) -> str:
    """Celery over kombu's SQLAlchemy transport in $RLPLANE_HOME: a broker that needs no server, for one machine
    (the API's dispatcher and the workers of `rlplane up` share it)."""
    return f"sqla+sqlite:///{Path(home).expanduser().resolve() / 'broker.db'}"
