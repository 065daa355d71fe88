"""Quotas: what one project may hold of one queue at once (docs/scheduling.md).

A site admin sets, per project and queue, at most `max_gpus` GPUs (resources.gpus x resources.nodes of the project's
active runs there; on a CPU queue, worker slots: one per node) and at most `max_runs` active runs. A queued run that
would go beyond either waits, and says so in its reason (`project vision is at its quota: 8 of 8 GPUs on queue
a100`): it is not dispatched (no message, no gang, no Slurm job), a worker's lease of it is refused, and it neither
holds workers from other runs nor preempts any. It starts once the project's runs there end. A run that alone asks for
more than its project's quota is refused at submit.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.exceptions import Unprocessable
from api.models import Project, ProjectQuota, Run
from rlplane.spec import RunSpec
from rlplane.status import ACTIVE


def slots(spec: RunSpec) -> int:
    """What a run holds of its queue while active: GPUs on a GPU queue, worker slots (nodes) on a CPU one."""
    resources = spec.resources
    return resources.gpus * resources.nodes if resources.gpus else resources.nodes


def unit(gpus_per_node: int) -> str:
    return "GPUs" if gpus_per_node else "worker slots"


_LOADED = "rlplane.quotas"  # session.info's key for the quotas read in this session


def quota_of(session: Session, project_id: int, queue: str) -> ProjectQuota | None:
    """Read once a session, all of them (a few rows: projects x queues): the reconciler asks for each queued run on
    every tick, and `session.get` of a quota that does not exist, the usual answer, is a query each time (a backlog of
    500 runs kept a core half busy)."""
    loaded = session.info.get(_LOADED)
    if loaded is None:
        loaded = session.info[_LOADED] = {(q.project_id, q.queue): q for q in session.scalars(select(ProjectQuota))}
    return loaded.get((project_id, queue))


def held(session: Session, project_id: int, queue: str) -> tuple[int, int]:
    """(slots, runs) the project's active runs hold of `queue`."""
    runs = session.scalars(select(Run).where(Run.project_id == project_id, Run.queue == queue, Run.status.in_(ACTIVE))).all()
    return sum(slots(run.run_spec) for run in runs), len(runs)


def blocked(session: Session, run: Run) -> str | None:
    """Why the queued `run` must wait for its project's quota on its queue; None if it may start."""
    quota = quota_of(session, run.project_id, run.queue)
    if quota is None or (quota.max_gpus is None and quota.max_runs is None):
        return None
    used, running = held(session, run.project_id, run.queue)
    name = session.scalar(select(Project.name).where(Project.id == run.project_id))
    if quota.max_runs is not None and running + 1 > quota.max_runs:
        return f"project {name} is at its quota: {running} of {quota.max_runs} runs on queue {run.queue}"
    need = run.slots
    if quota.max_gpus is not None and used + need > quota.max_gpus:
        asks = f"; this run needs {need}" if need > 1 else ""
        return f"project {name} is at its quota: {used} of {quota.max_gpus} {unit(run.gpus)} on queue {run.queue}{asks}"
    return None


def check_submission(session: Session, project: Project, spec: RunSpec) -> None:
    """A run that alone asks for more than its project may ever hold of its queue is refused (422) at submit."""
    quota = quota_of(session, project.id, spec.resources.queue)
    if quota is None or quota.max_gpus is None or slots(spec) <= quota.max_gpus:
        return
    field = "gpus" if spec.resources.gpus else "nodes"
    raise Unprocessable(
        ["body", "resources", field],
        f"the run asks for {slots(spec)} {unit(spec.resources.gpus)} and project {project.name} may hold at most "
        f"{quota.max_gpus} on queue {spec.resources.queue}: lower resources.{field}, or ask a site admin to raise the quota",
    )


def set_quota(session: Session, project: Project, queue: str, max_gpus: int | None, max_runs: int | None) -> None:
    """A site admin's quota for `project` on `queue` (the caller checks who asks); runs already active keep running."""
    quota = quota_of(session, project.id, queue)
    if quota is None:
        quota = ProjectQuota(project_id=project.id, queue=queue)
        session.add(quota)
        session.info[_LOADED][(project.id, queue)] = quota
    quota.max_gpus, quota.max_runs = max_gpus, max_runs
    session.flush()


def remove_quota(session: Session, project: Project, queue: str) -> bool:
    quota = quota_of(session, project.id, queue)
    if quota is not None:
        session.delete(quota)
        session.flush()
        del session.info[_LOADED][(project.id, queue)]
    return quota is not None


def of_project(session: Session, project: Project) -> list[tuple[ProjectQuota, int, int]]:
    """The project's quotas by queue, each with the (slots, runs) its active runs hold there now."""
    found = session.scalars(select(ProjectQuota).where(ProjectQuota.project_id == project.id).order_by(ProjectQuota.queue))
    return [(quota, *held(session, project.id, quota.queue)) for quota in found]
