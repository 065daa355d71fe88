"""Preemption: a waiting run that outranks running ones, and cannot start otherwise, takes their workers.

Once per reconcile tick, waiting runs are looked at first to start first (api/runs/priorities.py). Each counts the idle
workers of its queue that no run ahead of it has counted; a run they cannot hold (N workers for a gang of N) looks for
running runs of a lower priority on workers of its queue whose current attempt has run for at least
`preempt_after_s`, and picks the fewest that free enough workers: the lowest priority first, then the most recently
started (the least work since its last hand-back or start). Each is marked `preempted_by` the waiting run; its
worker reads that in its heartbeat's answer and hands the run back as on shutdown (the trainer checkpoints after its
current step, within `preempt_grace_s`; the attempt ends "handed back", not counted against max_attempts), and the
run waits, ranked below the one that preempted it, to resume from that checkpoint every step once. The freed worker
goes to the waiting run: its lease of anything ranked after it is refused meanwhile (api/runs/gang.py, held_for).

A waiting run with victims still handing back picks no more. A mark whose waiting run started elsewhere or ended is
dropped. Queues bound to Slurm are left to Slurm's own priorities and preemption (docs/slurm.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.models import AttemptNode, Run, RunAttempt
from api.models.base import utcnow
from api.runs import gang, priorities, quotas
from rlplane.status import ACTIVE


@dataclass
class Holder:
    """An active run's current attempt: the workers it holds and when it started."""

    run: Run
    workers: set[str]
    started_at: datetime


def preempt(session: Session, lost_after_s: float, after_s: float, ours: Callable[[str], bool]) -> list[tuple[int, int]]:
    """One pass over the waiting runs of the queues `ours` says rlplane schedules (not Slurm's): the (preempted run,
    for run) pairs decided now."""
    waiting = priorities.waiting(session, priorities.ranking(session))
    holders = _holders(session)
    _drop_stale_marks(holders, {run.id for run in waiting})
    if not waiting:
        return []
    live = [w for w in gang.live_workers(session, lost_after_s) if w.capacity > 0]
    free = {w.name for w in gang.idle(live, gang.busy_workers(session))}
    now, taken, decided = utcnow(), set[str](), []
    for run in waiting:
        if not ours(run.queue) or quotas.blocked(session, run) is not None:
            continue  # Slurm's to decide; or over its project's quota, so it would not start on a freed worker
        need, serving = gang.nodes_of(run), {w.name for w in live if run.queue in w.queues}
        if len(serving) < need:
            continue  # it cannot start on this queue however many runs end: nothing to preempt for
        available = (free & serving) - taken
        freeing = {name for h in holders if h.run.preempted_by == run.id for name in h.workers & serving}
        if freeing or len(available) >= need:
            taken |= set(sorted(available | freeing)[:need])  # what it will start on: not counted again below
            continue
        victims = _victims(holders, run, serving, taken, need - len(available), now, after_s)
        if victims is None:
            continue
        for holder in victims:
            holder.run.preempted_by = run.id
            holder.run.status_reason = f"preempted by run {run.id} (priority {priorities.named(run.priority)}): handing back"
            taken |= holder.workers & serving
            decided.append((holder.run.id, run.id))
        taken |= available
    session.flush()
    return decided


def _victims(
    holders: list[Holder], run: Run, serving: set[str], taken: set[str], short: int, now: datetime, after_s: float
) -> list[Holder] | None:
    """The fewest running runs below `run`'s priority, on workers of its queue nobody counted yet, that have run for
    `after_s` and free `short` more workers: lowest priority first, then the most recently started. None if they
    cannot."""
    candidates = [
        h
        for h in holders
        if h.run.status == "running"
        and h.run.preempted_by is None
        and h.run.priority < run.priority
        and (now - h.started_at).total_seconds() >= after_s
        and h.workers & serving
        and not h.workers & taken
    ]
    candidates.sort(key=lambda h: (h.run.priority, -h.started_at.timestamp()))
    chosen, freed = [], set[str]()
    for holder in candidates:
        if len(freed) >= short:
            break
        chosen.append(holder)
        freed |= holder.workers & serving
    return chosen if len(freed) >= short else None


def _holders(session: Session) -> list[Holder]:
    """Every active run's current attempt, with its workers (a gang's nodes not ended)."""
    current = (RunAttempt.run_id == Run.id) & (RunAttempt.number == Run.attempt_count)
    rows = session.execute(
        select(Run, RunAttempt.worker, RunAttempt.started_at).join(RunAttempt, current).where(Run.status.in_(ACTIVE))
    )
    holders = {run.id: Holder(run, {worker}, started_at) for run, worker, started_at in rows}
    in_gang = (AttemptNode.run_id == Run.id) & (AttemptNode.attempt == Run.attempt_count)
    nodes = session.execute(select(AttemptNode.run_id, AttemptNode.worker).join(Run, in_gang).where(Run.status.in_(ACTIVE)))
    gangs: dict[int, set[str]] = {}
    for run_id, worker in nodes:
        gangs.setdefault(run_id, set()).add(worker)
    for run_id, workers in gangs.items():
        if run_id in holders:
            holders[run_id].workers = workers  # not "gang of N"
    return list(holders.values())


def _drop_stale_marks(holders: list[Holder], waiting: set[int]) -> None:
    """A preemption whose waiting run started elsewhere, or was cancelled, is no longer wanted."""
    for holder in holders:
        if holder.run.preempted_by is not None and holder.run.preempted_by not in waiting:
            holder.run.preempted_by = None


def settle(session: Session, run: Run) -> None:
    """The run's current attempt ended: a preemption asked of it is done (recorded on the attempt) or moot."""
    if run.preempted_by is None:
        return
    attempt = session.scalar(select(RunAttempt).where(RunAttempt.run_id == run.id, RunAttempt.number == run.attempt_count))
    if attempt is not None:
        attempt.preempted_by = run.preempted_by
    run.preempted_by = None
