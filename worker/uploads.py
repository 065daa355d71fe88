"""Checkpoint uploads to a remote artifact root, in a thread of their own.

An upload of a large checkpoint takes minutes; done in the forwarding loop it would hold back the
run's metrics and logs, and the worker's hang and hand-back checks, for as long. Here they go one
at a time in the order the trainer wrote them (a later checkpoint is never registered before an
earlier one), and a failed upload is retried until it succeeds or the worker closes.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("rlplane.worker")


class Fenced(Exception):
    """Raised by `publish`: another attempt owns the run on the remote root, so nothing of this one goes up any more."""


class Uploads:
    def __init__(
        self,
        publish: Callable[[str], bool | None],
        prefix: str,
        retry_s: float = 5.0,
        uploaded: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """`publish(relative path)` uploads one checkpoint or export directory (False: it was gone, nothing to
        register); `prefix` is the run's path;
        `uploaded(event)` runs after each upload (rotating the remote copies; its failure is only logged)."""
        self.publish, self.prefix, self.retry_s = publish, prefix, retry_s
        self.uploaded = uploaded or (lambda _event: None)
        self._pending: deque[dict[str, Any]] = deque()
        self._done: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.failing = False  # the last upload attempt failed (the remote store is down or refuses)
        self.fenced: str | None = None  # why uploads stopped for good: another attempt owns the run

    def add(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        with self._lock:
            self._pending.extend(events)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="checkpoint-uploads", daemon=True)
            self._thread.start()
        self._wake.set()

    def done(self) -> list[dict[str, Any]]:
        """The events whose upload finished since the last call, in order."""
        with self._lock:
            done, self._done = self._done, []
        return done

    @property
    def progressing(self) -> bool:
        """An upload is under way and the last attempt did not fail: worth waiting for at the run's end."""
        with self._lock:
            return bool(self._pending) and not self.failing and self.fenced is None

    @property
    def idle(self) -> bool:
        """Nothing waits to be uploaded or collected."""
        with self._lock:
            return not self._pending and not self._done

    def close(self) -> None:
        self._closed.set()
        self._wake.set()

    def _run(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                event = self._pending[0] if self._pending else None
            if event is None:
                self._wake.wait()
                self._wake.clear()
                continue
            try:
                published = self.publish(f"{self.prefix}/{event['path']}") is not False
            except Fenced as exc:
                self.fenced = str(exc)
                logger.warning("upload of %s refused: %s", event["path"], exc)
                return
            except Exception as exc:  # the remote store is down: training goes on, the upload is retried
                self.failing = True
                logger.warning("upload of %s failed (retried in %.0f s): %s", event["path"], self.retry_s, exc)
                self._closed.wait(self.retry_s)
                continue
            with self._lock:
                self.failing = False
                self._pending.popleft()
                if published:  # else the trainer rotated it away first: there is nothing to register
                    self._done.append(event)
            try:
                self.uploaded(event)
            except Exception as exc:  # what is left over is removed after the next upload
                logger.warning("after the upload of %s: %s", event["path"], exc)
