"""What a script started outside a worker leaves on disk when the API stays down past its end, and how it is sent
later: by `rlplane sync`, or by the next script's `rlplane.init()` on the same machine and login.

    spool/run-<id>/                 under the config directory (~/.config/rlplane)
        target.json                 {"url", "run_id", "attempt"}: where the spool belongs
        .lock                       held (flock) by the script while it lives: nothing else sends a live run's spool
        000000000012.reports.json   the report spool (rlplane.reports.Spool): metrics, samples, logs, the run's end
        checkpoints/step-000040/    a checkpoint staged for upload, and step-000040.json its metadata

A leftover is sent checkpoints first, then the spool oldest first, so the run's end (the spool's last request) comes
after everything it ends. Ingest is idempotent: a request sent twice stores nothing twice. The directory is removed
once all of it is delivered.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlplane import config
from rlplane.client import ApiError, Client, ClientError
from rlplane.layout import MANIFEST, run_checkpoint, step_of
from rlplane.manifest import manifest_digest_and_size
from rlplane.reports import ReportSender

logger = logging.getLogger("rlplane.sdk")

TARGET = "target.json"
LOCK = ".lock"


def spool_of(run_id: int) -> Path:
    return config.config_dir() / "spool" / f"run-{run_id}"


def write_target(directory: Path, url: str, run_id: int, attempt: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / TARGET).write_text(json.dumps({"url": url.rstrip("/"), "run_id": run_id, "attempt": attempt}))


def _try_lock(directory: Path) -> int | None:
    """`directory`'s lock, taken without waiting: its descriptor (closing it releases the lock), or None when another
    process holds it."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextmanager
def held(directory: Path) -> Iterator[bool]:
    """Hold `directory`'s lock while inside; yields False (and holds nothing) when another process holds it."""
    fd = _try_lock(directory)
    try:
        yield fd is not None
    finally:
        release(fd)


def hold_for_life(directory: Path) -> int | None:
    """Take `directory`'s lock until `release` (the running script's own spool); the descriptor, or None when another
    holds it (a sync sending it right now: the script goes on without the lock rather than wait)."""
    fd = _try_lock(directory)
    if fd is None:
        logger.warning("spool %s is being sent by another process; this run spools beside it", directory)
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def write_checkpoint_metadata(staged: Path, metadata: dict[str, Any]) -> None:
    staged.with_suffix(".json").write_text(json.dumps(metadata))


def upload_checkpoint(client: Client, run_id: int, staged: Path, step: int, metadata: dict[str, Any]) -> bool:
    """Upload a staged checkpoint's files, manifest last, then register it. True once the API holds it (or refused it
    for good, which is logged); False while the API cannot be reached or answers 429/5xx."""
    files = sorted(p for p in staged.rglob("*") if p.is_file() and p.name != MANIFEST)
    try:
        for file in [*files, staged / MANIFEST]:
            with file.open("rb") as handle:
                name = file.relative_to(staged).as_posix()
                client.request("PUT", f"/runs/{run_id}/checkpoints/{step}/files/{name}", content=handle)
        sha256, size = manifest_digest_and_size(staged)
        body = {"step": step, "path": run_checkpoint(run_id, step), "size": size, "sha256": sha256}
        body |= {"kind": "checkpoint", "metadata": {"kind": "checkpoint", **metadata}}
        client.json("POST", f"/runs/{run_id}/checkpoints", json=body)
        return True
    except ApiError as exc:
        if exc.status == 429 or exc.status >= 500:
            return False
        logger.error("run=%d checkpoint step %d refused: %s", run_id, step, exc)
        return True
    except ClientError as exc:
        logger.warning("run=%d checkpoint step %d not uploaded yet: %s", run_id, step, exc)
        return False


def left_behind(exclude: int | None = None) -> list[Path]:
    """The spool directories on this machine with something in them, oldest run first (`exclude`: a run id)."""
    root = config.config_dir() / "spool"
    found = []
    for directory in root.glob("run-*") if root.is_dir() else []:
        run_id = directory.name.removeprefix("run-")
        if run_id.isdigit() and int(run_id) != exclude and (directory / TARGET).is_file():
            found.append(directory)
    return sorted(found, key=lambda d: int(d.name.removeprefix("run-")))


@dataclass
class Sent:
    run_id: int
    requests: int = 0  # reports and statuses delivered
    checkpoints: int = 0
    left: int = 0  # requests and checkpoints still on disk
    skipped: str | None = None  # why nothing was tried
    running: bool = False  # its script still runs, and sends its own spool


def staged_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    root = directory / "checkpoints"
    staged = [(step, p) for p in root.iterdir() if p.is_dir() and (step := step_of(p.name)) is not None] if root.is_dir() else []
    return sorted(staged)


def send_leftover(directory: Path, url: str, token: str, *, max_retries: int = 1) -> Sent:
    """Send what `directory` holds to the API at `url` (checkpoints, then the spool); remove it once all is sent."""
    target = json.loads((directory / TARGET).read_text())
    sent = Sent(int(target["run_id"]))
    if target["url"] != url.rstrip("/"):
        sent.skipped = f"it belongs to {target['url']}, not {url.rstrip('/')}: log in there to send it"
        return sent
    with held(directory) as mine:
        if not mine:
            sent.skipped, sent.running = "its script is still running (it sends its own spool)", True
            return sent
        with Client(url, token) as client:
            for step, staged in staged_checkpoints(directory):
                if not (staged / MANIFEST).is_file():  # staged before its manifest was written: never complete
                    shutil.rmtree(staged, ignore_errors=True)
                    continue
                metadata_file = staged.with_suffix(".json")
                metadata = json.loads(metadata_file.read_text()) if metadata_file.is_file() else {}
                if not upload_checkpoint(client, sent.run_id, staged, step, metadata):
                    break
                shutil.rmtree(staged, ignore_errors=True)
                metadata_file.unlink(missing_ok=True)
                sent.checkpoints += 1
        waiting = len(staged_checkpoints(directory))
        sender = ReportSender(url, token, sent.run_id, int(target["attempt"]), spool_dir=directory, max_retries=max_retries)
        try:
            before = len(sender.spool)
            if not waiting:  # the run's end waits for its checkpoints
                sender.send([])
            sent.requests = before - len(sender.spool)
            sent.left = len(sender.spool) + waiting
        finally:
            sender.close()
    if not sent.left:
        shutil.rmtree(directory, ignore_errors=True)
    return sent


def send_all(url: str, token: str, *, exclude: int | None = None, max_retries: int = 1) -> list[Sent]:
    return [send_leftover(d, url, token, max_retries=max_retries) for d in left_behind(exclude)]
