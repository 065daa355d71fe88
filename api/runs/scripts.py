"""Runs of users' own scripts (algorithm: command, docs/sdk.md): those a script started itself through the SDK
(rlplane.init with a user token: no worker holds them, the script reports and ends them), their environment
records, and their checkpoints uploaded file by file."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, BinaryIO

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.artifacts import ArtifactStore, UnsafePath, safe_relative
from api.auth.principal import Principal
from api.exceptions import Conflict, Unprocessable
from api.models import Run, RunAttempt
from api.models.base import utcnow
from api.runs.service import fell_silent, is_scripted, new_run, reportable_run, set_status
from api.runs.views import config_summary
from api.unit_of_work import transaction
from rlplane.layout import run_checkpoint
from rlplane.spec import RunSpec
from rlplane.status import ACTIVE

# The worker name of the attempt of a run a script started itself: no worker can be called this (worker names
# start with a letter or a digit), so the reconciler never takes the script's silence for a worker's.
SCRIPT = "(script)"
MAX_ENVIRONMENT_BYTES = 4 * 1024 * 1024


def create(session: Session, principal: Principal, spec: RunSpec, environment: dict[str, Any] | None) -> Run:
    """A running run whose script reports itself: attempt 1, held by no worker, nothing queued."""
    if spec.algorithm != "command":
        raise Unprocessable(["body", "spec", "algorithm"], "a script's own run is algorithm command (rlplane.init sets it)")
    run = new_run(session, principal, spec, [], "started by its script", None)
    run.attempt_count = 1
    if environment is not None:
        run.environment = _checked(environment)
    session.add(RunAttempt(run_id=run.id, number=1, worker=SCRIPT, started_at=utcnow()))
    run.status = "starting"  # queued -> starting -> running, as a leased run goes, without a worker
    set_status(session, run, "running", f"started by {principal.user_name}'s script (rlplane.init)")
    return run


def _checked(environment: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(environment, dict):
        raise Unprocessable(["body", "environment"], "the environment record is a JSON object")
    size = len(orjson.dumps(environment))
    if size > MAX_ENVIRONMENT_BYTES:
        raise Unprocessable(["body", "environment"], f"the record is {size} bytes; at most {MAX_ENVIRONMENT_BYTES}")
    return environment


def record_environment(session: Session, principal: Principal, run_id: int, environment: dict[str, Any]) -> Run:
    """Where the run ran (the SDK sends it once per attempt; the newest is kept)."""
    run = reportable_run(session, principal, run_id)
    run.environment = _checked(environment)
    script_config = run.environment.get("config")
    if run.algorithm == "command" and isinstance(script_config, dict):  # the runs table shows the script's own values
        run.config = config_summary(run.run_spec, script_config)
    session.flush()
    return run


def save_checkpoint_file(
    session: Session, principal: Principal, store: ArtifactStore, run_id: int, step: int, name: str, body: BinaryIO
) -> str:
    """One file of a scripted run's checkpoint at step `step`, under the run's own checkpoint directory; its
    registration (POST /checkpoints, after the manifest) makes the checkpoint visible."""
    run = reportable_run(session, principal, run_id)
    if not is_scripted(run):
        raise Conflict(
            f"run {run_id} is run by a worker, which stores its checkpoints itself; files are uploaded only "
            "to runs a script started with rlplane.init"
        )
    if run.status not in ACTIVE and not fell_silent(session, run):
        raise Conflict(f"run {run_id} is {run.status}; checkpoints are uploaded while it runs")
    try:
        relative = safe_relative(f"{run_checkpoint(run_id, step)}/{name}")
    except UnsafePath as exc:
        raise Unprocessable(["path", "file_path"], str(exc)) from None
    store.save(relative, body)
    return str(relative)


def fail_silent(factory, silent_after_s: float, born) -> list[int]:
    """Fail the scripted runs that said nothing (no report, no keep-alive) for `silent_after_s`: their script died
    without run.finish() (killed, its machine lost). No worker can retry them: a script is run again by its user."""
    cutoff = utcnow() - timedelta(seconds=silent_after_s)
    with factory() as session:
        rows = session.execute(
            select(Run.id, Run.updated_at)
            .join(RunAttempt, (RunAttempt.run_id == Run.id) & (RunAttempt.number == Run.attempt_count))
            .where(Run.status.in_(ACTIVE), RunAttempt.worker == SCRIPT)
        ).all()
    failed = []
    for run_id, updated_at in rows:
        seen = max(updated_at, born)
        if seen >= cutoff:
            continue
        with transaction(factory) as uow:
            run = uow.session.scalar(select(Run).where(Run.id == run_id).with_for_update())
            if run is None or run.status not in ACTIVE or max(run.updated_at, born) >= cutoff:
                continue
            silent = int((utcnow() - max(run.updated_at, born)).total_seconds())
            reason = f"its script sent nothing for {silent} s: it ended without run.finish() (killed?) or lost the network"
            current = (RunAttempt.run_id == run_id, RunAttempt.number == run.attempt_count)
            attempt = uow.session.scalar(select(RunAttempt).where(*current))
            if attempt is not None and attempt.ended_at is None:
                attempt.ended_at, attempt.end_reason, attempt.failure = utcnow(), reason, "crashed"
                attempt.fell_silent = True
            set_status(uow.session, run, "cancelled" if run.status == "cancelling" else "failed", reason)
            run.failure = None if run.status == "cancelled" else "crashed"
            failed.append(run_id)
    return failed
