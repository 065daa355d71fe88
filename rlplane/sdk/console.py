"""A script's printed lines as its run's logs, outside a worker (inside one the worker reads the script's output).
Python-level only: sys.stdout and sys.stderr are wrapped so that what is written still goes where it went, and each
complete line is handed to the reporter as well; the buffer is never waited on."""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from rlplane.reporting import Reporter


class Tee:
    def __init__(self, stream: TextIO, reporter: Reporter) -> None:
        self._stream, self._reporter = stream, reporter
        self._partial = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._reporter.log(line.rsplit("\r", 1)[-1])  # a progress bar's last state
        return written

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str):  # isatty, fileno, encoding, ...: the stream's own
        return getattr(self._stream, name)


def capture(reporter: Reporter) -> None:
    sys.stdout = Tee(sys.stdout, reporter)  # type: ignore[assignment]
    sys.stderr = Tee(sys.stderr, reporter)  # type: ignore[assignment]


def release() -> None:
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, Tee):
            setattr(sys, name, stream._stream)
