"""Where an SDK run's reports go.

    WorkerChannel  inside a run a worker launched (algorithm: command): the run directory's JSONL files, which the
                   worker forwards to the API (the channel our recipes use); checkpoints are written into the run
                   directory's layout; stopping is asked for with a file (cancel, hand-back)
    ApiChannel     a script started anywhere else: straight to the API with the user's token, through the same
                   sender (batched, retried, spooled to disk while the API is down); checkpoints are uploaded; a
                   keep-alive says the script lives and brings back a cancel

Both run in the reporter's background thread or their own: the training loop only appends to a buffer.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from rlplane.client import ApiError, Client, ClientError
from rlplane.layout import (
    CHECKPOINTS,
    ENVIRONMENT_FILE,
    HAND_BACK_FILE,
    MANIFEST,
    STOP_FILE,
    claimed_by_another,
    rotated,
    step_dir_name,
    step_of,
)
from rlplane.limits import MAX_REASON_CHARS
from rlplane.manifest import link_tree, manifest_digest_and_size, write_manifest
from rlplane.reporting import AsyncReporter, CheckpointEvent, ControlPlaneSink, JsonlSink
from rlplane.sdk import leftovers
from rlplane.sdk.values import SdkError

logger = logging.getLogger("rlplane.sdk")

KEEP_ALIVE_S = 10.0
FINAL_STATUS_WAITS_S = (1, 2, 4, 8, 15, 30, 60)  # then the run is failed as silent (RLPLANE_SCRIPT_SILENT_S)


def finish_wait_s() -> float:
    """How long finish() waits for an API it cannot reach (RLPLANE_FINISH_WAIT_S, default 120) before it leaves the
    rest on disk for `rlplane sync`."""
    raw = os.environ.get("RLPLANE_FINISH_WAIT_S", "120")
    try:
        value = float(raw)
    except ValueError:
        raise SdkError(f"RLPLANE_FINISH_WAIT_S={raw!r}: give a number of seconds >= 0") from None
    if not value >= 0:
        raise SdkError(f"RLPLANE_FINISH_WAIT_S={raw!r}: give a number of seconds >= 0")
    return value


class WorkerChannel:
    def __init__(self, run_dir: Path, run_id: int, attempt: int | None, spec: dict[str, Any]) -> None:
        self.run_dir, self.run_id, self.attempt = run_dir, run_id, attempt
        self.keep_last = int((spec.get("train") or {}).get("keep_last", 3))
        self.reporter = AsyncReporter([JsonlSink(run_dir, attempt=attempt)])

    def should_stop(self) -> bool:
        asked = (self.run_dir / STOP_FILE).exists() or (self.run_dir / HAND_BACK_FILE).exists()
        return asked or self._fenced()

    def _fenced(self) -> bool:
        """Another attempt owns the run directory: the control plane ended this one (its worker was silent)."""
        return claimed_by_another(self.run_dir, self.attempt) is not None

    def environment(self, record: dict[str, Any]) -> None:
        partial = self.run_dir / f"{ENVIRONMENT_FILE}.partial"
        partial.write_text(json.dumps(record))
        partial.replace(self.run_dir / ENVIRONMENT_FILE)

    def checkpoint(
        self, source: Path, step: int, metadata: dict[str, Any], elsewhere: dict[str, dict[str, Any]] | None = None
    ) -> Path:
        """Put `source` (a file or directory) into the run directory as step `step`'s checkpoint: linked (or copied)
        into a staging directory, its manifest written (listing `elsewhere`, the files of it other nodes upload),
        renamed into place, older ones rotated (train.keep_last)."""
        if self._fenced():
            raise SdkError(f"attempt {self.attempt} of run {self.run_id} is over (another attempt owns its directory)")
        root = self.run_dir / CHECKPOINTS
        target = root / step_dir_name(step)
        if source.resolve() != target.resolve():
            staging = root / f".staging-{step_dir_name(step)}-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            link_tree(source, staging)  # without the source's own manifest: ours is written here
            write_manifest(staging, step, elsewhere)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        else:
            write_manifest(target, step, elsewhere)
        sha256, size = manifest_digest_and_size(target)
        self.reporter.flush(timeout=30)  # the step's metrics reach the run directory before its checkpoint
        self.reporter.checkpoint(
            CheckpointEvent(step, f"{CHECKPOINTS}/{target.name}", size, sha256, {"kind": "checkpoint", **metadata})
        )
        complete = [s for p in root.glob(f"*/{MANIFEST}") if (s := step_of(p.parent.name)) is not None]
        for old in rotated(complete, self.keep_last):
            shutil.rmtree(root / step_dir_name(old), ignore_errors=True)
        return target

    def finish(self, status: str, reason: str, last_step: int | None) -> None:
        if status == "failed":
            self.reporter.status("failed", reason[-MAX_REASON_CHARS:])
        self.reporter.close()  # the exit code tells the worker how the run ended


class ApiChannel:
    def __init__(self, client: Client, token: str, run: dict[str, Any], spool_dir: Path) -> None:
        self.client, self.run_id = client, int(run["id"])
        self.attempt = int(run["attempts"][-1]["number"]) if run.get("attempts") else 1
        self.finish_wait_s = finish_wait_s()
        self.spool_dir = spool_dir
        leftovers.write_target(spool_dir, client.url, self.run_id, self.attempt)
        self._lock = leftovers.hold_for_life(spool_dir)  # no `rlplane sync` sends this spool while the script lives
        self._unreachable_since: float | None = None  # the first failed upload of a run of failures
        self.sink = ControlPlaneSink(client.url, token, self.run_id, self.attempt, spool_dir=spool_dir, max_retries=3)
        self.reporter = AsyncReporter([self.sink])
        self.status: str = str(run.get("status", "running"))
        self._stop, self._abandon = threading.Event(), threading.Event()
        self.staging = spool_dir / "checkpoints"
        self._queue: list[tuple[Path, int, dict[str, Any]]] = []
        self._pending = threading.Condition()
        self._uploader = threading.Thread(target=self._upload_all, name="rlplane-checkpoints", daemon=True)
        self._uploader.start()
        self._keeper = threading.Thread(target=self._keep_alive, name="rlplane-keep-alive", daemon=True)
        self._keeper.start()
        # what earlier scripts on this machine could not deliver before they ended, sent beside this run
        self._leftovers = threading.Thread(
            target=self._send_leftovers, args=(client.url, token), name="rlplane-leftovers", daemon=True
        )
        self._leftovers.start()

    def should_stop(self) -> bool:
        return self.status == "cancelling"

    def environment(self, record: dict[str, Any]) -> None:
        try:
            self.client.json("POST", f"/runs/{self.run_id}/environment", json=record)
        except ClientError as exc:
            logger.warning("run=%d environment not recorded: %s", self.run_id, exc)

    def checkpoint(self, source: Path, step: int, metadata: dict[str, Any]) -> Path:
        """Stage `source` (a file or directory) as step `step`'s checkpoint beside the spool (hard links: the script
        may delete or overwrite its own copy at once, as Hugging Face's save_total_limit does) and upload it in the
        background, manifest last, then register it."""
        staged = self.staging / step_dir_name(step)
        shutil.rmtree(staged, ignore_errors=True)
        link_tree(source, staged)
        leftovers.write_checkpoint_metadata(staged, metadata)  # for `rlplane sync`, should the upload outlive the script
        write_manifest(staged, step)
        self.reporter.flush(timeout=30)  # the step's metrics before its checkpoint
        with self._pending:
            self._queue.append((staged, step, metadata))
            self._pending.notify_all()
        return staged

    def _upload_all(self) -> None:
        while True:
            with self._pending:
                self._pending.wait_for(lambda: self._queue or self._stop.is_set())
                if not self._queue:
                    return
                staged, step, metadata = self._queue[0]
            backoff = 1.0
            while not leftovers.upload_checkpoint(self.client, self.run_id, staged, step, metadata):
                self._unreachable_since = self._unreachable_since or time.monotonic()
                if self._abandon.wait(backoff):
                    return
                backoff = min(backoff * 2, 5.0)  # an attempt is cheap; the API may be back any moment
            self._unreachable_since = None
            shutil.rmtree(staged, ignore_errors=True)
            staged.with_suffix(".json").unlink(missing_ok=True)
            with self._pending:
                self._queue.pop(0)
                self._pending.notify_all()

    def _uploads_done_or_given_up(self) -> bool:
        """No checkpoint waits, or the API has not answered an upload for finish_wait_s (a working upload of a large
        checkpoint is waited for, however long it takes)."""
        since = self._unreachable_since
        return not self._queue or (since is not None and time.monotonic() - since >= self.finish_wait_s)

    def finish(self, status: str, reason: str, last_step: int | None, upload_wait_s: float = 600.0) -> None:
        self.reporter.flush(timeout=None)  # every report, then the checkpoints, then the status, then close
        self._stop.set()
        deadline = time.monotonic() + upload_wait_s
        with self._pending:
            self._pending.notify_all()
            while not self._uploads_done_or_given_up() and time.monotonic() < deadline:
                self._pending.wait(1.0)
            if self._queue:
                logger.error(
                    "run=%d %d checkpoint(s) not uploaded; left in %s: `rlplane sync` sends them", self.run_id,
                    len(self._queue), self.staging,
                )  # fmt: skip
        self._abandon.set()
        if self.status == "cancelling" and status == "succeeded":
            status, reason = "cancelled", reason or "cancelled: the script stopped when asked"
        if not reason:
            reason = f"the script finished at step {last_step}" if status == "succeeded" else status
        body = {"attempt": self.attempt, "status": status, "reason": reason[-MAX_REASON_CHARS:]}
        if last_step is not None:
            body["last_step"] = last_step
        end = ("status", json.dumps(body).encode())
        if self._queue:  # checkpoints left over: the run's end stays in the spool behind them, for `rlplane sync`
            self.sink.spool.extend([end])
            delivered = False
        else:
            delivered = self.sink.send([end])
        waited = 0.0
        for wait in FINAL_STATUS_WAITS_S if not self._queue else ():  # leaving: the run's end is worth a wait
            if delivered or waited + wait > self.finish_wait_s:
                break
            time.sleep(wait)
            waited += wait
            delivered = self.sink.send([])  # the spool, oldest first, the status last
        if not delivered:
            logger.warning(
                "run=%d final status %s is left in %s, the API being unreachable: `rlplane sync` sends it",
                self.run_id, status, self.spool_dir,
            )  # fmt: skip
        self.reporter.close()  # closes the sink
        if delivered:
            shutil.rmtree(self.spool_dir, ignore_errors=True)
        leftovers.release(self._lock)
        self._leftovers.join(self.finish_wait_s)  # a short script still delivers what earlier ones left

    def _send_leftovers(self, url: str, token: str) -> None:
        try:
            for sent in leftovers.send_all(url, token, exclude=self.run_id):
                if sent.requests or sent.checkpoints:
                    logger.info(
                        "run=%d left unsent by its script: %d request(s) and %d checkpoint(s) sent now, %d left",
                        sent.run_id, sent.requests, sent.checkpoints, sent.left,
                    )  # fmt: skip
        except Exception as exc:  # noqa: BLE001  (a courtesy to earlier runs: never this run's failure)
            logger.warning("earlier runs' leftovers not sent: %s", exc)

    def _keep_alive(self) -> None:
        """Say the script lives (a run that falls silent is failed by the API) and learn of a cancel."""
        body = {"attempt": self.attempt, "status": "running"}
        while not self._stop.wait(KEEP_ALIVE_S):
            try:
                self.status = self.client.json("POST", f"/runs/{self.run_id}/status", json=body)["status"]
            except ApiError as exc:
                logger.warning("run=%d keep-alive refused: %s", self.run_id, exc)
                if exc.status in (404, 409):
                    return
            except ClientError:
                pass  # down for now: the reports are spooled meanwhile
