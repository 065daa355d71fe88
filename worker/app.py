"""The Celery app: one task, `runs.launch(run_id)`, on the queues this worker serves.

Messages are acknowledged when received (not late): a worker that dies mid-run loses its message,
and that is fine, because the API sees the heartbeats stop and requeues the run from the database.
Late acks would instead redeliver a long task after the broker's visibility timeout while it still
runs. A duplicate that does arrive finds the run leased and ignores itself.
"""

from __future__ import annotations

import logging
import os
import platform
import signal
import threading
import time

from celery import Celery, signals
from kombu import Exchange, Queue

from rlplane.wire import LAUNCH_TASK, NODE_TASK, node_queue
from rlplane.wire import Heartbeat as HeartbeatRecord
from worker.client import WorkerApi
from worker.forks import ForkServer
from worker.prometheus import WorkerMetrics
from worker.settings import WorkerSettings
from worker.supervise import Holding, supervise, supervise_node

logger = logging.getLogger("rlplane.worker")


def make_app(settings: WorkerSettings, metrics: WorkerMetrics | None = None) -> Celery:
    app = Celery("rlplane-worker", broker=settings.resolved_broker_url)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=False,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    client = WorkerApi.connect(settings.api_url, settings.token or "")
    holding = Holding()
    metrics = metrics or WorkerMetrics()
    heartbeat = Heartbeat(settings, client, holding, metrics)
    # A pilot (once) serves one attempt: a forkserver would import the stack for one trainer, as that trainer would.
    forks = ForkServer(settings.python) if settings.fork_trainers and not settings.once else None

    @app.task(name=LAUNCH_TASK)
    def launch(run_id: int) -> str:
        result = supervise(settings, client, holding, int(run_id), forks)
        metrics.attempts.labels(result).inc()
        _served(result)
        return result

    @app.task(name=NODE_TASK)
    def node(run_id: int, attempt: int, node_rank: int) -> str:
        """This worker's node of a multi-node attempt, granted by the API (on this worker's own queue)."""
        result = supervise_node(settings, client, holding, int(run_id), int(attempt), int(node_rank))
        metrics.attempts.labels(result).inc()
        _served(result)
        return result

    def _served(result: str) -> None:
        """A worker started with `once` (a Slurm job's pilot) exits after the attempt it served: a warm shutdown once
        this task returns. A message it ignored (a duplicate, a stale node) leaves it waiting for its own."""
        if settings.once and result != "ignored":
            logger.info("served one attempt (%s): exiting (once)", result)
            os.kill(os.getpid(), signal.SIGTERM)

    @signals.worker_shutting_down.connect(weak=False)
    def _hand_back(sig: str = "a signal", how: str = "Warm", **_: object) -> None:
        # Runs in the signal handler: only set a flag. A warm shutdown (SIGTERM) waits for the task, which
        # stops its trainer and gives the run back so that another worker resumes it at once. A cold one
        # (SIGQUIT, as `rlplane up` stops its workers) ends the task at once: the run is found lost later.
        if how == "Warm":
            holding.stopping = f"worker {settings.name} received {sig} (warm shutdown)"

    @signals.worker_ready.connect(weak=False)
    def _start_heartbeat(**_: object) -> None:
        heartbeat.start()

    @signals.worker_shutdown.connect(weak=False)
    def _stop_heartbeat(**_: object) -> None:
        heartbeat.stop()
        if forks is not None:
            forks.close()

    return app


class Heartbeat:
    """Tells the API every heartbeat_s that this worker lives, what it serves and what it holds."""

    def __init__(self, settings: WorkerSettings, client: WorkerApi, holding: Holding, metrics: WorkerMetrics) -> None:
        self.settings, self.client, self.holding, self.metrics = settings, client, holding, metrics
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlplane-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            devices = gpus()
            body = HeartbeatRecord(
                name=self.settings.name,
                hostname=platform.node(),
                queues=self.settings.queues,
                capacity=0 if self.holding.stopping is not None else 1,  # shutting down: it takes nothing more
                gpus=devices,
                current_run_id=self.holding.run_id,
                current_attempt=self.holding.attempt if self.holding.run_id is not None else None,
                last_step=self.holding.last_step,
                address=self.settings.advertise_address,
            )
            ok = False
            try:
                answer = self.client.heartbeat(body)
                ok = True
                if body.current_run_id is not None and answer.get("current_run_status"):
                    self.holding.seen(
                        body.current_run_id,
                        answer["current_run_status"],
                        answer.get("current_run_attempt"),
                        answer.get("current_run_preempted_by"),
                        answer.get("preempt_grace_s"),
                    )
            except Exception as exc:  # the API is down or restarting: training goes on
                logger.warning("heartbeat failed: %s", exc)
            self.metrics.heartbeat(ok, body.current_run_id, body.last_step, devices)
            self._wait(stopping=body.capacity == 0)

    def _wait(self, stopping: bool) -> None:
        """Until the next heartbeat, or at once when a shutdown begins: the API must know before the run it hands back
        is queued again, or a gang could be granted to this worker, which would never join it."""
        deadline = time.monotonic() + self.settings.heartbeat_s
        while not self._stop.wait(min(0.25, max(0.0, deadline - time.monotonic()))) and time.monotonic() < deadline:
            if not stopping and self.holding.stopping is not None:
                return


def gpus() -> list[dict]:
    """The node's GPUs from nvidia-smi (count, model, memory, utilisation); none without it."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return []
    query = "index,name,memory.total,memory.used,utilization.gpu"
    try:
        output = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = []
    for line in output.strip().splitlines():
        index, name, total, used, util = (part.strip() for part in line.split(","))
        found.append(
            {
                "index": int(index),
                "name": name,
                "memory_total_mb": int(total),
                "memory_used_mb": int(used),
                "utilization": float(util),
            }
        )
    return found


def declare_queues(app: Celery, queues: list[str], tries: int = 5) -> None:
    """Create the broker's queues before consuming. On the SQLite broker the first declaration of a
    queue inserts a row, and two processes declaring it at once (the API sending, a worker starting)
    make one of them fail: whoever fails finds the row on the next try."""
    for attempt in range(1, tries + 1):
        try:
            with app.connection_for_write() as connection:
                channel = connection.default_channel
                for name in queues:
                    Queue(name, Exchange(name, type="direct"), routing_key=name).bind(channel).declare()
            return
        except Exception:
            if attempt == tries:
                raise
            time.sleep(0.2 * attempt)


def run_worker(settings: WorkerSettings, concurrency: int = 1) -> None:
    """Serve settings.queues until stopped: one run at a time per worker process (pool solo).

    SIGTERM (docker stop, a Kubernetes pod's termination) is Celery's warm shutdown: the run in
    progress is handed back (see make_app) before the process exits."""
    from rlplane.logformat import configure_logging

    # httpx says every request at INFO: a heartbeat every few seconds and a report batch every second would
    # be most of the log. The worker logs what happens to runs itself (supervise.py).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    metrics = WorkerMetrics()
    if settings.metrics_port:
        metrics.serve(settings.metrics_port)
    if settings.log_format == "json":
        signals.setup_logging.connect(lambda **_: configure_logging("json"), weak=False)  # Celery then leaves logging alone
    app = make_app(settings, metrics)
    queues = [*settings.queues, node_queue(settings.name)]  # its own: where the API sends its nodes of gangs
    declare_queues(app, queues)
    app.worker_main(
        [
            "worker",
            "--queues",
            ",".join(queues),
            "--hostname",
            f"{settings.name}@%h",
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
        ]  # fmt: skip
    )
