"""Samples across runs: one prompt (by its hash) side by side in several runs, each at a chosen step (its latest, the
last at or before a step, its best checkpoint by a metric) or at every step (following one prompt), with filters on
what an answer scored. One request serves a Compare view: a few queries for all the runs, none per run in the browser."""

from __future__ import annotations

import math
from collections.abc import Sequence

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.exceptions import Unprocessable
from api.models import Checkpoint, Metric, Sample
from api.runs.service import readable_run
from api.samples import schemas
from api.samples.service import sample_public

MAX_RUNS = 20


def compare(
    session: Session,
    principal: Principal,
    run_ids: Sequence[int],
    *,
    at: schemas.SampleAt,
    step: int | None,
    metric: str | None,
    mode: str,
    prompt: str | None,
    reward_below: float | None,
    truncated: bool,
    failed: str | None,
    limit: int,
) -> schemas.SampleComparison:
    if not run_ids or len(run_ids) > MAX_RUNS:
        raise Unprocessable(["query", "runs"], f"give 1 to {MAX_RUNS} run ids, comma-separated")
    if at == "step" and step is None:
        raise Unprocessable(["query", "step"], "at=step needs step=<N>: each run shows its last samples at or before it")
    if at == "best" and not metric:
        raise Unprocessable(
            ["query", "metric"], "at=best needs metric=<key> (and mode=max or min): each run's best checkpoint by it"
        )
    if at == "all" and not prompt:
        raise Unprocessable(["query", "prompt_hash"], "at=all follows one prompt: give prompt_hash")
    runs = [readable_run(session, principal, run_id) for run_id in dict.fromkeys(run_ids)]
    steps = _sample_steps(session, [run.id for run in runs])
    shown: list[schemas.RunSamplesAt] = []
    for run in runs:
        chosen, why = _chosen_step(session, run.id, steps.get(run.id, []), at, step, metric, mode)
        shown.append(
            schemas.RunSamplesAt(
                run_id=run.id, name=run.name, algorithm=run.algorithm, step=chosen, why=why, steps=steps.get(run.id, [])
            )
        )
    rows = _samples(session, shown, at, prompt)
    rows = [row for row in rows if _kept(row, reward_below, truncated, failed)]
    prompts = _by_prompt(rows)
    return schemas.SampleComparison(runs=shown, prompts=prompts[:limit], count=len(prompts))


def _sample_steps(session: Session, run_ids: list[int]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    query = select(Sample.run_id, Sample.step).where(Sample.run_id.in_(run_ids)).distinct().order_by(Sample.run_id, Sample.step)
    for run_id, step in session.execute(query):
        found.setdefault(run_id, []).append(step)
    return found


def _chosen_step(
    session: Session, run_id: int, steps: list[int], at: str, step: int | None, metric: str | None, mode: str
) -> tuple[int | None, str | None]:
    if not steps:
        return None, "it logged no samples"
    if at == "all":
        return None, None
    if at == "latest":
        return steps[-1], None
    target = step if at == "step" else _best_checkpoint(session, run_id, metric or "", mode)
    if target is None:
        return None, f"no checkpoint of it has {metric} logged at its step"
    before = [s for s in steps if s <= target]
    if not before:
        return None, f"no samples at or before step {target}"
    return before[-1], None


def _best_checkpoint(session: Session, run_id: int, metric: str, mode: str) -> int | None:
    """The step of the run's checkpoint with the best `metric` logged at that step."""
    points = session.execute(
        select(Metric.step, Metric.value)
        .join(Checkpoint, (Checkpoint.run_id == Metric.run_id) & (Checkpoint.step == Metric.step))
        .where(Metric.run_id == run_id, Metric.key == metric, Checkpoint.kind == "checkpoint")
    ).all()
    finite = [(value, step) for step, value in points if value is not None and math.isfinite(value)]
    if not finite:
        return None
    return (max(finite) if mode == "max" else min(finite))[1]


def _samples(session: Session, runs: list[schemas.RunSamplesAt], at: str, prompt: str | None) -> list[Sample]:
    if at == "all":
        query = select(Sample).where(Sample.run_id.in_([r.run_id for r in runs]), Sample.prompt_hash == prompt)
    else:
        pairs = [(r.run_id, r.step) for r in runs if r.step is not None]
        if not pairs:
            return []
        query = select(Sample).where(tuple_(Sample.run_id, Sample.step).in_(pairs))
        if prompt:
            query = query.where(Sample.prompt_hash == prompt)
    return list(session.scalars(query.order_by(Sample.run_id, Sample.step, Sample.index)))


def _kept(row: Sample, reward_below: float | None, truncated: bool, failed: str | None) -> bool:
    """The filters: a reward below x, an answer that ran out of tokens, a reward component that failed (<= 0)."""
    if reward_below is not None and not (row.reward is not None and row.reward < reward_below):
        return False
    if truncated and not _score(row, "truncated") >= 1:
        return False
    return failed is None or _score(row, failed) <= 0


def _score(row: Sample, name: str) -> float:
    value = (row.scores or {}).get(name)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _by_prompt(rows: list[Sample]) -> list[schemas.PromptAcrossRuns]:
    grouped: dict[str, schemas.PromptAcrossRuns] = {}
    for row in rows:
        entry = grouped.setdefault(
            row.prompt_hash,
            schemas.PromptAcrossRuns(prompt_hash=row.prompt_hash, prompt=row.prompt, reference=row.reference, samples={}),
        )
        entry.reference = entry.reference or row.reference
        entry.samples.setdefault(row.run_id, []).append(sample_public(row))
    return sorted(grouped.values(), key=lambda p: (-len(p.samples), p.prompt))
