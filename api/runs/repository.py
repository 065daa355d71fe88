"""Queries for runs; no rules here."""

from collections.abc import Sequence

from sqlalchemy import Select, asc, desc, func, select
from sqlalchemy.orm import Session, defer

from api.models import AttemptNode, Checkpoint, Project, Run, RunAttempt, RunLink, SlurmJob, User

_SORT_COLUMNS = {"created_at": Run.created_at, "updated_at": Run.updated_at, "name": Run.name, "status": Run.status, "id": Run.id}


def run_rows(
    *,
    project_ids: Sequence[int] | None,
    project: int | None,
    status: Sequence[str],
    algorithm: Sequence[str],
    search: str | None,
    archived: bool | None,
    sort: str,
) -> Select:
    query = (
        select(Run, Project.name, User.name)
        .join(Project, Project.id == Run.project_id)
        .outerjoin(User, User.id == Run.created_by)
        .options(defer(Run.spec, raiseload=True))  # a list shows no spec; parsing each JSONB costs more than the query
    )
    if project_ids is not None:
        query = query.where(Run.project_id.in_(project_ids))
    if project is not None:
        query = query.where(Run.project_id == project)
    if status:
        query = query.where(Run.status.in_(status))
    if algorithm:
        query = query.where(Run.algorithm.in_(algorithm))
    if search:
        escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(Run.name.ilike(f"%{escaped}%", escape="\\"))
    if archived is not None:
        query = query.where(Run.archived == archived)
    column = _SORT_COLUMNS[sort.lstrip("-")]
    order = desc if sort.startswith("-") else asc
    return query.order_by(order(column), order(Run.id))


def count(session: Session, query: Select) -> int:
    inner = query.order_by(None).with_only_columns(Run.id).subquery()
    return session.scalar(select(func.count()).select_from(inner)) or 0


def run_row(session: Session, run_id: int):
    return session.execute(
        select(Run, Project.name, User.name)
        .join(Project, Project.id == Run.project_id)
        .outerjoin(User, User.id == Run.created_by)
        .where(Run.id == run_id)
    ).one_or_none()


def parents(session: Session, run_id: int):
    return session.execute(
        select(RunLink, Run).join(Run, Run.id == RunLink.parent_id).where(RunLink.child_id == run_id).order_by(RunLink.field)
    ).all()


def children(session: Session, run_id: int):
    return session.execute(
        select(RunLink, Run).join(Run, Run.id == RunLink.child_id).where(RunLink.parent_id == run_id).order_by(Run.id)
    ).all()


def attempts(session: Session, run_id: int) -> list[RunAttempt]:
    return list(session.scalars(select(RunAttempt).where(RunAttempt.run_id == run_id).order_by(RunAttempt.number)))


def attempt_nodes(session: Session, run_id: int) -> list[AttemptNode]:
    query = select(AttemptNode).where(AttemptNode.run_id == run_id)
    return list(session.scalars(query.order_by(AttemptNode.attempt, AttemptNode.node_rank)))


def latest_checkpoint_step(session: Session, run_id: int) -> int | None:
    query = select(func.max(Checkpoint.step)).where(Checkpoint.run_id == run_id, Checkpoint.kind == "checkpoint")
    return session.scalar(query)


def final_export(session: Session, run_id: int) -> Checkpoint | None:
    """The run's output: its newest registered export."""
    query = select(Checkpoint).where(Checkpoint.run_id == run_id, Checkpoint.kind == "export").order_by(Checkpoint.step.desc())
    return session.scalars(query.limit(1)).first()


def slurm_jobs(session: Session, run_id: int) -> list[SlurmJob]:
    return list(session.scalars(select(SlurmJob).where(SlurmJob.run_id == run_id).order_by(SlurmJob.id)))
