"""The queue view: each queue's live workers, what each project's active runs hold of it (beside its quota), and
its queued runs in the order they start, with why each waits."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.models import Project, ProjectQuota, Run, Worker
from api.queues import schemas
from api.runs import gang, priorities, quotas
from rlplane.status import ACTIVE

OTHERS = "(other projects)"  # what the caller sees of projects it may not read: their share, not their names


def queues(session: Session, principal: Principal, lost_after_s: float, slurm: set[str]) -> list[schemas.QueuePublic]:
    """`slurm`: the queues bound to a Slurm cluster, whose runs wait as their jobs do (their reason says so)."""
    live = gang.live_workers(session, lost_after_s)
    free = {w.name for w in gang.idle(live, gang.busy_workers(session))}
    projects: dict[int, str] = {project_id: name for project_id, name in session.execute(select(Project.id, Project.name))}
    runs = [
        *session.scalars(select(Run).where(Run.status.in_(ACTIVE))),
        *priorities.waiting(session, priorities.ranking(session)),
    ]
    limits = {(q.project_id, q.queue): q for q in session.scalars(select(ProjectQuota))}
    names = sorted({q for w in live for q in w.queues} | {run.queue for run in runs})
    return [
        _queue(session, name, live, free, [r for r in runs if r.queue == name], projects, limits, principal, name in slurm)
        for name in names
    ]


def _queue(
    session: Session,
    name: str,
    live: list[Worker],
    free: set[str],
    runs: list[Run],
    projects: dict[int, str],
    limits: dict[tuple[int, str], ProjectQuota],
    principal: Principal,
    slurm: bool,
) -> schemas.QueuePublic:
    serving = [w for w in live if name in w.queues]
    held: dict[int | None, list[int]] = {}  # None: the projects the caller may not read, together
    waiting = []
    idle = sum(1 for w in serving if w.name in free)
    for run in runs:
        readable = principal.can(run.project_id, "read")
        if run.status == "queued":
            waiting.append(
                schemas.Waiting(
                    run_id=run.id if readable else None,
                    name=run.name if readable else None,
                    project=projects[run.project_id] if readable else OTHERS,
                    priority=run.priority,
                    reason=_why(session, run, slurm, len(serving), idle, len(waiting)) if readable else "",
                )
            )
            continue
        share = held.setdefault(run.project_id if readable else None, [0, 0])
        share[0], share[1] = share[0] + run.slots, share[1] + 1
    holding = [
        schemas.Holding(
            project=projects[project_id] if project_id is not None else OTHERS,
            slots=slots,
            runs=count,
            max_gpus=getattr(limits.get((project_id, name)), "max_gpus", None) if project_id is not None else None,
            max_runs=getattr(limits.get((project_id, name)), "max_runs", None) if project_id is not None else None,
        )
        for project_id, (slots, count) in sorted(held.items(), key=lambda item: -item[1][0])
    ]
    return schemas.QueuePublic(
        name=name,
        workers=len(serving),
        idle=idle,
        gpus=sum(len(w.gpus or []) for w in serving),
        holding=holding,
        waiting=waiting,
    )


def _why(session: Session, run: Run, slurm: bool, serving: int, idle: int, ahead: int) -> str:
    """Why a queued run has not started: its project's quota, its scheduler's word (its Slurm job, a gang's nodes), or
    the queue's workers against the runs ranked ahead of it."""
    if (over := quotas.blocked(session, run)) is not None:
        return over
    if slurm or run.status_reason.startswith("waiting for"):
        return run.status_reason or "its Slurm job is being submitted"
    if serving == 0:
        return f"no live worker serves queue {run.queue}"
    if idle > ahead:
        return "about to start: a worker of its queue is idle"
    before = f"{ahead} run{'s' if ahead != 1 else ''} ahead of it; " if ahead else ""
    return f"{before}{serving - idle} of {serving} workers of queue {run.queue} busy"
