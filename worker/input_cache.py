"""The inputs a worker brought down from a remote artifact root (run:<id> exports and checkpoints, datasets, code
snapshots), kept in its scratch directory for the next attempt that names them, within a size limit.

    .inputs/index.json        {relative path: {"bytes": size, "used": unix time}} of every input brought down
    .inputs/pins/<name>.json  {"pid": ..., "inputs": [...]}: what an attempt of the worker <name> is using
    .inputs/lock              held (flock) while any of it is read or changed
    .inputs/locks/<digest>    held while one input is brought down (two workers that need it wait for one copy)

Workers that share one scratch directory (`rlplane up --workers N`) share the cache. An attempt pins its inputs
before it downloads them; over `limit_bytes`, the least recently used inputs no live attempt pins are removed, both
when an attempt starts and when it ends. A pin whose process is gone (a killed worker) holds nothing. Inputs that
were brought down before the index existed are not in it and are never removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from worker.launcher import process_alive

logger = logging.getLogger("rlplane.worker")


class InputCache:
    def __init__(self, scratch: Path, holder: str, limit_bytes: int | None) -> None:
        self.scratch, self.limit = scratch, limit_bytes
        self.dir = scratch / ".inputs"
        self.pins = self.dir / "pins"
        self.pins.mkdir(parents=True, exist_ok=True)
        self.index_file = self.dir / "index.json"
        self.pin_file = self.pins / (re.sub(r"[^\w.-]", "_", holder) + ".json")  # a worker's name may hold any character

    def pin(self, inputs: list[str]) -> None:
        """This worker's attempt uses `inputs` (relative to the scratch directory): none of them is removed until
        release()."""
        with self._locked():
            self.pin_file.write_text(json.dumps({"pid": os.getpid(), "inputs": inputs}))

    @contextlib.contextmanager
    def bringing(self, relative: str) -> Iterator[None]:
        """Held while `relative` is brought down: another worker sharing the directory that needs it waits, then
        finds it here."""
        locks = self.dir / "locks"
        locks.mkdir(exist_ok=True)
        with _flocked(locks / hashlib.sha256(relative.encode()).hexdigest()[:32]):
            yield

    def used(self, inputs: list[str]) -> None:
        """Record the size and the time of use of each of `inputs` that is here, then keep within the limit."""
        with self._locked():
            index = self._index()
            now = time.time()
            for relative in inputs:
                path = self.scratch / relative
                if path.exists():
                    index[relative] = {"bytes": _size(path), "used": now}
            self._evict(index)
            self._write(index)

    def release(self) -> None:
        """The attempt ended: its inputs may go, the least recently used first, while the cache is over its limit."""
        with self._locked():
            self.pin_file.unlink(missing_ok=True)
            index = self._index()
            self._evict(index)
            self._write(index)

    def _evict(self, index: dict[str, dict[str, float]]) -> None:
        if self.limit is None:
            return
        total = sum(entry["bytes"] for entry in index.values())
        pinned = self._pinned()
        for relative in sorted(index, key=lambda r: index[r]["used"]):
            if total <= self.limit:
                return
            if relative in pinned:
                continue
            shutil.rmtree(self.scratch / relative, ignore_errors=True)
            (self.scratch / relative).unlink(missing_ok=True)  # a file (a code snapshot); rmtree leaves files alone
            total -= index.pop(relative)["bytes"]
            logger.info("removed %s from the input cache (over its limit of %d bytes, least recently used)", relative, self.limit)

    def _pinned(self) -> set[str]:
        """What the live attempts of every worker sharing this directory use."""
        pinned: set[str] = set()
        for pin in self.pins.glob("*.json"):
            try:
                held = json.loads(pin.read_text())
                if process_alive(int(held["pid"])):
                    pinned.update(held["inputs"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # unreadable: it pins nothing
        return pinned

    def _index(self) -> dict[str, dict[str, float]]:
        try:
            return json.loads(self.index_file.read_text())
        except (OSError, ValueError):
            return {}

    def _write(self, index: dict[str, dict[str, float]]) -> None:
        partial = self.index_file.with_name("index.json.partial")
        partial.write_text(json.dumps(index))
        partial.replace(self.index_file)

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return _flocked(self.dir / "lock")


@contextlib.contextmanager
def _flocked(path: Path) -> Iterator[None]:
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
