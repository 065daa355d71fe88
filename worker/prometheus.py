"""A worker's own metrics in Prometheus's text format, on a separate port when asked for
(`rlplane worker --metrics-port 9101`, RLPLANE_METRICS_PORT; off by default). The port carries no
secrets and takes no input; keep it inside the cluster network (docs/deploy.md).

    rlplane_worker_heartbeats_total{result="ok|failed"}   heartbeats sent to the API
    rlplane_worker_attempts_total{result}                  attempts this worker ended (succeeded, failed, handed_back, ...)
    rlplane_worker_current_run                             the run it holds (0: idle)
    rlplane_worker_current_step                            that run's last reported step
    rlplane_worker_step_rate                               steps per second over the last `window_s`
    rlplane_worker_gpu_utilization_ratio{gpu,name}         0-1, from nvidia-smi at the last heartbeat (GPU nodes only)
    rlplane_worker_gpu_memory_used_bytes{gpu,name}         likewise
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class WorkerMetrics(Collector):
    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self.registry = CollectorRegistry(auto_describe=True)
        self.heartbeats = Counter("rlplane_worker_heartbeats", "Heartbeats sent to the API", ["result"], registry=self.registry)
        self.attempts = Counter(
            "rlplane_worker_attempts", "Attempts this worker ended, by outcome", ["result"], registry=self.registry
        )
        for result in ("ok", "failed"):
            self.heartbeats.labels(result)
        self._lock = threading.Lock()
        self._run_id: int | None = None
        self._steps: deque[tuple[float, int]] = deque()
        self._gpus: list[dict] = []
        self.registry.register(self)

    def heartbeat(self, ok: bool, run_id: int | None, step: int | None, gpus: list[dict]) -> None:
        """Called by the heartbeat thread after each beat."""
        self.heartbeats.labels("ok" if ok else "failed").inc()
        now = time.monotonic()
        with self._lock:
            if run_id != self._run_id:
                self._run_id, self._steps = run_id, deque()
            if step is not None:
                self._steps.append((now, step))
            while self._steps and now - self._steps[0][0] > self.window_s:
                self._steps.popleft()
            self._gpus = gpus

    def step_rate(self) -> float:
        with self._lock:
            if len(self._steps) < 2:
                return 0.0
            (t0, s0), (t1, s1) = self._steps[0], self._steps[-1]
        return max(0.0, (s1 - s0) / (t1 - t0)) if t1 > t0 else 0.0

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            run_id, last = self._run_id, (self._steps[-1][1] if self._steps else None)
            gpus = list(self._gpus)
        yield GaugeMetricFamily("rlplane_worker_current_run", "The run this worker holds (0: idle)", value=run_id or 0)
        yield GaugeMetricFamily("rlplane_worker_current_step", "The held run's last reported step", value=last or 0)
        yield GaugeMetricFamily(
            "rlplane_worker_step_rate", f"Steps per second over the last {self.window_s:g} s", value=self.step_rate()
        )
        if gpus:
            util = GaugeMetricFamily("rlplane_worker_gpu_utilization_ratio", "GPU utilisation, 0-1", labels=["gpu", "name"])
            memory = GaugeMetricFamily("rlplane_worker_gpu_memory_used_bytes", "GPU memory in use", labels=["gpu", "name"])
            for gpu in gpus:
                labels = [str(gpu["index"]), gpu["name"]]
                util.add_metric(labels, gpu["utilization"] / 100.0)
                memory.add_metric(labels, gpu["memory_used_mb"] * 1024 * 1024)
            yield util
            yield memory

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        """GET /metrics on `port` from a daemon thread."""
        start_http_server(port, addr=host, registry=self.registry)
