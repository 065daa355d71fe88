"""The one interface recipes report through, and the buffered reporter behind it.

The training loop must never wait on a disk or a network: calls only append to a buffer under a
lock, and a daemon thread hands the buffer to the sinks every `flush_interval` seconds.
"""

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from rlplane.reporting.events import (
    Batch,
    CheckpointEvent,
    LogLine,
    MetricPoint,
    Sample,
    StatusEvent,
    StepSample,
)
from rlplane.status import TRAINER_STATUSES, TrainerStatus

logger = logging.getLogger("rlplane.reporting")


class Sink(Protocol):
    """Where batches go: a file, the terminal, the control plane. Called from one thread only."""

    def write(self, batch: Batch) -> None: ...

    def close(self) -> None: ...


class Reporter(Protocol):
    def metrics(self, step: int, values: Mapping[str, float]) -> None: ...

    def log(self, text: str, rank: int = 0) -> None: ...

    def samples(self, step: int, samples: Sequence[Sample]) -> None: ...

    def checkpoint(self, event: CheckpointEvent) -> None: ...

    def status(self, status: TrainerStatus, reason: str = "") -> None: ...

    def flush(self, timeout: float | None = None) -> bool: ...

    def close(self) -> None: ...


class NullReporter:
    """For ranks other than zero: only rank zero reports."""

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        pass

    def log(self, text: str, rank: int = 0) -> None:
        pass

    def samples(self, step: int, samples: Sequence[Sample]) -> None:
        pass

    def checkpoint(self, event: CheckpointEvent) -> None:
        pass

    def status(self, status: TrainerStatus, reason: str = "") -> None:
        pass

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self) -> None:
        pass


class AsyncReporter:
    def __init__(self, sinks: Sequence[Sink], flush_interval: float = 0.5, max_pending: int = 50_000) -> None:
        self.sinks = list(sinks)
        self.flush_interval = flush_interval
        self.max_pending = max_pending  # more buffered events than this wake the drain early; nothing is dropped
        self._lock = threading.Lock()
        self._pending = Batch()
        self._log_seq: dict[int, int] = {}
        self._sample_index: tuple[int, int] = (-1, 0)  # (step, next index) so two calls for one step don't collide
        self._last_step: int | None = None
        self._requested = 0  # flush generations: asked for / written
        self._written = 0
        self._written_cond = threading.Condition()
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="rlplane-reporter", daemon=True)
        self._thread.start()

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        now = time.time()
        points = [MetricPoint(key, step, float(value), now) for key, value in values.items()]
        with self._lock:
            self._pending.metrics.extend(points)
            if self._last_step is None or step > self._last_step:
                self._last_step = step
            crowded = len(self._pending.metrics) >= self.max_pending
        if crowded:
            self._wake.set()

    def log(self, text: str, rank: int = 0) -> None:
        now = time.time()
        with self._lock:
            seq = self._log_seq.get(rank, 0)
            self._log_seq[rank] = seq + 1
            self._pending.logs.append(LogLine(rank, seq, text, now))

    def samples(self, step: int, samples: Sequence[Sample]) -> None:
        now = time.time()
        with self._lock:
            last_step, start = self._sample_index
            if step != last_step:
                start = 0
            self._pending.samples.extend(StepSample(step, start + i, s, now) for i, s in enumerate(samples))
            self._sample_index = (step, start + len(samples))

    def checkpoint(self, event: CheckpointEvent) -> None:
        with self._lock:
            self._pending.checkpoints.append(event)
        self._wake.set()

    def status(self, status: TrainerStatus, reason: str = "") -> None:
        if status not in TRAINER_STATUSES:
            raise ValueError(f"a trainer says one of {TRAINER_STATUSES}, not {status!r}")  # what the API takes
        with self._lock:
            self._pending.statuses.append(StatusEvent(status, reason, self._last_step, time.time()))
        self._wake.set()

    def flush(self, timeout: float | None = None) -> bool:
        """Write everything reported so far to every sink; False if that took longer than `timeout`."""
        with self._lock:
            self._requested += 1
            target = self._requested
        self._wake.set()
        with self._written_cond:
            return self._written_cond.wait_for(lambda: self._written >= target or not self._thread.is_alive(), timeout)

    def close(self) -> None:
        """Flush everything, stop the thread, close the sinks. Reports after this are ignored."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake.set()
        self._thread.join()
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                logger.exception("reporting sink=%s failed to close", type(sink).__name__)

    def __enter__(self) -> "AsyncReporter":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            with self._lock:
                batch, self._pending = self._pending, Batch()
                requested, closing = self._requested, self._closed
            if len(batch):
                self._write(batch)
            with self._written_cond:
                self._written = requested
                self._written_cond.notify_all()
            if closing:
                return

    def _write(self, batch: Batch) -> None:
        for sink in self.sinks:
            try:
                sink.write(batch)
            except Exception:  # a broken sink must not stop training or the other sinks
                logger.exception("reporting sink=%s failed; its batch of %d events is lost", type(sink).__name__, len(batch))
