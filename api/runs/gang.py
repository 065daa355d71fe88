"""Multi-node attempts (gangs): granted whole or not at all, one rendezvous, and failing together.

A run with resources.nodes = N > 1 is never sent to its queue for any worker to take. The reconciler grants it
N idle workers of the queue in one transaction (rows locked, so a one-node lease cannot take one of them
meanwhile), one node slot each, and sends each worker its slot on that worker's own queue. Node 0 joins with
its address and a port it chose: the rendezvous every node starts `torchrun --nnodes N --node-rank r` against.
Any node's failure, silence or exit ends the attempt for all: the others see it in their heartbeat's answer and
stop, and the run is retried from its last checkpoint by a new gang (Determined's and dstack's model).

Roles: every node trains (its share of torchrun's ranks) but the last node of a GRPO run with grpo.generator node,
which runs asynchronous GRPO's generator. It joins with where its generator listens, and the rendezvous hands that to
node 0, whose trainer connects to it.

Scheduling policy, per queue, highest priority first, then oldest (api/runs/priorities.py): a gang the queue can
hold (at least N live workers serve it) holds idle workers as they come free: a one-node run ranked after it is not
leased to them meanwhile, so a stream of small runs cannot starve it. A gang the queue cannot hold (fewer than N live
workers) holds nothing: it waits with its reason and every run behind it goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.exceptions import Conflict, Forbidden, NotFound
from api.models import AttemptNode, Run, RunAttempt, Worker
from api.models.base import utcnow
from api.runs import priorities, quotas
from api.workers.holding import moved_on, moved_on_reason
from rlplane.limits import fit_reason
from rlplane.spec import NodeRole
from rlplane.status import ACTIVE, EXIT_HANDED_BACK
from rlplane.wire import NodeEnd, NodeJoin, Rendezvous


def nodes_of(run: Run) -> int:
    """resources.nodes, from the columns stored beside the spec at submit (slots: gpus x nodes, or nodes on a CPU
    queue): the reconciler asks it of every waiting run on each tick, where parsing each stored spec was most of the
    tick with a backlog (500 queued runs: 0.8 of 1.0 s)."""
    return run.slots // run.gpus if run.gpus else run.slots


def role_of(run: Run, node_rank: int) -> NodeRole:
    """What node `node_rank` of the run's gang runs (the contract's rule): the trainer's ranks or a generator."""
    return run.run_spec.node_role(node_rank)


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
    """Those holding nothing and taking runs (a worker shutting down says capacity 0)."""
    return [w for w in workers if w.current_run_id is None and w.name not in busy and w.capacity > 0]


def allocate(
    session: Session,
    run_id: int,
    lost_after_s: float,
    serving: str | None = None,
    eligible: Callable[[str], bool] | None = None,
) -> list[AttemptNode]:
    """Grant a queued gang run its N node slots, or none (then its reason says what it waits for). `serving`: the
    queue its workers serve, when not the run's own (a Slurm job's, api/executors/slurm.py); `eligible`: which of
    them may be granted, by name (a requeued job's new pilots, not its dead ones)."""
    run = session.scalar(select(Run).where(Run.id == run_id).with_for_update())
    if run is None or run.status != "queued":
        return []
    run.run_spec  # noqa: B018 - before anything is granted: a spec an older version stored is a Conflict, and it waits
    need, queue = nodes_of(run), serving or run.queue
    serving_it = [
        w for w in live_workers(session, lost_after_s, lock=True) if queue in w.queues and (eligible is None or eligible(w.name))
    ]
    free = idle(serving_it, busy_workers(session))
    if len(free) < need:
        if serving is not None:  # a job's own workers, still starting: its executor says why the run waits
            return []
        reason = f"waiting for {need} workers on queue {queue}: {len(free)} idle of {len(serving_it)} serving it"
        if len(serving_it) < need:
            reason += "; runs behind it go first until enough workers serve the queue"
        if run.status_reason != reason:
            run.status_reason = reason  # not a status change: no event, no history entry for every tick
        return []
    from api.runs.service import resume_point, set_status  # the run rules; they import this module's checks

    chosen = free[:need]
    run.attempt_count += 1
    run.last_step = resume_point(session, run)
    names = ", ".join(f"{w.name} (node {rank})" for rank, w in enumerate(chosen))
    session.add(RunAttempt(run_id=run.id, number=run.attempt_count, worker=f"gang of {need}"[:128], last_step=run.last_step))
    slots = [
        AttemptNode(run_id=run.id, attempt=run.attempt_count, node_rank=rank, worker=w.name, address=w.address or None)
        for rank, w in enumerate(chosen)
    ]
    session.add_all(slots)
    set_status(session, run, "starting", f"granted {need} nodes: {names} (attempt {run.attempt_count})")
    return slots


