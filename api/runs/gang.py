"""Multi-node attempts (gangs): granted whole or not at all, one rendezvous, and failing together.

A run with resources.nodes = N > 1 is never sent to its queue for any worker to take. The reconciler grants it
N idle workers of the queue in one transaction (rows locked, so a one-node lease cannot take one of them
meanwhile), one node slot each, and sends each worker its slot on that worker's own queue. Node 0 joins with
its address and a port it chose: the rendezvous every node starts `torchrun --nnodes N --node-rank r` against.
Any node's failure, silence or exit ends the attempt for all: the others see it in their heartbeat's answer and
stop, and the run is retried from its last checkpoint by a new gang (Determined's and dstack's model).

Scheduling policy, per queue, oldest run first: a gang the queue can hold (at least N live workers serve it)
holds idle workers as they come free: a one-node run submitted after it is not leased to them meanwhile, so
a stream of small runs cannot starve it. A gang the queue cannot hold (fewer than N live workers) holds
nothing: it waits with its reason and every run behind it goes on.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.exceptions import Conflict, Forbidden, NotFound
from api.models import AttemptNode, Run, RunAttempt, Worker
from api.models.base import utcnow
from api.workers.holding import moved_on, moved_on_reason
from rlplane.status import ACTIVE
from rlplane.wire import NodeEnd, NodeJoin, Rendezvous


def nodes_of(spec: dict) -> int:
    return int((spec.get("resources") or {}).get("nodes", 1))


def live_workers(session: Session, lost_after_s: float, *, lock: bool = False) -> list[Worker]:
    cutoff = utcnow() - timedelta(seconds=lost_after_s)
    query = select(Worker).where(Worker.last_heartbeat >= cutoff).order_by(Worker.name)
    return list(session.scalars(query.with_for_update() if lock else query))


def busy_workers(session: Session) -> set[str]:
    """Workers with a part in an active run's current attempt: its one worker, or a node not yet ended."""
    current = (Run.id == RunAttempt.run_id) & (Run.attempt_count == RunAttempt.number)
    one = session.scalars(select(RunAttempt.worker).join(Run, current).where(Run.status.in_(ACTIVE)))
    in_gang = (Run.id == AttemptNode.run_id) & (Run.attempt_count == AttemptNode.attempt)
    nodes = session.scalars(
        select(AttemptNode.worker).join(Run, in_gang).where(Run.status.in_(ACTIVE), AttemptNode.ended_at.is_(None))
    )
    return {*one, *nodes}


def idle(workers: list[Worker], busy: set[str]) -> list[Worker]:
    return [w for w in workers if w.current_run_id is None and w.name not in busy]


def allocate(session: Session, run_id: int, lost_after_s: float) -> list[AttemptNode]:
    """Grant a queued gang run its N node slots, or none (then its reason says what it waits for)."""
    run = session.scalar(select(Run).where(Run.id == run_id).with_for_update())
    if run is None or run.status != "queued":
        return []
    need = nodes_of(run.spec)
    serving = [w for w in live_workers(session, lost_after_s, lock=True) if run.queue in w.queues]
    free = idle(serving, busy_workers(session))
    if len(free) < need:
        reason = f"waiting for {need} workers on queue {run.queue}: {len(free)} idle of {len(serving)} serving it"
        if len(serving) < need:
            reason += "; runs behind it go first until enough workers serve the queue"
        if run.status_reason != reason:
            run.status_reason = reason  # not a status change: no event, no history entry for every tick
        return []
    from api.runs.service import set_status  # the run rules; they import this module's checks

    chosen = free[:need]
    run.attempt_count += 1
    names = ", ".join(f"{w.name} (node {rank})" for rank, w in enumerate(chosen))
    session.add(RunAttempt(run_id=run.id, number=run.attempt_count, worker=f"gang of {need}"[:128], last_step=run.last_step))
    slots = [
        AttemptNode(run_id=run.id, attempt=run.attempt_count, node_rank=rank, worker=w.name, address=w.address or None)
        for rank, w in enumerate(chosen)
    ]
    session.add_all(slots)
    set_status(session, run, "starting", f"granted {need} nodes: {names} (attempt {run.attempt_count})"[:2000])
    return slots


