from fastapi import APIRouter, Request
from sqlalchemy import select

from api.auth.deps import Reader, WorkerPrincipal
from api.auth.principal import Principal
from api.db import SessionDep
from api.exceptions import Forbidden
from api.models import AttemptNode, Run, Worker
from api.models.base import utcnow
from api.runs import gang
from api.workers import schemas

router = APIRouter(prefix="/api/v1/workers", tags=["workers"])


def _public(
    worker: Worker,
    principal: Principal,
    visible_runs: set[int],
    lost_after_s: float,
    gangs: dict[str, schemas.GangPlace] | None = None,
) -> schemas.WorkerPublic:
    silent = (utcnow() - worker.last_heartbeat).total_seconds()
    run_id = worker.current_run_id if principal.is_site_admin or worker.current_run_id in visible_runs else None
    place = (gangs or {}).get(worker.name)
    return schemas.WorkerPublic(
        name=worker.name,
        hostname=worker.hostname,
        address=worker.address,
        queues=worker.queues,
        capacity=worker.capacity,
        gpus=worker.gpus,
        current_run_id=run_id,
        gang=place if place is not None and place.run_id == run_id else None,
        last_step=worker.last_step if run_id else None,
        first_seen=worker.first_seen,
        last_heartbeat=worker.last_heartbeat,
        seconds_since_heartbeat=silent,
        stale=silent > lost_after_s,
    )


@router.post("/heartbeat", response_model=schemas.WorkerPublic)
def heartbeat(body: schemas.Heartbeat, principal: WorkerPrincipal, session: SessionDep, request: Request) -> schemas.WorkerPublic:
    run_id = body.current_run_id
    if run_id is not None:
        run = session.get(Run, run_id)
        if run is None or not gang.holds_part(session, run, principal.token_id):
            raise Forbidden(f"this worker token does not hold the lease of run {run_id} or a node of it")
        current = body.current_attempt in (None, run.attempt_count)  # an ended attempt's trainer says nothing now
        if current and body.last_step is not None and (run.last_step is None or body.last_step > run.last_step):
            run.last_step = body.last_step
    worker = session.scalar(select(Worker).where(Worker.name == body.name))
    fields = body.model_dump(exclude={"current_attempt"})
    fields["gpus"] = [g.model_dump() for g in body.gpus]
    if worker is None:
        worker = Worker(**fields, token_id=principal.token_id)
        session.add(worker)
    else:
        for key, value in fields.items():
            setattr(worker, key, value)
        worker.token_id = principal.token_id
    worker.last_heartbeat = utcnow()
    session.flush()
    public = _public(worker, principal, {run_id} if run_id else set(), request.app.state.settings.lost_after_s)
    if run_id is not None:
        public.current_run_status, public.current_run_attempt = run.status, run.attempt_count
        if run.preempted_by is not None and current:
            public.current_run_preempted_by = run.preempted_by
            public.preempt_grace_s = request.app.state.settings.preempt_grace_s
    return public


@router.get("", response_model=schemas.WorkerList)
def list_workers(principal: Reader, session: SessionDep, request: Request) -> schemas.WorkerList:
    workers = session.scalars(select(Worker).order_by(Worker.name)).all()
    run_ids = {w.current_run_id for w in workers if w.current_run_id}
    visible = set()
    if run_ids:
        for run_id, project_id in session.execute(select(Run.id, Run.project_id).where(Run.id.in_(run_ids))):
            if principal.can(project_id, "read"):
                visible.add(run_id)
    lost_after_s = request.app.state.settings.lost_after_s
    gangs = _gangs(session, run_ids)
    data = [_public(w, principal, visible, lost_after_s, gangs) for w in workers]
    return schemas.WorkerList(data=data, count=len(data))


def _gangs(session, run_ids: set[int]) -> dict[str, schemas.GangPlace]:
    """worker name -> its place in the current attempt of one of these runs, for those that span nodes."""
    if not run_ids:
        return {}
    current = (Run.id == AttemptNode.run_id) & (Run.attempt_count == AttemptNode.attempt)
    rows = session.execute(
        select(AttemptNode.run_id, AttemptNode.attempt, AttemptNode.node_rank, AttemptNode.worker)
        .join(Run, current)
        .where(Run.id.in_(run_ids))
        .order_by(AttemptNode.run_id, AttemptNode.node_rank)
    ).all()
    members: dict[int, list[str]] = {}
    for run_id, _, _, worker in rows:
        members.setdefault(run_id, []).append(worker)
    return {
        worker: schemas.GangPlace(
            run_id=run_id, attempt=attempt, node_rank=rank, nodes=len(members[run_id]), workers=members[run_id]
        )
        for run_id, attempt, rank, worker in rows
    }
