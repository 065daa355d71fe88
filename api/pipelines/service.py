"""Pipelines: submit a chain of stages once; the reconciler starts each stage's run when its inputs exist.

A stage is waiting until every stage it needs has succeeded and its gate is open, then running (its run is an
ordinary run, created as the pipeline's submitter), then what its run ended as. A failed, cancelled or skipped
stage skips the stages that need it, with the reason; a closed gate skips its stage. Retrying a stage (or
replacing its spec) sends it back to waiting, and the stages downstream that had run become stale: they ran on
the old output, and run again only when retried themselves.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.auth.service import in_project, submitter
from api.exceptions import Conflict, DomainError, NotFound, Unprocessable
from api.metrics.service import last_value
from api.models import Checkpoint, Metric, Pipeline, PipelineStage, Run, Sweep
from api.models.base import utcnow
from api.runs import service as runs
from api.runs.sources import check_sources
from api.sweeps import service as sweeps
from rlplane.limits import fit_reason
from rlplane.pipeline import (
    PLACEHOLDER_RUN,
    PipelineDoc,
    StageDoc,
    StageRef,
    check,
    dependencies,
    downstream,
    parse_gate,
    stage_refs,
    stage_sweep,
    substitute,
    with_defaults,
)
from rlplane.spec import SpecError, parse_spec
from rlplane.status import TERMINAL
from rlplane.sweep import SweepDoc

ENDED = frozenset({"succeeded", "failed", "skipped", "cancelled"})
RETRYABLE = frozenset({"failed", "cancelled", "skipped", "stale", "succeeded"})


def check_submission(session: Session, principal: Principal, doc: PipelineDoc, reward_entrypoints: list[str]):
    """What a submit checks beyond the document itself (project and write access, each stage's rewards, datasets
    and runs); stores nothing. Returns the project."""
    project = runs.project_by_name_or_422(session, doc.project)
    principal.require(project.id, "write")
    for name, stage in doc.stages.items():
        _check_stage(session, principal, name, stage, reward_entrypoints)
    return project


def submit(session: Session, principal: Principal, doc: PipelineDoc, reward_entrypoints: list[str]) -> Pipeline:
    """Store a validated pipeline and start the stages that need nothing; refuses (422) what a run submit would."""
    project = check_submission(session, principal, doc, reward_entrypoints)
    pipeline = Pipeline(
        project_id=project.id,
        name=doc.name,
        status="running",
        reason="",
        document=doc.model_dump(mode="json"),
        created_by=principal.user_id,
    )
    session.add(pipeline)
    session.flush()
    needs = dependencies(doc)
    for position, (name, stage) in enumerate(doc.stages.items()):
        session.add(
            PipelineStage(
                pipeline_id=pipeline.id,
                name=name,
                position=position,
                stage=stage.model_dump(mode="json"),
                needs=needs[name],
                status="waiting",
                reason="",
                runs=[],
            )
        )
    session.flush()
    advance(session, pipeline, reward_entrypoints)
    return pipeline


def _check_stage(session: Session, principal: Principal, name: str, stage: StageDoc, allowed: list[str]) -> None:
    """What a run submit checks beyond the schema (rewards the server allows, datasets, referenced runs)."""
    spec = parse_spec(substitute(stage.spec, lambda _: PLACEHOLDER_RUN))
    try:
        runs.check_reward_entrypoints(spec, allowed)
        check_sources(session, principal, spec)
    except Unprocessable as exc:
        raise Unprocessable.many([{**e, "loc": ["body", "stages", name, "spec", *e["loc"][1:]]} for e in exc.detail]) from None
    placeholders = {ref.field for ref in stage_refs(stage.spec)}
    for ref in spec.references():
        if ref.field in placeholders:
            continue
        parent = session.get(Run, ref.run_id)
        if parent is None or not principal.can(parent.project_id, "read"):
            raise Unprocessable(
                ["body", "stages", name, "spec", *ref.field.split(".")],
                f"run {ref.run_id} does not exist or is not visible to you",
            )


def stages_of(session: Session, pipeline_id: int) -> list[PipelineStage]:
    return list(
        session.scalars(select(PipelineStage).where(PipelineStage.pipeline_id == pipeline_id).order_by(PipelineStage.position))
    )


def readable(session: Session, principal: Principal, pipeline_id: int, action: str = "read") -> Pipeline:
    return in_project(session, principal, Pipeline, pipeline_id, "pipeline", action)


# --- the reconciler's part ---


def advance_all(session: Session, reward_entrypoints: list[str]) -> None:
    """Move every pipeline that still has work: stages whose run ended, stages whose inputs now exist."""
    open_ids = session.scalars(
        select(PipelineStage.pipeline_id).where(PipelineStage.status.in_(("waiting", "running"))).distinct()
    ).all()
    for pipeline_id in sorted(open_ids):
        pipeline = session.get(Pipeline, pipeline_id, with_for_update=True)
        if pipeline is not None:
            advance(session, pipeline, reward_entrypoints)


def advance(session: Session, pipeline: Pipeline, reward_entrypoints: list[str]) -> None:
    stages = stages_of(session, pipeline.id)
    by_name = {stage.name: stage for stage in stages}
    changed = True
    while changed:  # a stage that ends can start or skip the next one in the same pass
        changed = False
        for stage in stages:
            if stage.status == "running":
                changed |= _follow_run(session, stage)
            elif stage.status == "waiting":
                changed |= _try_start(session, pipeline, stage, by_name, reward_entrypoints)
    _settle(pipeline, stages)


def _set(stage: PipelineStage, status: str, reason: str = "") -> bool:
    stage.status, stage.reason, stage.updated_at = status, fit_reason(reason), utcnow()
    return True


def _follow_run(session: Session, stage: PipelineStage) -> bool:
    if stage.sweep_id is not None and stage.run_id is None:
        return _follow_sweep(session, stage)
    run = session.get(Run, stage.run_id) if stage.run_id is not None else None
    if run is None:
        return _set(stage, "failed", "its run was deleted")
    if run.status not in TERMINAL:
        return False
    return _set(stage, run.status, "" if run.status == "succeeded" else f"run {run.id} {run.status}: {run.status_reason}")


def _follow_sweep(session: Session, stage: PipelineStage) -> bool:
    """A tuned stage ends as its sweep does; its output is then the best trial's run."""
    sweep = session.get(Sweep, stage.sweep_id)
    if sweep is None:
        return _set(stage, "failed", "its sweep was deleted")
    if sweep.status == "running":
        return False
    if sweep.status != "succeeded":
        return _set(stage, sweep.status, f"sweep {sweep.id} {sweep.status}: {sweep.reason}")
    best = sweeps.best_trial(SweepDoc.model_validate(sweep.document), sweeps.trials_of(session, sweep.id))
    assert best is not None and best.run_id is not None  # a sweep succeeds only with a completed trial
    stage.run_id, stage.runs = best.run_id, [*stage.runs, best.run_id]
    return _set(stage, "succeeded", f"sweep {sweep.id}: {sweep.reason}")


