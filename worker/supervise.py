"""One attempt of one run: lease it, start its trainer, forward its reports, and end the attempt.

    lease (409: a duplicate delivery or a run that is no longer queued -> ignore the message)
    -> write the spec, start the trainer (resuming from the run directory's checkpoints, if any)
    -> every poll: forward reports; every heartbeat: look for a cancel; watch for a hang
    -> exit 0: succeeded | exit 2: failed on its configuration | exit 3: failed, diverged (the trainer's reason)
    | other exit: failed, crashed (with the last lines) | cancel: cancelled | hang: lost (retried)
    | the worker shuts down (SIGTERM): lost, handed back (requeued at once, not counted against max_attempts)

A stale fencing token (the API marked the run lost, or it runs elsewhere now) stops the trainer at once.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from typing import Any

from rlplane.layout import CHECKPOINTS, HAND_BACK_FILE, has_checkpoint
from rlplane.limits import MAX_REASON_CHARS
from rlplane.reports import ReportSender
from rlplane.spec import RunSpec, dump_spec
from rlplane.status import EXIT_DIVERGED, FAILURE_OF_EXIT
from rlplane.wire import StatusUpdate
from worker.artifacts import WorkerArtifacts
from worker.client import LeaseRefused, Superseded, WorkerApi
from worker.forward import Forwarder
from worker.launcher import Trainer, trainer_command
from worker.settings import WorkerSettings

logger = logging.getLogger("rlplane.worker")

STARTUP_GRACE_S = 300  # the least a trainer gets for its first step, whatever resources.hang_timeout_s says


@dataclass
class Holding:
    """What the heartbeat reports (the run this worker holds and its last step) and what its answer
    said about that run (cancelling: stop it)."""

    run_id: int | None = None
    last_step: int | None = None
    status: str | None = None
    stopping: str | None = None  # why this worker shuts down (set from its signal handler): hand the run back

    def seen(self, run_id: int, status: str) -> None:
        if run_id == self.run_id:
            self.status = status


def supervise(settings: WorkerSettings, client: WorkerApi, holding: Holding, run_id: int) -> str:
    """Run one attempt of `run_id`; returns how it ended (for logs and tests)."""
    try:
        lease = client.lease(run_id, settings.name)
    except LeaseRefused as exc:
        logger.info("run=%d not leased (%s): a duplicate or stale message, ignored", run_id, exc)
        return "ignored"
    attempt, spec = lease.attempt, lease.run.spec
    artifacts = WorkerArtifacts(settings.artifact_root, settings.home / "scratch")
    out_dir, relative = artifacts.run_dir(run_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_path = out_dir / f"spec-attempt-{attempt}.json"
    spec_path.write_text(json.dumps(dump_spec(spec)))
    sink = ReportSender(
        settings.api_url, settings.token or "", run_id, attempt, spool_dir=out_dir / ".spool", max_retries=1, backoff=0.5
    )

    def rotate_remote(event: dict[str, Any]) -> None:
        """The remote copies follow the trainer's rotation of its local ones (train.keep_last)."""
        if event["metadata"].get("kind") != "export":
            artifacts.prune_checkpoints(f"{relative}/{CHECKPOINTS}", spec.train.keep_last)

    publish = artifacts.publish if artifacts.remote else None
    forwarder = Forwarder(sink, out_dir, relative, attempt, publish=publish, uploaded=rotate_remote)
    holding.run_id, holding.last_step, holding.status = run_id, None, None
    try:
        artifacts.prepare(run_id, spec)  # a remote root: the checkpoint to resume, the runs and dataset it names
        resume = has_checkpoint(out_dir)
        started = f"attempt {attempt} on {settings.name}" + (" (resuming)" if resume else "")
        if client.status(run_id, StatusUpdate(attempt=attempt, status="running", reason=started))["status"] == "cancelling":
            client.status(
                run_id, StatusUpdate(attempt=attempt, status="cancelled", reason="cancelled before its trainer started")
            )
            logger.info("run=%d attempt=%d cancelled before its trainer started", run_id, attempt)
            return "cancelled"
        (out_dir / HAND_BACK_FILE).unlink(missing_ok=True)  # the last attempt's request, answered
        logger.info("run=%d attempt=%d leased: starting its trainer%s", run_id, attempt, " (resuming)" if resume else "")
        command = trainer_command(settings.python, spec, spec_path, out_dir, resume)
        trainer = Trainer(command, out_dir, forwarder.add_line, env=artifacts.trainer_env())
        outcome = _watch(settings, client, holding, run_id, attempt, spec, trainer, forwarder)
        if artifacts.remote and outcome in ("succeeded", "failed", "cancelled") and forwarder.settled:
            # Its checkpoints and export are on the remote root and its reports in the API: the scratch
            # copy would only fill this node's disk (a resumed failed run downloads what it needs again).
            shutil.rmtree(out_dir, ignore_errors=True)
        return outcome
    except Superseded as exc:
        logger.warning("run=%d attempt=%d superseded: %s", run_id, attempt, exc)
        return "superseded"
    finally:
        holding.run_id, holding.last_step, holding.status = None, None, None
        forwarder.close()
        sink.close()


