"""A run's directory, as the trainer writes it, the worker uploads it and the API serves it.

    runs/<id>/checkpoints/step-000100/manifest.json   a complete checkpoint (its manifest is written last)
    runs/<id>/checkpoints/.step-000100.node-part/     a gang node's shards of that checkpoint, in its own copy of
                                                      the run directory, for its worker to upload (RUN_DIR_PER_NODE_ENV)
    runs/<id>/.hand-back                              the worker asks the trainer to checkpoint and exit
    runs/<id>/.attempt                                the attempt that owns the directory (the fence)
    runs/<id>/.stop                                   a command run is cancelled: its script saves and exits
    code/<sha256>.tar.gz                              a command run's code snapshot (rlplane submit --code)
    $RLPLANE_HOME/broker.db                           the embedded broker of one machine

Which checkpoints are kept is one rule (`rotated`), applied by the trainer to its files, by the worker to
a remote root's copies and by the API to its records, so the three always agree on what exists.
"""

from __future__ import annotations

import os
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
# Written by a worker into a command run's directory on cancel: the SDK's should_stop() turns true and the script has
# command.stop_grace_s to save and exit before it is killed (a hand-back asks the same through HAND_BACK_FILE).
STOP_FILE = ".stop"
# What a worker tells a command run's script (the SDK reads them): the run, its directory (the SDK's reports go
# there as the JSONL files the worker forwards), the spec it runs, and the checkpoint to resume from, if any.
RUN_ID_ENV = "RLPLANE_RUN_ID"
RUN_DIR_ENV = "RLPLANE_RUN_DIR"
# Where a trainer finds earlier runs' directories (run:<id>[@step] models, a generate run's dataset): set by its worker.
RUNS_DIR_ENV = "RLPLANE_RUNS_DIR"
SPEC_ENV = "RLPLANE_SPEC"
RESUME_ENV = "RLPLANE_RESUME_FROM"
# Set by a worker for a multi-node run's trainers when the nodes do not share the run directory (a remote artifact
# root: each node has its own copy in its scratch directory): each node's worker uploads its own node's shards of a
# sharded checkpoint (NODE_PART_SUFFIX), and rank zero's manifest lists them all.
RUN_DIR_PER_NODE_ENV = "RLPLANE_RUN_DIR_PER_NODE"
NODE_PART_SUFFIX = ".node-part"
NODES_SUFFIX = ".nodes"
# Set by node 0's worker for the trainer of a run with a generator node (grpo.generator node): host:port where that
# node's generator listens (trainer_core/rollout/own_process.py), as the node published it when it joined.
GENERATOR_ADDRESS_ENV = "RLPLANE_GENERATOR_ADDRESS"
# Where a command run's script ran (the SDK writes it into the run directory; the worker sends it once)
ENVIRONMENT_FILE = "environment.json"


def owner(run_dir: Path) -> int | None:
    """The attempt that owns `run_dir`, if a worker said."""
    try:
        return int((Path(run_dir) / ATTEMPT_FILE).read_text())
    except (OSError, ValueError):
        return None


def claimed_by_another(run_dir: Path, attempt: int | None) -> int | None:
    """The attempt that owns `run_dir` when it is not `attempt`, this process's (None: no worker started it, and it
    is never fenced); None while `attempt` may write there."""
    current = owner(run_dir) if attempt is not None else None
    return current if current is not None and current != attempt else None


def attempt_of_this_process() -> int | None:
    """The attempt a worker started this process as (ATTEMPT_ENV); None outside a worker."""
    value = os.environ.get(ATTEMPT_ENV)
    return int(value) if value else None


def step_dir_name(step: int) -> str:
    return f"{STEP_PREFIX}{step:06d}"


def step_of(name: str) -> int | None:
    """The step of a `.../step-000100` directory name; None for anything else."""
    last = name.rstrip("/").rsplit("/", 1)[-1]
    digits = last.removeprefix(STEP_PREFIX)
    return int(digits) if last.startswith(STEP_PREFIX) and digits.isdigit() else None


def beside_step(step: int, suffix: str) -> str:
    """A hidden name beside `step`'s checkpoint (`.step-000100<suffix>`): nothing takes it for a checkpoint or a
    checkpoint's staging directory. A gang node's part (NODE_PART_SUFFIX) and, on a remote root, what the nodes said
    they uploaded (NODES_SUFFIX) are named so."""
    return f".{step_dir_name(step)}{suffix}"


def step_beside(name: str, suffix: str) -> int | None:
    """The step of a `beside_step(step, suffix)` name; None for anything else."""
    last = name.rstrip("/").rsplit("/", 1)[-1]
    return step_of(last[1 : -len(suffix)]) if last.startswith(".") and last.endswith(suffix) else None


def node_parts(run_dir: Path) -> list[Path]:
    """A gang node's parts of checkpoints in its copy of the run directory, oldest first."""
    parts = (Path(run_dir) / CHECKPOINTS).glob(f".{STEP_PREFIX}*{NODE_PART_SUFFIX}")
    return sorted(part for part in parts if step_beside(part.name, NODE_PART_SUFFIX) is not None)


def run_checkpoint(run_id: int, step: int) -> str:
    """A checkpoint's path relative to the artifact root."""
    return f"runs/{run_id}/{CHECKPOINTS}/{step_dir_name(step)}"


def rotated(steps: Iterable[int], keep_last: int) -> list[int]:
    """The steps of complete checkpoints to delete: all but the newest `keep_last` (train.keep_last)."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 (got {keep_last}); rotating to zero would delete the resume point")
    return sorted(set(steps))[:-keep_last]


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint directory of a run directory (its manifest written), if any."""
    found = [(step_of(p.parent.name), p.parent) for p in (Path(run_dir) / CHECKPOINTS).glob(f"{STEP_PREFIX}*/{MANIFEST}")]
    steps = [(step, path) for step, path in found if step is not None]
    return max(steps)[1] if steps else None


def code_snapshot(sha256: str) -> str:
    """A command run's code snapshot (a .tar.gz, POST /code) relative to the artifact root."""
    return f"code/{sha256}.tar.gz"


def has_checkpoint(run_dir: Path) -> bool:
    """A complete checkpoint to resume from."""
    return any((Path(run_dir) / CHECKPOINTS).glob(f"{STEP_PREFIX}*/{MANIFEST}"))


def embedded_broker_url(home: Path) -> str:
    """Celery over kombu's SQLAlchemy transport in $RLPLANE_HOME: a broker that needs no server, for one machine
    (the API's dispatcher and the workers of `rlplane up` share it)."""
    return f"sqla+sqlite:///{Path(home).expanduser().resolve() / 'broker.db'}"