def held_for(session: Session, run: Run, worker: str, lost_after_s: float) -> tuple[Run, str] | None:
    """The waiting run ranked ahead of `run` that `worker` is kept free for (see the policy above and
    api/runs/priorities.py), and why, if any: a one-node lease of `run` by it waits."""
    serving = live_workers(session, lost_after_s)
    me = next((w for w in serving if w.name == worker), None)
    if me is None:
        return None
    rank = priorities.ranking(session)
    queued = [other for other in priorities.waiting(session, rank) if other.queue in me.queues and other.id != run.id]
    for gang in (other for other in queued if rank.key(other) < rank.key(run)):
        need = nodes_of(gang)
        if need > 1 and sum(1 for w in serving if gang.queue in w.queues) >= need and not quotas.blocked(session, gang):
            return gang, f"{_ranked_how(rank, gang, run)} that waits for {need} workers"
    free = idle(serving, busy_workers(session))
    others_idle = {queue: sum(1 for w in free if w.name != worker and queue in w.queues) for queue in me.queues}
    ahead = priorities.needed_elsewhere(session, run, me, others_idle, rank, queued)
    if ahead is not None:
        return ahead, _ranked_how(rank, ahead, run)
    return None


def _ranked_how(rank: priorities.Ranking, other: Run, run: Run) -> str:
    """Why `other` goes before `run`, in words."""
    if other.priority != run.priority:
        return f"a run of priority {priorities.named(other.priority)}, above this run's {priorities.named(run.priority)}"
    if other.project_id != run.project_id and rank.used(other) < rank.used(run):
        return "a run of a project that has used less of the queue against its share (fair share)"
    return "an older run"


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
    nodes = nodes_of(run)
    master = node_slot(session, run, attempt, 0)
    ended = attempt != run.attempt_count or run.status not in ACTIVE
    met = Rendezvous(nodes=nodes, master_address=master.address if master.port else None, master_port=master.port, ended=ended)
    if role_of(run, nodes - 1) == "generator":
        generator = node_slot(session, run, attempt, nodes - 1)
        if generator.port:
            met.generator_address, met.generator_port = generator.address, generator.port
    return met


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
    generator = role_of(run, node_rank) == "generator"
    if (node_rank == 0 or generator) and (not body.address or not body.port):
        raise Conflict(
            "a generator node joins with where its generator listens: its address and port"
            if generator
            else "node 0 joins with the rendezvous: its address and port"
        )
    slot.joined_at, slot.token_id = utcnow(), principal.token_id
    if node_rank == 0 or generator:
        slot.address, slot.port = body.address, body.port
    if node_rank == 0:
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
    own = body.reason or f"exit {body.exit_code}"
    if slot.ended_at is None or slot.stopped_with_attempt:  # its own word, also after another node ended the attempt
        _own_word(session, slot, own, body.exited_at, failed=body.exit_code not in (0, None, EXIT_HANDED_BACK))
    if body.exit_code is not None or body.reason:
        session.execute(
            update(Worker).where(Worker.name == slot.worker, Worker.current_run_id == run.id).values(current_run_id=None)
        )
    if attempt == run.attempt_count and run.status in ("starting", "running") and body.exit_code != 0:
        # a node's trainer that exited EXIT_HANDED_BACK took part in the gang's hand-back (its ranks agree on one):
        # the attempt is handed back, whichever node's word comes first
        handed_back = body.exit_code == EXIT_HANDED_BACK
        end_attempt(session, run, f"node {node_rank} ({slot.worker}): {own}", failure=body.failure, handed_back=handed_back)
    session.flush()
    return run


def late_node_zero(session: Session, run: Run, attempt: int, reason: str, exited_at: datetime | None, failed: bool) -> bool:
    """Node 0's end (its worker's status report), come after another node's word ended the attempt (a hand-back that
    node 1 told first, a crash): kept on its slot, as a late node's own word is (end_node), instead of being refused,
    so it is not later taken for a worker that died (late_outcomes). Whether it was such a late word."""
    slot = session.scalar(
        select(AttemptNode).where(AttemptNode.run_id == run.id, AttemptNode.attempt == attempt, AttemptNode.node_rank == 0)
    )
    if slot is None or not slot.stopped_with_attempt:
        return False
    _own_word(session, slot, reason, exited_at, failed)
    return True


def _own_word(session: Session, slot: AttemptNode, reason: str, exited_at: datetime | None, failed: bool) -> None:
    """A node's own end on its slot; one that failed after the attempt ended, but before the node whose word ended it,
    is named first in the attempt's reason."""
    late = slot.stopped_with_attempt
    slot.ended_at = slot.ended_at or utcnow()
    slot.end_reason, slot.exited_at, slot.stopped_with_attempt = fit_reason(reason), exited_at, False
    if late and failed and _exited_first(session, slot):
        _name_first(session, slot, (reason.splitlines() or [""])[0][:300])


def _exited_first(session: Session, slot: AttemptNode) -> bool:
    """Its trainer exited before every other node's that failed (each by its worker's clock)."""
    if slot.exited_at is None:
        return False
    others = session.scalars(
        select(AttemptNode.exited_at).where(
            AttemptNode.run_id == slot.run_id,
            AttemptNode.attempt == slot.attempt,
            AttemptNode.node_rank != slot.node_rank,
            AttemptNode.exited_at.is_not(None),
        )
    ).all()
    return bool(others) and all(slot.exited_at < other for other in others)


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