def _watch(
    settings: WorkerSettings,
    client: WorkerApi,
    holding: Holding,
    run_id: int,
    attempt: int,
    spec: RunSpec,
    trainer: Trainer,
    forwarder: Forwarder,
) -> str:
    hang_s = spec.resources.hang_timeout_s
    last_progress, last_step = time.monotonic(), None
    try:
        while trainer.wait(settings.poll_s) is None:
            forwarder.poll()
            holding.last_step = forwarder.last_step
            if forwarder.last_step != last_step:
                last_progress, last_step = time.monotonic(), forwarder.last_step
            # Before its first step a trainer imports, loads (or downloads) the model and joins its ranks:
            # that may take longer than a step ever should, so the first step gets a grace period.
            limit = hang_s if hang_s is None or last_step is not None else max(hang_s, STARTUP_GRACE_S)
            if limit is not None and time.monotonic() - last_progress > limit:
                trainer.kill_group()
                what = f"no step finished for {limit} s" if last_step is not None else f"no first step within {limit} s"
                return _end(client, forwarder, trainer, run_id, attempt, "lost", f"hang: {what}; killed")
            if holding.stopping is not None:
                reason = _hand_back(settings, trainer, forwarder, holding.stopping)
                return _end(client, forwarder, trainer, run_id, attempt, "lost", reason, handed_back=True)
            if holding.status is not None:
                status = holding.status
                if status == "cancelling":
                    trainer.kill_group()
                    return _end(client, forwarder, trainer, run_id, attempt, "cancelled", "cancelled: the trainer was stopped")
                if status not in (None, "starting", "running"):
                    trainer.kill_group()  # marked lost (we were silent too long) or ended elsewhere
                    raise Superseded(f"run {run_id} is {status}")
    except BaseException:
        trainer.kill_group()
        raise
    code = trainer.poll()
    trainer.wait_output()
    forwarder.poll()  # what the trainer wrote last (its final step, its own failure reason) before the reason is told
    if code == 0:
        return _end(client, forwarder, trainer, run_id, attempt, "succeeded", f"trainer exited 0 at step {forwarder.last_step}")
    failure = FAILURE_OF_EXIT.get(code, "crashed")
    if code == EXIT_DIVERGED and forwarder.trainer_failure:
        return _end(client, forwarder, trainer, run_id, attempt, "failed", forwarder.trainer_failure, failure=failure)
    last_lines = "\n".join(list(trainer.tail)[-15:])
    reason = f"trainer exited with {code}:\n{last_lines}"
    return _end(client, forwarder, trainer, run_id, attempt, "failed", reason, failure=failure)


def _hand_back(settings: WorkerSettings, trainer: Trainer, forwarder: Forwarder, why: str) -> str:
    """Ask the trainer to checkpoint after its current step and exit (HAND_BACK_FILE), forwarding meanwhile;
    stop it after settings.hand_back_grace_s. Returns the attempt's end reason."""
    (forwarder.out_dir / HAND_BACK_FILE).touch()
    deadline = time.monotonic() + settings.hand_back_grace_s
    while trainer.wait(settings.poll_s) is None and time.monotonic() < deadline:
        forwarder.poll()
    if trainer.poll() == 0:
        # The hand-back checkpoint's event is the trainer's last write: read it now, after the trainer left.
        trainer.wait_output()
        forwarder.poll()
        return f"handed back: {why}; checkpointed at step {forwarder.last_checkpoint}, where the next attempt resumes"
    trainer.kill_group()
    return f"handed back: {why}; stopped after {settings.hand_back_grace_s:g} s, resumes from its latest checkpoint"


def _end(
    client: WorkerApi,
    forwarder: Forwarder,
    trainer: Trainer,
    run_id: int,
    attempt: int,
    status: str,
    reason: str,
    handed_back: bool = False,
    failure: str | None = None,
) -> str:
    trainer.wait_output()
    deadline = time.monotonic() + 120  # for the API; an upload that is getting on is waited for however long it takes
    while not forwarder.poll() and (time.monotonic() < deadline or forwarder.uploading):
        time.sleep(1.0)  # everything reported goes in before the run's final status
    for wait in (0, 1, 2, 4, 8, 15, 30, 60):
        time.sleep(wait)
        try:
            update = StatusUpdate(
                attempt=attempt,
                status=status,
                reason=reason[-MAX_REASON_CHARS:],
                last_step=forwarder.last_step,
                handed_back=handed_back,
                failure=failure,
            )
            client.status(run_id, update)
            logger.info("run=%d attempt=%d %s: %s", run_id, attempt, status, reason.splitlines()[0] if reason else "")
            return "handed_back" if handed_back else status
        except Superseded:
            raise
        except Exception as exc:
            logger.warning("run=%d final status %s not sent yet: %s", run_id, status, exc)
    logger.error("run=%d final status %s never reached the API; it will be found lost and retried", run_id, status)
    return status
