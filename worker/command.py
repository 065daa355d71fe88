"""A command run (algorithm: command): the user's script, started the way our trainer is (one process, or torchrun
for several ranks and nodes), in its code's directory, with an environment that lets the SDK find its run.

The worker's own RLPLANE_* variables (its token among them) are not passed on: a user's script gets only the run's
(RLPLANE_RUN_ID, RLPLANE_RUN_DIR, ...) and what command.env sets.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path, PurePosixPath

from rlplane.layout import (
    ATTEMPT_ENV,
    RESUME_ENV,
    RUN_DIR_ENV,
    RUN_ID_ENV,
    SPEC_ENV,
    code_snapshot,
    latest_checkpoint,
)
from rlplane.ports import free_port
from rlplane.spec import RunSpec
from rlplane.spec.command import render_argv
from worker.launcher import NodePlace, processes_per_node

PYTHONS = ("python", "python3")
CODE_DIR = "code"


class CommandError(Exception):
    """The command cannot start (its code is missing or unsafe); the run fails on its configuration."""


def command_argv(python: str, spec: RunSpec, out_dir: Path, run_id: int, attempt: int, place: NodePlace | None) -> list[str]:
    """The argv to start: placeholders filled; a leading python is the worker's interpreter; several processes (or
    nodes) run under torchrun, which takes the script (or -m module) and its arguments as they are."""
    argv = render_argv(spec, {"run.id": str(run_id), "run.dir": str(out_dir), "run.attempt": str(attempt)})
    if argv and argv[0] in PYTHONS:
        argv = [python, *argv[1:]]
    nproc = processes_per_node(spec)
    if place is None and nproc == 1:
        return argv
    if argv[0] != python:
        raise CommandError(f"{argv[0]!r}: a command of several processes starts with python (torchrun runs the script)")
    launcher = [python, "-m", "trainer_core.torchrun", "--nproc-per-node", str(nproc), "--tee", "3", "--max-restarts", "0"]
    if place is not None:
        launcher += ["--nnodes", str(place.nodes), "--node-rank", str(place.node_rank)]
        launcher += ["--master-addr", place.master_address, "--master-port", str(place.master_port)]
        launcher += ["--log-dir", str(out_dir / "rank-logs" / f"node-{place.node_rank}")]
    else:
        launcher += ["--master-port", str(free_port()), "--log-dir", str(out_dir / "rank-logs")]
    return [*launcher, *argv[1:]]


def command_env(
    spec: RunSpec, out_dir: Path, spec_path: Path, run_id: int, attempt: int, resume: Path | None = None
) -> dict[str, str]:
    """The script's whole environment (it replaces the worker's; see the module's docstring). `resume`: the run
    directory (its latest checkpoint, the default) or the one checkpoint every node of a gang resumes from."""
    assert spec.command is not None
    env = {name: value for name, value in os.environ.items() if not name.startswith("RLPLANE_")}
    env.update(spec.command.env)
    if resume is None or resume == out_dir:
        resume = latest_checkpoint(out_dir)
    env.update(
        {
            RUN_ID_ENV: str(run_id),
            RUN_DIR_ENV: str(out_dir),
            SPEC_ENV: str(spec_path),
            ATTEMPT_ENV: str(attempt),
            RESUME_ENV: str(resume) if resume is not None else "",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def command_cwd(spec: RunSpec, out_dir: Path, artifact_root: Path) -> Path:
    """Where the command runs: its code snapshot unpacked in the run directory (afresh for each attempt), its shared
    directory, or the run directory."""
    assert spec.command is not None
    code = spec.command.code
    if code is None:
        return out_dir
    if code.path is not None:
        if not Path(code.path).is_dir():
            raise CommandError(f"command.code.path {code.path} is not a directory on this worker")
        return Path(code.path)
    archive = artifact_root / code_snapshot(code.snapshot or "")
    if not archive.is_file():
        raise CommandError(f"code snapshot {code.snapshot} is not in the artifact root ({archive})")
    target = out_dir / CODE_DIR
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    unpack(archive, target)
    return target


def unpack(archive: Path, target: Path) -> None:
    """Extract files and directories only, each inside `target` (the API checked the same at upload)."""
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            name = PurePosixPath(member.name.removeprefix("./"))
            if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
                raise CommandError(f"code snapshot {archive.name}: {member.name!r} is not a plain file inside it")
            if not name.parts:
                continue
            path = target.joinpath(*name.parts)
            if member.isdir():
                path.mkdir(parents=True, exist_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            with source, path.open("wb") as out:
                shutil.copyfileobj(source, out)
            path.chmod(0o755 if member.mode & 0o111 else 0o644)
