"""Shape ORM rows into the public run schemas."""

from typing import Any

from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.models import Run
from api.models.base import utcnow
from api.runs import gang, repository, schemas
from api.runs.headlines import page_headlines
from api.usage.service import attempt_cost
from rlplane.spec import RunSpec
from rlplane.spec.algorithms import ONLINE_ALGORITHMS
from rlplane.status import NOT_RESUMABLE_FAILURES, RESUMABLE
from rlplane.wire import LeasedRun


def run_public(run: Run, project: str, creator: str | None) -> schemas.RunPublic:
    return schemas.RunPublic(
        id=run.id,
        name=run.name,
        project=project,
        algorithm=run.algorithm,
        backend=run.backend,
        queue=run.queue,
        priority=run.priority,
        preempted_by=run.preempted_by,
        status=run.status,
        status_reason=run.status_reason,
        archived=run.archived,
        total_steps=run.total_steps,
        last_step=run.last_step,
        created_by=creator,
        created_at=run.created_at,
        updated_at=run.updated_at,
        started_at=run.started_at,
        ended_at=run.ended_at,
        failure=run.failure,
        resumable=run.status in RESUMABLE
        and not (run.status == "failed" and run.failure in NOT_RESUMABLE_FAILURES)
        and not is_scripted(run),
        config=run.config or {},
    )


def run_list_items(session: Session, rows) -> list[schemas.RunListItem]:
    """Rows of (run, project name, creator name), with each run's headline metric read for the whole page."""
    headlines = page_headlines(session, [(run.id, run.algorithm) for run, _, _ in rows])
    return [
        schemas.RunListItem(**run_public(run, project, creator).model_dump(), headline=headlines[run.id])
        for run, project, creator in rows
    ]


# A script's own names for what a runs table shows (rlplane.init(config=...), command.config, TRL's arguments)
_SCRIPT_KEYS = {
    "model": ("model", "model_name_or_path", "model_path"),
    "lr": ("lr", "learning_rate"),
    "batch_size": ("batch_size", "per_device_train_batch_size", "train_batch_size"),
}


def decoding(spec: RunSpec) -> str | None:
    """How a run's accuracies were drawn, for labels beside them: `greedy`, or `sampled at T=1` (with `, 8 per
    prompt` past one answer); an eval run's (eval.greedy / eval.samples at eval.gen), an RL run's held-out
    evaluations' (<section>.eval.samples: one is greedy; more are sampled at <section>.gen). None for the others."""
    options: Any = spec.options
    if spec.algorithm == "eval":
        greedy, samples, gen = options.greedy, options.samples, options.gen
    elif spec.algorithm in ONLINE_ALGORITHMS:
        samples, gen = options.eval.samples, options.gen
        greedy = samples == 1
    else:
        return None
    if greedy:
        return "greedy"
    return f"sampled at T={gen.temperature:g}" + (f", {samples} per prompt" if samples > 1 else "")


