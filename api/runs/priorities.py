"""A run's priority: what it is at submit, and which waiting run goes first (docs/scheduling.md).

A run's priority is its spec's `resources.priority` (0-100; low 25, normal 50, high 75, urgent 100) or its project's
default, fixed at submit. A project's members may ask for up to the project's `member_max_priority` (normal unless a
site admin raised it); above it needs the project's admin role, so an urgent run is a decision someone owns.

Waiting runs are ranked by priority, then age: the dispatcher grants gangs in that order, and a worker's lease of a
one-node run is refused while a run ranked ahead of it waits for exactly that worker (an older gang the queue can
hold, or higher-priority runs that the queue's other idle workers cannot all take). The refused message is dropped and
the run sent again later (the reconciler's redispatch); the worker takes the message of the run ahead next.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.exceptions import Forbidden
from api.models import Project, Run, Worker
from rlplane.spec import RunSpec
from rlplane.spec.sections import PRIORITIES

RANKED = (Run.priority.desc(), Run.id)  # waiting runs, first to start first


def named(priority: int) -> str:
    """75 -> "75 (high)"; a number between the names stays a number."""
    name = next((name for name, value in PRIORITIES.items() if value == priority), None)
    return f"{priority} ({name})" if name else str(priority)


def of_submission(principal: Principal, project: Project, spec: RunSpec) -> int:
    """The priority a run of `spec` in `project` is stored with; Forbidden above what the submitter may ask for."""
    asked = spec.resources.priority
    if asked is None:
        return project.default_priority
    if asked > project.member_max_priority and not principal.can(project.id, "admin"):
        raise Forbidden(
            f"resources.priority {named(asked)} is above what members of project {project.name} may ask for "
            f"({named(project.member_max_priority)}): ask one of its admins to submit it, or lower resources.priority"
        )
    return asked


def ahead_of(run: Run) -> ColumnElement[bool]:
    """SQL: a run ranked ahead of `run` (to start before it)."""
    return (Run.priority > run.priority) | ((Run.priority == run.priority) & (Run.id < run.id))


def outranking_one_node_runs(session: Session, run: Run, queue: str) -> list[Run]:
    """Queued one-node runs of `queue` with a higher priority than `run`, first to start first."""
    from api.runs.gang import nodes_of

    higher = session.scalars(
        select(Run).where(Run.status == "queued", Run.queue == queue, Run.priority > run.priority).order_by(*RANKED)
    )
    return [other for other in higher if nodes_of(other) == 1]


def needed_elsewhere(session: Session, run: Run, me: Worker, others_idle: dict[str, int]) -> Run | None:
    """The higher-priority one-node run that worker `me` must be kept free for, instead of leasing `run`: on some
    queue it serves, more such runs wait than the queue's other idle workers (`others_idle`, by queue) can take."""
    for queue in me.queues:
        higher = outranking_one_node_runs(session, run, queue)
        if len(higher) > others_idle.get(queue, 0):
            return higher[0]
    return None
