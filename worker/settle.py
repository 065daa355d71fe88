"""An attempt's last phase on its worker: everything its trainer reported goes to the API and every upload finishes,
then the attempt's end (its status, with the reason) is told, retried while the API is away."""

from __future__ import annotations

import logging
import time

from rlplane.limits import MAX_REASON_CHARS
from rlplane.wire import StatusUpdate
from worker.client import Superseded, WorkerApi
from worker.forward import Forwarder
from worker.launcher import Trainer

logger = logging.getLogger("rlplane.worker")


def settle(forwarder: Forwarder) -> None:
    """Forward until the API took everything and every upload is done, or uploads were fenced: for up to 120 s for
    the API, and however long an upload that is getting on takes."""
    deadline = time.monotonic() + 120
    while not forwarder.poll() and (time.monotonic() < deadline or forwarder.uploading) and forwarder.fenced is None:
        time.sleep(1.0)


def end(
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
    settle(forwarder)  # everything reported goes in before the run's final status
    if forwarder.fenced is not None:
        raise Superseded(forwarder.fenced)
    for wait in (0, 1, 2, 4, 8, 15, 30, 60):
        time.sleep(wait)
        try:
            update = StatusUpdate(
                attempt=attempt,
                status=status,
                reason=reason[-MAX_REASON_CHARS:],
                last_step=forwarder.last_step,
                tokens=forwarder.tokens,
                handed_back=handed_back,
                failure=failure,
                exited_at=trainer.exited_at if status == "failed" else None,
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


def end_unstarted(client: WorkerApi, run_id: int, attempt: int, reason: str) -> str:
    """The attempt could not start (a command's code is missing, the checkpoint to resume is damaged): the run fails
    on its inputs, which another try would find the same."""
    client.status(run_id, StatusUpdate(attempt=attempt, status="failed", reason=reason[-MAX_REASON_CHARS:], failure="config"))
    logger.info("run=%d attempt=%d failed before its trainer started: %s", run_id, attempt, reason)
    return "failed"
