"""Celery workers kept on the nodes: a one-node run goes to its queue, where any worker serving it may lease it; a
gang is granted idle workers of its queue (api/runs/gang.py) and each node is sent to its worker's own queue. Sent
again every redispatch_s while the run stays queued (or the node unjoined): a flushed broker or a lost message costs
a delay, never the run, and duplicates are harmless (only a queued run can be leased, once). A queued run is sent
again only while its queue has an idle worker: while every worker is busy (or none serves the queue) its message
waits in the broker for one to free up, and a copy every redispatch_s would pile up behind it (a backlog of 500
runs: 1,000 messages a minute, for as long as it waited)."""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.models import AttemptNode, Run
from api.runs import gang
from api.unit_of_work import transaction
from rlplane.wire import LAUNCH_TASK, NODE_TASK, node_queue

Send = Callable[[str, list, str], None]  # (task, its arguments, queue)


class CeleryExecutor:
    def __init__(self, factory: sessionmaker[Session], send: Send, *, redispatch_s: float, lost_after_s: float) -> None:
        self.factory, self.send = factory, send
        self.redispatch_s, self.lost_after_s = redispatch_s, lost_after_s
        self._sent: dict[int, float] = {}  # run id -> when this process last sent it
        self._sent_nodes: dict[tuple[int, int, int], float] = {}  # (run id, attempt, node) -> when last sent
        self._takers: set[str] | None = None  # the queues with an idle worker now (see new_pass)

    def dispatch(
        self, run_id: int, queue: str, nodes: int, *, workers: str | None = None, eligible: Callable[[str], bool] | None = None
    ) -> None:
        """`workers`: the queue whose workers take it, when not the run's own (a Slurm job's); `eligible`: which of
        them, by name, a gang may be granted."""
        if nodes > 1:
            with transaction(self.factory) as uow:
                gang.allocate(uow.session, run_id, self.lost_after_s, serving=workers, eligible=eligible)
            return
        now, target = time.monotonic(), workers or queue
        if run_id in self._sent and (now - self._sent[run_id] < self.redispatch_s or not self._taken_from(target)):
            return
        self.send(LAUNCH_TASK, [run_id], target)
        self._sent[run_id] = now

    def new_pass(self, still_queued: set[int], takers: set[str] | None = None) -> None:
        """Before a reconcile pass's dispatches: runs no longer queued need no resend; `takers`: the queues that have
        an idle worker now (None: not known, every queue may be sent to again)."""
        self._sent = {run_id: at for run_id, at in self._sent.items() if run_id in still_queued}
        self._takers = takers

    def _taken_from(self, queue: str) -> bool:
        return self._takers is None or queue in self._takers

    def tick(self) -> None:
        """Each granted node that has not joined yet goes to its worker's own queue, again every redispatch_s."""
        with self.factory() as session:
            waiting = session.execute(
                select(AttemptNode.run_id, AttemptNode.attempt, AttemptNode.node_rank, AttemptNode.worker)
                .join(Run, (Run.id == AttemptNode.run_id) & (Run.attempt_count == AttemptNode.attempt))
                .where(Run.status == "starting", AttemptNode.joined_at.is_(None))
            ).all()
        now = time.monotonic()
        keys = {(r, a, n) for r, a, n, _ in waiting}
        self._sent_nodes = {k: at for k, at in self._sent_nodes.items() if k in keys}
        for run_id, attempt, node_rank, worker in waiting:
            key = (run_id, attempt, node_rank)
            if now - self._sent_nodes.get(key, -1e9) >= self.redispatch_s:
                self.send(NODE_TASK, [run_id, attempt, node_rank], node_queue(worker))
                self._sent_nodes[key] = now
