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

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.exceptions import Forbidden
from api.models import Project, Run, Worker
from api.models.base import utcnow
from rlplane.spec import RunSpec
from rlplane.spec.sections import PRIORITIES


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


# How far back a project's use of a queue counts against its share.
FAIR_SHARE_WINDOW = timedelta(days=7)


@dataclass(frozen=True)
class Ranking:
    """The order waiting runs start in: priority first; between projects of one priority, each project's use of the
    queue over the last FAIR_SHARE_WINDOW against its share (a site admin's weight, 1 by default), least first; then
    age. Runs of one project and priority go in the broker's order (first submitted, first taken)."""

    use: dict[tuple[int, str], float]  # (project, queue) -> GPU-seconds, or worker-slot-seconds on a CPU queue
    shares: dict[int, float]

    def used(self, run: Run) -> float:
        """The run's project's use of the run's queue against its share."""
        return self.use.get((run.project_id, run.queue), 0.0) / self.shares.get(run.project_id, 1.0)

    def key(self, run: Run) -> tuple[int, float, int]:
        return (-run.priority, self.used(run), run.id)

    def outranks(self, other: Run, run: Run) -> bool:
        """`other` must start before `run`, whatever the broker's order: a higher priority, or the same one and a
        project that has used less of the queue against its share."""
        if other.priority != run.priority:
            return other.priority > run.priority
        return other.project_id != run.project_id and self.used(other) < self.used(run)


def ranking(session: Session) -> Ranking:
    from api.usage.service import slot_seconds

    until = utcnow()
    shares = {project_id: share for project_id, share in session.execute(select(Project.id, Project.share))}
    use: dict[tuple[int, str], float] = {}
    for (project_id, queue, _), seconds in slot_seconds(session, until - FAIR_SHARE_WINDOW, until).items():
        use[(project_id, queue)] = use.get((project_id, queue), 0.0) + seconds
    return Ranking(use, shares)


def waiting(session: Session, rank: Ranking) -> list[Run]:
    """Every queued run, first to start first."""
    return sorted(session.scalars(select(Run).where(Run.status == "queued")), key=rank.key)


def needed_elsewhere(
    session: Session, run: Run, me: Worker, others_idle: dict[str, int], rank: Ranking, queued: list[Run]
) -> Run | None:
    """The one-node run that worker `me` must be kept free for, instead of leasing `run`: on some queue it serves,
    more runs that outrank `run` (and that their project's quota lets start) wait than the queue's other idle
    workers (`others_idle`, by queue) can take."""
    from api.runs import quotas
    from api.runs.gang import nodes_of

    for queue in me.queues:
        ahead = [
            other
            for other in queued
            if other.queue == queue
            and other.id != run.id
            and rank.outranks(other, run)
            and nodes_of(other) == 1
            and quotas.blocked(session, other) is None
        ]
        if len(ahead) > others_idle.get(queue, 0):
            return ahead[0]
    return None
