"""The database is the truth about runs; this loop makes the broker and the workers agree with it.

Every `reconcile_s` seconds, and at once when this process has just queued a run, in each API process:
- each queued run, highest priority first (api/runs/priorities.py), goes to its queue's executor (api/executors/):
  Celery workers on the nodes (the run is sent to its queue's broker queue, `runs.launch`, again every `redispatch_s`
  while it stays queued; a multi-node run is granted its gang when enough workers are idle, api/runs/gang.py, and
  each node is sent to its worker's own queue), or a Slurm cluster (a job per attempt, whose workers then take it the
  same way).
- a waiting run that outranks running ones and cannot start otherwise has them handed back (api/runs/preemption.py).
- sweeps move on: ended trials are scored, weak ones stopped early, new ones started up to `parallel`
  (api/sweeps/service.py).
- pipelines move on: a stage whose run ended ends as it did, and a stage whose inputs now exist starts its run
  (api/pipelines/service.py).
- every `alert_s`, alert rules and the RL detectors look at active runs, and due alert deliveries are tried
  (api/alerts/).
- active runs whose worker (any node's worker, for a gang) has not sent a heartbeat for `lost_after_s` are
  marked lost (the attempt ends "lost: no heartbeat for N s") and requeued while attempts remain, else failed.
  Silence counts only from this process's start: while the API was down (a restart, an upgrade)
  workers could not reach it, and that is not their fault.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from api.alerts import delivery
from api.alerts import service as alerts
from api.exceptions import Conflict
from api.executors.celery import CeleryExecutor, Send
from api.executors.slurm import SlurmExecutor
from api.models import AttemptNode, Run, RunAttempt, Worker
from api.models.base import utcnow
from api.pipelines import service as pipelines
from api.runs import gang, preemption, priorities, quotas, scripts
from api.runs.service import requeue_or_fail
from api.settings import SlurmQueue
from api.sweeps import service as sweeps
from api.unit_of_work import transaction
from api.workers.holding import moved_on, moved_on_reason
from rlplane.status import ACTIVE

logger = logging.getLogger("rlplane.reconcile")

FORGET_EVERY_S = 60.0  # how often long-silent workers are looked for (forget_gone_workers)
# A granted node whose worker has not joined after this long (its message lost, or the worker stuck before it):
# the attempt is lost, and a new gang is granted.
JOIN_TIMEOUT_S = 120.0


def make_sender(broker_url: str) -> Send:
    """Task messages through Celery's producer (the API never imports the worker)."""
    from celery import Celery

    app = Celery("rlplane-api", broker=broker_url)
    app.conf.update(task_serializer="json", accept_content=["json"], broker_connection_timeout=2)

    def send(task: str, args: list, queue: str) -> None:
        app.send_task(task, args=args, queue=queue, retry=False)

    return send