def config_summary(spec: RunSpec, script_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The spec fields a runs table shows beside the metrics, as the run has them: an eval run trains nothing (no lr
    or batch size), and a command run's are its script's own (its command.config, and what rlplane.init recorded:
    `script_config`), else the spec's only where its command line takes them ({train.lr}); null where it has none."""
    train, backend = spec.train, spec.backend
    summary = {
        "model": spec.model.path if spec.model is not None else None,
        "lr": train.lr,
        "batch_size": train.batch_size,
        "steps": train.steps,
        "backend": backend.kind,
        "precision": backend.precision,
        "decoding": decoding(spec),
    }
    if spec.algorithm == "eval":
        return {**summary, "lr": None, "batch_size": None}
    if spec.command is None:
        return summary
    command = spec.command
    argv = " ".join(str(arg) for arg in command.argv)
    given = {**command.config, **(script_config or {})}
    for field, keys in _SCRIPT_KEYS.items():
        own = next((given[key] for key in keys if isinstance(given.get(key), str | int | float)), None)
        # model.path is the user's (lineage); train.lr and batch_size are defaults unless the command line takes them
        taken = field == "model" or f"{{train.{field}}}" in argv
        summary[field] = own if own is not None else summary[field] if taken else None
    # its backend and precision are the script's own business: the spec's defaults say nothing about them
    return {**summary, "backend": None, "precision": None}


def link_public(link, run: Run) -> schemas.RunLinkPublic:
    return schemas.RunLinkPublic(
        run_id=run.id, name=run.name, algorithm=run.algorithm, status=run.status, field=link.field, step=link.step
    )


def visible_links(links, principal: Principal) -> list[schemas.RunLinkPublic]:
    """(link, run) pairs as shown to `principal`: a run another project made from this one's checkpoint (by someone in
    both) is not shown to a reader who is not in that project. A worker sees none."""
    return [link_public(link, run) for link, run in links if principal.can(run.project_id, "read")]


def lineage(session: Session, run_id: int, principal: Principal) -> schemas.Lineage:
    """The run's parents and children that `principal` may read."""
    return schemas.Lineage(
        run_id=run_id,
        parents=visible_links(repository.parents(session, run_id), principal),
        children=visible_links(repository.children(session, run_id), principal),
    )


def run_detail(session: Session, run_id: int, principal: Principal) -> schemas.RunDetail:
    """The run as `principal` sees it (its lineage: `lineage`)."""
    return run_details(session, repository.run_rows_by_id(session, [run_id]), principal)[run_id]


def run_details(
    session: Session, rows: dict[int, tuple[Run, str, str | None]], principal: Principal
) -> dict[int, schemas.RunDetail]:
    """run_detail of each run of `rows` (repository.run_rows_by_id), in one query per table (Compare's poll)."""
    parts = repository.detail_rows(session, list(rows))
    return {run_id: _detail(*row, parts, principal) for run_id, row in rows.items()}


def _detail(run: Run, project: str, creator: str | None, parts: repository.DetailRows, principal: Principal) -> schemas.RunDetail:
    nodes: dict[int, list[schemas.NodePublic]] = {}
    for node in parts.nodes.get(run.id, []):
        public = schemas.NodePublic.model_validate(node, from_attributes=True)
        public.role = gang.role_of(run, node.node_rank)
        nodes.setdefault(node.attempt, []).append(public)
    now = utcnow()
    attempts = []
    for a in parts.attempts.get(run.id, []):
        gpu, cpu = attempt_cost(run, ((a.ended_at or now) - a.started_at).total_seconds())
        usage = {"nodes": nodes.get(a.number, []), "gpu_seconds": round(gpu, 3), "cpu_slot_seconds": round(cpu, 3)}
        attempts.append(schemas.AttemptPublic.model_validate(a, from_attributes=True).model_copy(update=usage))
    jobs = [schemas.SlurmJobPublic.model_validate(job, from_attributes=True) for job in parts.slurm_jobs.get(run.id, [])]
    return schemas.RunDetail(
        **run_public(run, project, creator).model_dump(),
        slurm_jobs=jobs,
        spec=run.run_spec,
        spec_text=run.spec_text,
        parents=visible_links(parts.parents.get(run.id, []), principal),
        children=visible_links(parts.children.get(run.id, []), principal),
        attempts=attempts,
        gpu_seconds=round(sum(a.gpu_seconds for a in attempts), 3),
        cpu_slot_seconds=round(sum(a.cpu_slot_seconds for a in attempts), 3),
        latest_checkpoint_step=parts.checkpoint_steps.get(run.id),
        output=_output(parts.exports.get(run.id)),
        environment=run.environment,
    )


def _output(export) -> schemas.RunOutput | None:
    if export is None:
        return None
    return schemas.RunOutput(step=export.step, path=export.path, size=export.size, sha256=export.sha256)


def is_scripted(run: Run) -> bool:
    """A run its script started itself (rlplane.init): no worker can run it again."""
    return run.scripted


def scripted_spec(spec: RunSpec) -> bool:
    """A spec of a run its script started itself."""
    return spec.command is not None and spec.command.external


def leased_run(session: Session, run: Run) -> LeasedRun:
    """What a worker reads of the run it leases (the contract's LeasedRun): its typed spec and where it resumes."""
    return LeasedRun(id=run.id, spec=run.run_spec, latest_checkpoint_step=repository.latest_checkpoint_step(session, run.id))