def _try_start(
    session: Session, pipeline: Pipeline, stage: PipelineStage, by_name: dict[str, PipelineStage], allowed: list[str]
) -> bool:
    if pipeline.status == "cancelled":
        return _set(stage, "cancelled", "the pipeline was cancelled")
    for name in stage.needs:
        needed = by_name[name]
        if needed.status in ("failed", "cancelled", "skipped"):
            return _set(stage, "skipped", f"stage {name} {needed.status}")
        if needed.status != "succeeded":
            return False
    doc = StageDoc.model_validate(stage.stage)
    if doc.when and (closed := _closed_gate(session, doc.when, by_name)):
        return _set(stage, "skipped", f"gate closed: {closed}")
    try:
        resolved = substitute(doc.spec, lambda ref: _resolve(session, ref, by_name))
        principal = submitter(session, pipeline.created_by)
        if doc.sweep is not None:
            sweep = sweeps.submit(session, principal, stage_sweep(doc, resolved, pipeline.document["project"]), allowed)
            stage.sweep_id, stage.run_id = sweep.id, None
            return _set(stage, "running")
        run = runs.create_run(session, principal, parse_spec(resolved), allowed)
    except (_Unresolved, SpecError, DomainError) as exc:
        return _set(stage, "failed", f"could not start: {_message(exc)}")
    stage.run_id = run.id
    stage.runs = [*stage.runs, run.id]
    return _set(stage, "running")