def held_for_gang(session: Session, run: Run, worker: str, lost_after_s: float) -> Run | None:
    """The older gang run that `worker` is held for (see the policy above), if any: a one-node lease of `run`
    by it waits."""
    serving = live_workers(session, lost_after_s)
    me = next((w for w in serving if w.name == worker), None)
    if me is None:
        return None
    older = session.scalars(select(Run).where(Run.status == "queued", Run.id < run.id, Run.queue.in_(me.queues)).order_by(Run.id))
    for gang in older:
        need = nodes_of(gang.spec)
        if need > 1 and sum(1 for w in serving if gang.queue in w.queues) >= need:
            return gang
    return None


def node_slot(session: Session, run: Run, attempt: int, node_rank: int) -> AttemptNode:
    slot = session.scalar(
        select(AttemptNode).where(
            AttemptNode.run_id == run.id, AttemptNode.attempt == attempt, AttemptNode.node_rank == node_rank
        )
    )
    if slot is None:
        raise NotFound(f"node {node_rank} of attempt {attempt} of run {run.id}")
    return slot


def rendezvous(session: Session, run: Run, attempt: int) -> Rendezvous:
    master = node_slot(session, run, attempt, 0)
    ended = attempt != run.attempt_count or run.status not in ACTIVE
    return Rendezvous(
        nodes=nodes_of(run.spec), master_address=master.address if master.port else None, master_port=master.port, ended=ended
    )


def join(session: Session, principal: Principal, run_id: int, attempt: int, node_rank: int, body: NodeJoin):
    """A worker takes its node slot: (run, slot). Node 0 brings the rendezvous and becomes the lease holder
    (it sends the run's statuses and reports, as a one-node attempt's worker does)."""
    from api.runs.service import locked_run

    run = locked_run(session, run_id)
    if run is None:
        raise NotFound(f"run {run_id}")
    if attempt != run.attempt_count or run.status not in ("starting", "running"):
        now = f"the run is {run.status}, on attempt {run.attempt_count}"
        raise Conflict(f"attempt {attempt} of run {run_id} is over ({now})")
    slot = node_slot(session, run, attempt, node_rank)
    if slot.worker != body.worker:
        raise Forbidden(f"node {node_rank} of attempt {attempt} was granted to {slot.worker}, not {body.worker}")
    if slot.joined_at is not None:
        raise Conflict(f"node {node_rank} of attempt {attempt} has joined already")
    slot.joined_at, slot.token_id = utcnow(), principal.token_id
    if node_rank == 0:
        if not body.address or not body.port:
            raise Conflict("node 0 joins with the rendezvous: its address and port")
        slot.address, slot.port = body.address, body.port
        run.lease_token_id = principal.token_id
    session.flush()
    return run, slot


def end_node(session: Session, principal: Principal, run_id: int, attempt: int, node_rank: int, body: NodeEnd) -> Run:
    """A node other than 0 ended its part. A non-zero exit (or a stop) while the attempt runs ends the attempt:
    lost (retried from its checkpoint) unless the trainer said the run itself is at fault (exit 2 or 3)."""
    from api.runs.service import end_attempt, locked_run

    run = locked_run(session, run_id)
    if run is None:
        raise NotFound(f"run {run_id}")
    slot = node_slot(session, run, attempt, node_rank)
    if slot.token_id != principal.token_id:
        raise Forbidden(f"this worker token did not join node {node_rank} of attempt {attempt}")
    if slot.ended_at is None:
        slot.ended_at, slot.end_reason = utcnow(), (body.reason or f"exit {body.exit_code}")[:2000]
    if body.exit_code is not None or body.reason:
        session.execute(
            update(Worker).where(Worker.name == slot.worker, Worker.current_run_id == run.id).values(current_run_id=None)
        )
    if attempt == run.attempt_count and run.status in ("starting", "running") and body.exit_code != 0:
        why = f"node {node_rank} ({slot.worker}): {body.reason or f'exit {body.exit_code}'}"
        end_attempt(session, run, why, failure=body.failure)
    session.flush()
    return run