@dataclass(frozen=True)
class NodeOutcome:
    """What one node of a gang's attempt says happened to it: its trainer's end, a hang, its silent worker."""

    rank: int
    reason: str
    exited_at: datetime | None = None


STOPPED = "stopped with the attempt"
FIRST = "failed first"


def end_nodes(session: Session, run: Run, reason: str, outcome: NodeOutcome | None = None) -> None:
    """The attempt of `run` ended: so did each of its nodes that had not said so itself. The node whose word ended it
    (`outcome`) keeps its own; the others stopped with the attempt, which they say with its cause in one line (not
    another node's log lines), until their own word or their worker's death is learnt (late_outcomes)."""
    cause = (reason.splitlines() or ["it ended"])[0][:300]
    for slot in session.scalars(
        select(AttemptNode).where(
            AttemptNode.run_id == run.id, AttemptNode.attempt == run.attempt_count, AttemptNode.ended_at.is_(None)
        )
    ):
        slot.ended_at = utcnow()
        if outcome is not None and slot.node_rank == outcome.rank:
            slot.end_reason, slot.exited_at = fit_reason(outcome.reason), outcome.exited_at
        else:
            slot.end_reason, slot.stopped_with_attempt = fit_reason(f"{STOPPED} ({cause})"), True


def _name_first(session: Session, slot: AttemptNode, why: str) -> None:
    """`slot`'s node failed before the one whose word ended the attempt: its attempt's reason names it first."""
    attempt = session.scalar(select(RunAttempt).where(RunAttempt.run_id == slot.run_id, RunAttempt.number == slot.attempt))
    if attempt is None or attempt.end_reason is None or f" {FIRST}: " in attempt.end_reason:
        return
    attempt.end_reason = fit_reason(f"node {slot.node_rank} (worker {slot.worker}) {FIRST}: {why}; then {attempt.end_reason}")


def late_outcomes(session: Session, lost_after_s: float, since: datetime) -> None:
    """Nodes that stopped with an ended attempt and whose worker has sent no heartbeat since before that end, for
    lost_after_s (counted from `since` at the earliest: the API's start): the worker died, and its peers' failure
    followed (SIGKILL, a crashed host). Each such node says so, and the attempt's reason names it first."""
    now = utcnow()
    ended = (RunAttempt.run_id == AttemptNode.run_id) & (RunAttempt.number == AttemptNode.attempt)
    rows = session.execute(
        select(AttemptNode, RunAttempt.ended_at, Worker.last_heartbeat)
        .join(RunAttempt, ended)
        .outerjoin(Worker, Worker.name == AttemptNode.worker)
        .where(
            AttemptNode.stopped_with_attempt.is_(True),
            RunAttempt.ended_at.is_not(None),
            RunAttempt.ended_at > now - timedelta(seconds=3 * lost_after_s + 60),  # judged once, soon after
        )
    ).all()
    for slot, ended_at, last_heartbeat in rows:
        if (now - max(ended_at, since)).total_seconds() < lost_after_s:
            continue  # not silent for long enough yet
        if last_heartbeat is not None and last_heartbeat >= ended_at:
            continue  # its worker lived on after the end: it was stopped by it
        since_last = f"since {last_heartbeat:%H:%M:%S} UTC" if last_heartbeat is not None else "at all"
        slot.end_reason = f"its worker {slot.worker} was lost: no heartbeat {since_last}, before the attempt ended"
        slot.stopped_with_attempt = False
        _name_first(session, slot, f"its worker was lost (no heartbeat {since_last})")


def let_go(session: Session, run: Run, worker: str) -> None:
    """The worker that sent the run's end (its only worker, or a gang's node 0) did so after its trainer exited:
    it no longer holds the run, whatever its last heartbeat said, so a gang need not wait for its next one."""
    if nodes_of(run) > 1:
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


def silent_nodes(session: Session, lost_after_s: float, since, join_timeout_s: float) -> list[tuple[int, str, NodeOutcome]]:
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
    found: dict[int, tuple[str, NodeOutcome]] = {}
    for run_id, rank, worker, granted_at, joined_at, last_heartbeat, current_run_id in rows:
        if run_id in found:
            continue
        seen = max(max(granted_at, last_heartbeat) if last_heartbeat is not None else granted_at, since)
        who = f"node {rank} (worker {worker})"
        if (now - seen).total_seconds() > lost_after_s:
            silent = f"sent no heartbeat for {int((now - seen).total_seconds())} s"
            found[run_id] = (f"lost: {who} {silent}", NodeOutcome(rank, f"its worker {worker} was lost: it {silent}"))
        elif joined_at is not None and moved_on(run_id, joined_at, last_heartbeat, current_run_id):
            back = NodeOutcome(rank, moved_on_reason(f"its worker {worker}", current_run_id))
            found[run_id] = (moved_on_reason(who, current_run_id), back)
        elif joined_at is None and (now - max(granted_at, since)).total_seconds() > join_timeout_s:
            late = f"did not join within {join_timeout_s:g} s"
            found[run_id] = (f"lost: {who} {late}", NodeOutcome(rank, f"its worker {worker} {late}"))
    return [(run_id, reason, outcome) for run_id, (reason, outcome) in found.items()]
