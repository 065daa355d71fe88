"""Pipelines as the API shows them."""

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.metrics.service import last_value
from api.models import Pipeline, PipelineStage, Project, Run
from api.pipelines import schemas
from api.pipelines.service import stages_of
from api.runs.headlines import FALLBACK, HEADLINES
from rlplane.pipeline import StageDoc, parse_gate


def _headline(session: Session, stage: PipelineStage) -> schemas.Headline | None:
    """The stage's `best` metric, else the first metric its run has of those the runs list shows for its algorithm
    (an eval stage's eval/accuracy or eval/success, a GRPO stage's reward/mean, ...): the last value."""
    if stage.run_id is None:
        return None
    best = StageDoc.model_validate(stage.stage).best
    algorithm = (stage.stage.get("spec") or {}).get("algorithm")
    for key in (best.metric,) if best else HEADLINES.get(algorithm, FALLBACK):
        value = last_value(session, stage.run_id, key)
        if value is not None or best:
            config = session.scalar(select(Run.config).where(Run.id == stage.run_id)) or {}
            return schemas.Headline(key=key, value=value, decoding=config.get("decoding"))
    return None


def _gate(session: Session, stage: PipelineStage, by_name: dict[str, PipelineStage]) -> list[str]:
    """The stage's gate, each comparison with the value it reads now (the stage's reason keeps the one that closed it)."""
    when = stage.stage.get("when")
    if not when:
        return []
    shown = []
    for comparison in parse_gate(when):
        producer = by_name.get(comparison.stage)
        value = last_value(session, producer.run_id, comparison.metric) if producer and producer.run_id else None
        if value is None:
            shown.append(f"{comparison}: no value yet")
        else:
            shown.append(f"{comparison}: it is {value:g}, {'holds' if comparison.holds(value) else 'does not hold'}")
    return shown


def detail(session: Session, pipeline: Pipeline) -> schemas.PipelineDetail:
    stages = stages_of(session, pipeline.id)
    by_name = {s.name: s for s in stages}
    run_ids = [s.run_id for s in stages if s.run_id is not None]
    statuses = dict(session.execute(select(Run.id, Run.status).where(Run.id.in_(run_ids))).all()) if run_ids else {}
    return schemas.PipelineDetail(
        id=pipeline.id,
        name=pipeline.name,
        project=session.get(Project, pipeline.project_id).name,
        status=pipeline.status,
        reason=pipeline.reason or None,
        created_at=pipeline.created_at,
        updated_at=pipeline.updated_at,
        document=pipeline.document,
        stages=[
            schemas.StagePublic(
                name=s.name,
                status=s.status,
                reason=s.reason or None,
                needs=s.needs,
                when=s.stage.get("when"),
                gate=_gate(session, s, by_name),
                run_id=s.run_id,
                run_status=statuses.get(s.run_id),
                runs=s.runs,
                sweep_id=s.sweep_id,
                headline=_headline(session, s),
            )
            for s in stages
        ],
    )


def listing(session: Session, project_ids: list[int] | None, project: str | None, limit: int) -> schemas.PipelineList:
    query = select(Pipeline, Project.name).join(Project, Project.id == Pipeline.project_id)
    if project_ids is not None:
        query = query.where(Pipeline.project_id.in_(project_ids))
    if project is not None:
        query = query.where(Project.name == project)
    rows = session.execute(query.order_by(Pipeline.id.desc()).limit(limit)).all()
    ids = [p.id for p, _ in rows]
    briefs: dict[int, list[schemas.StageBrief]] = {i: [] for i in ids}
    if ids:
        for pipeline_id, name, status in session.execute(
            select(PipelineStage.pipeline_id, PipelineStage.name, PipelineStage.status)
            .where(PipelineStage.pipeline_id.in_(ids))
            .order_by(PipelineStage.pipeline_id, PipelineStage.position)
        ):
            briefs[pipeline_id].append(schemas.StageBrief(name=name, status=status))
    return schemas.PipelineList(
        items=[
            schemas.PipelineSummary(
                id=p.id,
                name=p.name,
                project=project_name,
                status=p.status,
                created_at=p.created_at,
                updated_at=p.updated_at,
                stages=briefs[p.id],
            )
            for p, project_name in rows
        ]
    )
