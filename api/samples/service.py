"""Generations: idempotent inserts (the caller has claimed the run), pages of them, and the distinct prompts."""

import hashlib
import math
import time

from sqlalchemy import asc, desc, func, select
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.inserts import IngestResult, ingest_rows
from api.models import Sample
from api.runs.service import readable_run
from api.samples import schemas
from rlplane.floats import encode
from rlplane.rows import SampleRow


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()[:32]


def _is_nan(value: float | None) -> bool:
    return value is not None and math.isnan(value)


def _stored(value: float | None) -> float | None:
    return None if _is_nan(value) else value


def sample_public(row: Sample) -> schemas.SampleOut:
    return schemas.SampleOut(
        id=row.id,
        step=row.step,
        index=row.index,
        prompt=row.prompt,
        prompt_hash=row.prompt_hash,
        response=row.response,
        reward=math.nan if row.reward_is_nan else row.reward,
        kl=math.nan if row.kl_is_nan else row.kl,
        scores=row.scores,
        label=row.label,
        reference=row.reference,
        turns=row.turns,
        time=row.time,
    )


def store(session: Session, run_id: int, samples: list[SampleRow]) -> IngestResult:
    """Insert generations; the caller has claimed the run (claim_for_report)."""
    now = time.time()
    rows = [
        {
            "run_id": run_id,
            "step": s.step,
            "index": s.index,
            "prompt": s.prompt,
            "prompt_hash": prompt_hash(s.prompt),
            "response": s.response,
            "reward": _stored(s.reward),
            "reward_is_nan": _is_nan(s.reward),
            "kl": _stored(s.kl),
            "kl_is_nan": _is_nan(s.kl),
            "scores": {k: encode(v) for k, v in s.scores.items()},
            "label": s.label,
            "reference": s.reference,
            "turns": None if s.turns is None else [turn.model_dump() for turn in s.turns],
            "time": now,
        }
        for s in samples
    ]
    return ingest_rows(session, Sample, rows, ["run_id", "step", "index"])


def read(
    session: Session,
    principal: Principal,
    run_id: int,
    *,
    step: int | None,
    step_min: int | None,
    step_max: int | None,
    prompt: str | None,
    sort: str,
    limit: int,
    offset: int,
) -> schemas.SamplePage:
    """`prompt`: a prompt's hash, to follow one prompt across steps."""
    readable_run(session, principal, run_id)
    filters = [Sample.run_id == run_id]
    if step is not None:
        filters.append(Sample.step == step)
    if step_min is not None:
        filters.append(Sample.step >= step_min)
    if step_max is not None:
        filters.append(Sample.step <= step_max)
    if prompt:
        filters.append(Sample.prompt_hash == prompt)
    column = Sample.reward if sort.lstrip("-") == "reward" else Sample.step
    order = desc if sort.startswith("-") else asc
    query = select(Sample).where(*filters).order_by(order(column).nulls_last(), Sample.step, Sample.index)
    rows = session.scalars(query.limit(limit).offset(offset)).all()
    total = session.scalar(select(func.count()).select_from(Sample).where(*filters)) or 0
    return schemas.SamplePage(data=[sample_public(r) for r in rows], count=total)


def prompts(session: Session, principal: Principal, run_id: int, *, limit: int, offset: int) -> schemas.PromptList:
    readable_run(session, principal, run_id)
    grouped = (
        select(
            Sample.prompt_hash,
            func.min(Sample.id).label("first_id"),
            func.count().label("n"),
            func.min(Sample.step).label("lo"),
            func.max(Sample.step).label("hi"),
        )
        .where(Sample.run_id == run_id)
        .group_by(Sample.prompt_hash)
        .subquery()
    )
    rows = session.execute(
        select(grouped.c.prompt_hash, Sample.prompt, grouped.c.n, grouped.c.lo, grouped.c.hi)
        .join(Sample, Sample.id == grouped.c.first_id)
        .order_by(grouped.c.lo, grouped.c.prompt_hash)
        .limit(limit)
        .offset(offset)
    ).all()
    total = session.scalar(select(func.count()).select_from(grouped)) or 0
    data = [schemas.PromptSummary(prompt_hash=h, prompt=p, samples=n, first_step=lo, last_step=hi) for h, p, n, lo, hi in rows]
    return schemas.PromptList(data=data, count=total)