class _Unresolved(Exception):
    pass


def _message(exc: Exception) -> str:
    if isinstance(exc, DomainError):
        detail = exc.detail
        if isinstance(detail, list):
            return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', [])[1:])}: {e.get('msg')}" for e in detail)
        return str(detail)
    return str(exc)


def _closed_gate(session: Session, when: str, by_name: dict[str, PipelineStage]) -> str | None:
    """None if every comparison holds; else the first that does not, with the value it saw."""
    for comparison in parse_gate(when):
        run_id = by_name[comparison.stage].run_id
        value = last_value(session, run_id, comparison.metric) if run_id is not None else None
        if value is None:
            return f"{comparison}: stage {comparison.stage} logged no {comparison.metric}"
        if not comparison.holds(value):
            return f"{comparison}: it is {value:g}"
    return None


def _resolve(session: Session, ref: StageRef, by_name: dict[str, PipelineStage]) -> str:
    producer = by_name[ref.stage]
    run_id = producer.run_id
    assert run_id is not None  # a stage starts only after the stages it references succeeded
    if ref.selector == "last":
        return f"run:{run_id}"
    steps = session.scalars(select(Checkpoint.step).where(Checkpoint.run_id == run_id, Checkpoint.kind == "checkpoint")).all()
    if isinstance(ref.selector, int):
        if ref.selector not in steps:
            have = ", ".join(str(s) for s in sorted(steps)) or "none"
            raise _Unresolved(
                f"{ref.field}: stage {ref.stage} (run {run_id}) has no checkpoint at step {ref.selector} (it has {have})"
            )
        return f"run:{run_id}@{ref.selector}"
    best = StageDoc.model_validate(producer.stage).best
    assert best is not None  # refused at submit
    step = best_step(session, run_id, best.metric, best.goal, steps)
    if step is None:
        raise _Unresolved(
            f"{ref.field}: stage {ref.stage} (run {run_id}) has no checkpoint with {best.metric} logged at or before it"
        )
    return f"run:{run_id}@{step}"


def best_step(session: Session, run_id: int, metric: str, goal: str, steps: list[int]) -> int | None:
    """The checkpoint step whose score is best: the metric's last value logged at or before that step (eval
    runs every eval_every steps, checkpoints every checkpoint_every); ties go to the earlier checkpoint."""
    points = session.execute(
        select(Metric.step, Metric.value)
        .where(Metric.run_id == run_id, Metric.key == metric, Metric.is_nan.is_(False))
        .order_by(Metric.step)
    ).all()
    best: tuple[float, int] | None = None
    for step in sorted(steps):
        seen = [value for at, value in points if at <= step]
        if not seen:
            continue
        score = seen[-1] if goal == "min" else -seen[-1]
        if best is None or score < best[0]:
            best = (score, step)
    return None if best is None else best[1]


