"""Sweeps as the API shows them."""

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.models import Project, Run, Sweep, SweepTrial
from api.sweeps import schemas
from api.sweeps.service import best_trial, budget, trials_of
from rlplane.sweep import SweepDoc


def _trial(t: SweepTrial, statuses: dict[int, str], decodings: dict[int, str | None] | None = None) -> schemas.TrialPublic:
    run_status = statuses.get(t.run_id) if t.run_id is not None else None
    return schemas.TrialPublic(
        number=t.number,
        params=t.params,
        run_id=t.run_id,
        run_status=run_status,
        state="queued" if t.state == "running" and run_status == "queued" else t.state,
        value=t.value,
        reason=t.reason or None,
        decoding=(decodings or {}).get(t.run_id) if t.run_id is not None else None,
    )


def _summary(sweep: Sweep, project: str, trials: list[SweepTrial]) -> dict:
    doc = SweepDoc.model_validate(sweep.document)
    best = best_trial(doc, trials)
    return dict(
        id=sweep.id,
        name=sweep.name,
        project=project,
        status=sweep.status,
        method=doc.method,
        metric=doc.metric,
        goal=doc.goal,
        trials=len(trials),
        budget=budget(doc),
        best_value=best.value if best else None,
        created_at=sweep.created_at,
        updated_at=sweep.updated_at,
    )


def detail(session: Session, sweep: Sweep) -> schemas.SweepDetail:
    doc = SweepDoc.model_validate(sweep.document)
    trials = trials_of(session, sweep.id)
    ids = [t.run_id for t in trials if t.run_id is not None]
    rows = session.execute(select(Run.id, Run.status, Run.config).where(Run.id.in_(ids))).all() if ids else []
    statuses = {run_id: status for run_id, status, _ in rows}
    decodings = {run_id: (config or {}).get("decoding") for run_id, _, config in rows}
    best = best_trial(doc, trials)
    return schemas.SweepDetail(
        **_summary(sweep, session.get(Project, sweep.project_id).name, trials),
        reason=sweep.reason or None,
        parallel=doc.parallel,
        space={path: param.model_dump(mode="json") for path, param in doc.space.items()},
        early_stopping=doc.early_stopping.model_dump(mode="json") if doc.early_stopping else None,
        best=_trial(best, statuses, decodings) if best else None,
        trial_list=[_trial(t, statuses, decodings) for t in trials],
    )


def listing(session: Session, project_ids: list[int] | None, project: str | None, limit: int) -> schemas.SweepList:
    query = select(Sweep, Project.name).join(Project, Project.id == Sweep.project_id)
    if project_ids is not None:
        query = query.where(Sweep.project_id.in_(project_ids))
    if project is not None:
        query = query.where(Project.name == project)
    rows = session.execute(query.order_by(Sweep.id.desc()).limit(limit)).all()
    return schemas.SweepList(items=[schemas.SweepSummary(**_summary(s, p, trials_of(session, s.id))) for s, p in rows])