def part_of(session: Session, principal: Principal, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound(f"run {run_id}")
    if run.lease_token_id != principal.token_id and not _joined_any(session, run, principal.token_id):
        raise Forbidden(f"this worker token holds no node of run {run_id}")
    return run


def _joined_any(session: Session, run: Run, token_id: int | None) -> bool:
    query = select(AttemptNode.id).where(AttemptNode.run_id == run.id, AttemptNode.token_id == token_id)
    return session.scalar(query) is not None


def end_nodes(session: Session, run: Run, reason: str) -> None:
    """The attempt of `run` ended: so did each of its nodes that had not said so itself."""
    for slot in session.scalars(
        select(AttemptNode).where(
            AttemptNode.run_id == run.id, AttemptNode.attempt == run.attempt_count, AttemptNode.ended_at.is_(None)
        )
    ):
        slot.ended_at, slot.end_reason = utcnow(), reason[:2000]


def let_go(session: Session, run: Run, worker: str) -> None:
    """The worker that sent the run's end (its only worker, or a gang's node 0) did so after its trainer exited:
    it no longer holds the run, whatever its last heartbeat said, so a gang need not wait for its next one."""
    if nodes_of(run.spec) > 1:
        worker = node_slot(session, run, run.attempt_count, 0).worker
    _release(session, worker, run.id)


def _release(session: Session, worker: str, run_id: int) -> None:
    session.execute(update(Worker).where(Worker.name == worker, Worker.current_run_id == run_id).values(current_run_id=None))


def holds_part(session: Session, run: Run, token_id: int | None) -> bool:
    """Whether this worker token holds the run's lease or a node of its current attempt."""
    if token_id is None:
        return False
    if run.lease_token_id == token_id:
        return True
    return (
        session.scalar(
            select(AttemptNode.id).where(
                AttemptNode.run_id == run.id, AttemptNode.attempt == run.attempt_count, AttemptNode.token_id == token_id
            )
        )
        is not None
    )


def silent_nodes(session: Session, lost_after_s: float, since, join_timeout_s: float) -> list[tuple[int, str]]:
    """(run id, reason) for active gang runs with a node whose worker has been silent for lost_after_s, or that
    was granted join_timeout_s ago and has not joined (counted from `since` at the earliest: the API's start)."""
    now = utcnow()
    current = (Run.id == AttemptNode.run_id) & (Run.attempt_count == AttemptNode.attempt)
    rows = session.execute(
        select(
            Run.id,
            AttemptNode.node_rank,
            AttemptNode.worker,
            AttemptNode.granted_at,
            AttemptNode.joined_at,
            Worker.last_heartbeat,
            Worker.current_run_id,
        )  # fmt: skip
        .join(Run, current)
        .outerjoin(Worker, Worker.name == AttemptNode.worker)
        .where(Run.status.in_(ACTIVE), AttemptNode.ended_at.is_(None))
        .order_by(Run.id, AttemptNode.node_rank)
    ).all()
    found: dict[int, str] = {}
    for run_id, rank, worker, granted_at, joined_at, last_heartbeat, current_run_id in rows:
        if run_id in found:
            continue
        seen = max(max(granted_at, last_heartbeat) if last_heartbeat is not None else granted_at, since)
        if (now - seen).total_seconds() > lost_after_s:
            found[run_id] = f"lost: node {rank} (worker {worker}) sent no heartbeat for {int((now - seen).total_seconds())} s"
        elif joined_at is not None and moved_on(run_id, joined_at, last_heartbeat, current_run_id):
            found[run_id] = moved_on_reason(f"node {rank} (worker {worker})", current_run_id)
        elif joined_at is None and (now - max(granted_at, since)).total_seconds() > join_timeout_s:
            found[run_id] = f"lost: node {rank} (worker {worker}) did not join within {join_timeout_s:g} s"
    return list(found.items())