def _settle(pipeline: Pipeline, stages: list[PipelineStage]) -> None:
    """The pipeline's status from its stages'."""
    if any(stage.status in ("waiting", "running") for stage in stages):
        if pipeline.status not in ("running", "cancelled"):
            pipeline.status, pipeline.reason = "running", ""
        pipeline.updated_at = utcnow()
        return
    if pipeline.status == "cancelled":
        return
    if all(stage.status == "succeeded" for stage in stages):
        status, reason = "succeeded", ""
    else:
        problems = [f"{stage.name} {stage.status}" for stage in stages if stage.status != "succeeded"]
        status, reason = "failed", ", ".join(problems)
    if (pipeline.status, pipeline.reason) != (status, reason):
        pipeline.status, pipeline.reason, pipeline.updated_at = status, fit_reason(reason), utcnow()


# --- a user's actions ---


def cancel(session: Session, principal: Principal, pipeline_id: int) -> Pipeline:
    """Cancel every stage: waiting ones at once, running ones through their runs (they end as their runs do)."""
    pipeline = readable(session, principal, pipeline_id, "write")
    if pipeline.status != "running":
        raise Conflict(f"pipeline {pipeline.id} is {pipeline.status}; only a running pipeline can be cancelled")
    pipeline.status, pipeline.reason, pipeline.updated_at = "cancelled", f"cancelled by {principal.user_name}", utcnow()
    for stage in stages_of(session, pipeline.id):
        if stage.status == "waiting":
            _set(stage, "cancelled", "the pipeline was cancelled")
        elif stage.status == "running" and stage.sweep_id is not None and stage.run_id is None:
            if (sweep := session.get(Sweep, stage.sweep_id)) is not None and sweep.status == "running":
                sweeps.cancel(session, principal, sweep.id)
        elif stage.status == "running" and stage.run_id is not None:
            run = session.get(Run, stage.run_id)
            if run is not None and run.status not in TERMINAL and run.status != "cancelling":
                runs.cancel(session, principal, run.id)
    return pipeline


def retry(
    session: Session, principal: Principal, pipeline_id: int, name: str, spec: dict | None, reward_entrypoints: list[str]
) -> Pipeline:
    """Run stage `name` again (from `spec` if given: a replace); the stages downstream that ran become stale."""
    pipeline = readable(session, principal, pipeline_id, "write")
    stages = stages_of(session, pipeline.id)
    by_name = {stage.name: stage for stage in stages}
    stage = by_name.get(name)
    if stage is None:
        raise NotFound(f"stage {name!r} of pipeline {pipeline.id}")
    if stage.status not in RETRYABLE:
        raise Conflict(f"stage {name} is {stage.status}; a stage can be retried once it has ended")
    after = downstream({s.name: s.needs for s in stages}, name)
    if busy := [s.name for s in stages if s.name in after and s.status == "running"]:
        raise Conflict(f"stage {busy[0]} is running on this stage's output: cancel it first")
    if spec is not None:
        document = PipelineDoc.model_validate(pipeline.document)
        replaced = StageDoc.model_validate({**stage.stage, "spec": with_defaults(spec, document.name, document.project, name)})
        document.stages[name] = replaced
        try:
            if errors := check(document):
                raise SpecError(errors)
        except SpecError as exc:
            here = ["stages", name, "spec"]
            raise Unprocessable.many(
                [
                    {**e, "loc": ["body", "spec", *e["loc"][3:]] if e["loc"][:3] == here else ["body", *e["loc"]]}
                    for e in exc.errors
                ]
            ) from None
        _check_stage(session, principal, name, replaced, reward_entrypoints)
        stage.stage = replaced.model_dump(mode="json")
        pipeline.document = document.model_dump(mode="json")
    stage.sweep_id = None
    _set(stage, "waiting", f"retried by {principal.user_name}" + (" with a new spec" if spec is not None else ""))
    for other in stages:
        if other.name not in after:
            continue
        if other.runs:
            _set(other, "stale", f"stage {name} is being run again: retry this stage to use its new output")
        else:
            _set(other, "waiting")
    pipeline.status, pipeline.reason = "running", ""
    advance(session, pipeline, reward_entrypoints)
    return pipeline