class Reconciler:
    def __init__(
        self,
        factory: sessionmaker[Session],
        send: Send,
        *,
        reconcile_s: float = 2.0,
        redispatch_s: float = 30.0,
        lost_after_s: float = 20.0,
        script_silent_s: float = 300.0,
        reward_entrypoints: list[str] | None = None,
        alert_s: float = 10.0,
        forget_workers_after_s: float = 86_400.0,
        preempt_after_s: float = 600.0,
        slurm_queues: dict[str, SlurmQueue] | None = None,
        broker_url: str = "",
        artifacts: str = "",
    ) -> None:
        """`slurm_queues`: the queues bound to a Slurm cluster, whose jobs' workers reach `broker_url` and
        `artifacts` unless the queue says otherwise."""
        self.alert_s, self._alerts_at = alert_s, -1e9
        self.forget_workers_after_s, self._forgot_at = forget_workers_after_s, -1e9
        self.factory, self.send = factory, send
        self.reward_entrypoints = reward_entrypoints or []  # what a pipeline stage's run may use, as a submit
        self.reconcile_s, self.redispatch_s, self.lost_after_s = reconcile_s, redispatch_s, lost_after_s
        self.script_silent_s, self.preempt_after_s = script_silent_s, preempt_after_s
        self.celery = CeleryExecutor(factory, send, redispatch_s=redispatch_s, lost_after_s=lost_after_s)
        self.slurm = (
            SlurmExecutor(factory, slurm_queues, self.celery, broker_url=broker_url, artifacts=artifacts)
            if slurm_queues
            else None
        )
        self._born = utcnow()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="rlplane-reconcile", daemon=True)
        self._thread.start()

    def nudge(self) -> None:
        """Tick now: a run was just queued (called once its transaction has committed)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the tick: a nudge during it makes the next one start at once
            try:
                self.tick()
            except Exception:  # a database or broker outage: log it and try again on the next tick
                logger.exception("reconcile tick failed")
            self._wake.wait(self.reconcile_s)

    def tick(self) -> None:
        self.find_lost()
        if time.monotonic() - self._forgot_at >= FORGET_EVERY_S:  # a write: not on every tick (SQLite has one writer)
            self._forgot_at = time.monotonic()
            self.forget_gone_workers()
        self.advance_pipelines()
        self.dispatch()
        if time.monotonic() - self._alerts_at >= self.alert_s:
            self._alerts_at = time.monotonic()
            self.watch()

    def watch(self) -> None:
        """Alert rules and RL detectors over active runs (a rule may stop its run), then deliveries that are due."""
        with transaction(self.factory) as uow:
            alerts.evaluate(uow.session)
        delivery.deliver_due(self.factory)

    def advance_pipelines(self) -> None:
        """Stages whose runs ended, and stages whose inputs now exist (their runs are queued, then dispatched)."""
        with transaction(self.factory, self.nudge) as uow:
            pipelines.advance_all(uow.session, self.reward_entrypoints)
        with transaction(self.factory, self.nudge) as uow:
            sweeps.advance_all(uow.session, self.reward_entrypoints)

    def dispatch(self) -> None:
        """Each queued run to its queue's executor, then each executor's own upkeep."""
        with self.factory() as session:
            runs = priorities.waiting(session, priorities.ranking(session))
            live = gang.live_workers(session, self.lost_after_s)
            takers = {queue for worker in gang.idle(live, gang.busy_workers(session)) for queue in worker.queues}
            queued, over_quota = [], {}
            for run in runs:  # from columns, no spec parsed: a backlog of hundreds is read on every tick
                if (why := quotas.blocked(session, run)) is not None:
                    over_quota[run.id] = why  # it waits, not dispatched, until its project's runs there end
                    continue
                queued.append((run.id, run.queue, gang.nodes_of(run)))
        if over_quota:
            with transaction(self.factory) as uow:
                for run in uow.session.scalars(select(Run).where(Run.id.in_(over_quota), Run.status == "queued")):
                    if run.status_reason != over_quota[run.id]:
                        run.status_reason = over_quota[run.id]  # not a status change: no event for every tick
        self.celery.new_pass({run_id for run_id, _, _ in queued}, takers)
        for run_id, queue, nodes in queued:
            executor = self.slurm if self.slurm is not None and self.slurm.serves(queue) else self.celery
            try:
                executor.dispatch(run_id, queue, nodes)
            except Conflict as exc:  # a spec an older version stored (read to grant a gang): this run waits, the rest go on
                logger.warning("run=%d not dispatched: %s", run_id, exc)
        self.celery.tick()
        if self.slurm is not None:
            self.slurm.tick()
        self.preempt()

    def preempt(self) -> None:
        """Waiting runs that outrank running ones and cannot start otherwise ask for their workers (api/runs/preemption.py)."""
        ours = (lambda queue: not self.slurm.serves(queue)) if self.slurm is not None else (lambda queue: True)
        with transaction(self.factory) as uow:
            for victim, waiting in preemption.preempt(uow.session, self.lost_after_s, self.preempt_after_s, ours):
                logger.info("run=%d preempted for run %d", victim, waiting)

    def forget_gone_workers(self) -> None:
        """Drop the workers silent for forget_workers_after_s (a node removed, a renamed worker): the workers list
        would otherwise keep them for ever. A worker that holds a run is kept until the run is found lost."""
        cutoff = utcnow() - timedelta(seconds=self.forget_workers_after_s)
        with transaction(self.factory, self.nudge) as uow:
            uow.session.execute(delete(Worker).where(Worker.last_heartbeat < cutoff, Worker.current_run_id.is_(None)))

    def find_lost(self) -> None:
        cutoff = utcnow() - timedelta(seconds=self.lost_after_s)
        with self.factory() as session:
            in_gang = select(AttemptNode.run_id).where(AttemptNode.run_id == Run.id).exists()
            rows = session.execute(
                select(Run.id, RunAttempt.worker, RunAttempt.started_at, Worker.last_heartbeat, Worker.current_run_id)
                .join(RunAttempt, (RunAttempt.run_id == Run.id) & (RunAttempt.number == Run.attempt_count))
                .outerjoin(Worker, Worker.name == RunAttempt.worker)
                .where(Run.status.in_(ACTIVE), ~in_gang, RunAttempt.worker != scripts.SCRIPT)
            ).all()
            gangs = gang.silent_nodes(session, self.lost_after_s, self._born, JOIN_TIMEOUT_S)
        for run_id, reason, outcome in gangs:
            with transaction(self.factory, self.nudge) as uow:
                requeue_or_fail(uow.session, run_id, reason, outcome)
        with transaction(self.factory, self.nudge) as uow:
            gang.late_outcomes(uow.session, self.lost_after_s, self._born)
        for run_id, worker, started_at, last_heartbeat, current_run_id in rows:
            seen = max(started_at, last_heartbeat) if last_heartbeat is not None else started_at
            seen = max(seen, self._born)
            reason = None
            if seen < cutoff:
                reason = f"lost: worker {worker} sent no heartbeat for {int((utcnow() - seen).total_seconds())} s"
            elif moved_on(run_id, started_at, last_heartbeat, current_run_id):
                reason = moved_on_reason(f"worker {worker}", current_run_id)
            if reason is not None:
                with transaction(self.factory, self.nudge) as uow:
                    requeue_or_fail(uow.session, run_id, reason)
        scripts.fail_silent(self.factory, self.script_silent_s, self._born)
