"""Queries for runs; no rules here."""

from collections.abc import Sequence
from dataclasses import dataclass, field

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


@dataclass
class DetailRows:
    """What a run's detail shows beyond its row, for several runs, each by run id: one query per table."""

    parents: dict[int, list[tuple[RunLink, Run]]] = field(default_factory=dict)
    children: dict[int, list[tuple[RunLink, Run]]] = field(default_factory=dict)
    attempts: dict[int, list[RunAttempt]] = field(default_factory=dict)
    nodes: dict[int, list[AttemptNode]] = field(default_factory=dict)
    slurm_jobs: dict[int, list[SlurmJob]] = field(default_factory=dict)
    checkpoint_steps: dict[int, int] = field(default_factory=dict)
    exports: dict[int, Checkpoint] = field(default_factory=dict)


def run_rows_by_id(session: Session, run_ids: Sequence[int]) -> dict[int, tuple[Run, str, str | None]]:
    query = (
        select(Run, Project.name, User.name)
        .join(Project, Project.id == Run.project_id)
        .outerjoin(User, User.id == Run.created_by)
        .where(Run.id.in_(run_ids))
    )
    return {run.id: (run, project, creator) for run, project, creator in session.execute(query)}


def detail_rows(session: Session, run_ids: Sequence[int]) -> DetailRows:
    """The parts of `run_ids`' details, in the order each single-run query gives them (Compare's poll of 20 runs
    made 10 queries a run)."""
    ids, out = list(run_ids), DetailRows()
    parent = select(RunLink, Run).join(Run, Run.id == RunLink.parent_id).where(RunLink.child_id.in_(ids))
    for link, run in session.execute(parent.order_by(RunLink.child_id, RunLink.field)):
        out.parents.setdefault(link.child_id, []).append((link, run))
    child = select(RunLink, Run).join(Run, Run.id == RunLink.child_id).where(RunLink.parent_id.in_(ids))
    for link, run in session.execute(child.order_by(RunLink.parent_id, Run.id)):
        out.children.setdefault(link.parent_id, []).append((link, run))
    for attempt in session.scalars(select(RunAttempt).where(RunAttempt.run_id.in_(ids)).order_by(RunAttempt.number)):
        out.attempts.setdefault(attempt.run_id, []).append(attempt)
    nodes = select(AttemptNode).where(AttemptNode.run_id.in_(ids)).order_by(AttemptNode.attempt, AttemptNode.node_rank)
    for node in session.scalars(nodes):
        out.nodes.setdefault(node.run_id, []).append(node)
    for job in session.scalars(select(SlurmJob).where(SlurmJob.run_id.in_(ids)).order_by(SlurmJob.id)):
        out.slurm_jobs.setdefault(job.run_id, []).append(job)
    saved = (Checkpoint.run_id.in_(ids), Checkpoint.kind == "checkpoint")
    newest = select(Checkpoint.run_id, func.max(Checkpoint.step)).where(*saved).group_by(Checkpoint.run_id)
    out.checkpoint_steps = {run_id: step for run_id, step in session.execute(newest)}
    exports = select(Checkpoint).where(Checkpoint.run_id.in_(ids), Checkpoint.kind == "export").order_by(Checkpoint.step.desc())
    for export in session.scalars(exports):
        out.exports.setdefault(export.run_id, export)  # each run's newest
    return out


def latest_checkpoint_step(session: Session, run_id: int) -> int | None:
    query = select(func.max(Checkpoint.step)).where(Checkpoint.run_id == run_id, Checkpoint.kind == "checkpoint")
    return session.scalar(query)


def final_export(session: Session, run_id: int) -> Checkpoint | None:
    """The run's output: its newest registered export."""
    query = select(Checkpoint).where(Checkpoint.run_id == run_id, Checkpoint.kind == "export").order_by(Checkpoint.step.desc())
    return session.scalars(query.limit(1)).first()
