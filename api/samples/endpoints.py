import hashlib
import math
import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import Field, TypeAdapter
from sqlalchemy import asc, desc, func, select
from sqlalchemy.orm import Session

from api.auth.deps import Reader
from api.auth.principal import Principal
from api.db import SessionDep
from api.floats import encode
from api.inserts import IngestResult, ingest_rows
from api.models import Sample
from api.reporting import in_one_hop, json_body, parse
from api.runs.service import claim_for_report, readable_run
from api.samples import schemas
from api.values import Offset, RunId, StepQuery
from rlplane.limits import MAX_ROWS

router = APIRouter(prefix="/api/v1/runs/{run_id}/samples", tags=["samples"])


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()[:32]


def _is_nan(value: float | None) -> bool:
    return value is not None and math.isnan(value)


def _stored(value: float | None) -> float | None:
    return None if _is_nan(value) else value


def _public(row: Sample) -> schemas.SampleOut:
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
        time=row.time,
    )


_SAMPLES = TypeAdapter(Annotated[list[schemas.SampleIn], Field(max_length=MAX_ROWS["samples"])])


@router.post("", response_model=IngestResult, openapi_extra=json_body(_SAMPLES, "Up to 5,000 samples"))
async def add_samples(run_id: RunId, request: Request) -> IngestResult:
    """Store generations; a re-sent (step, index) is stored once."""

    def add(session: Session, principal: Principal, raw: bytes) -> IngestResult:
        claim_for_report(session, principal, run_id)
        return store(session, run_id, parse(_SAMPLES, raw))

    return await in_one_hop(request, add)


def store(session: Session, run_id: int, samples: list[schemas.SampleIn]) -> IngestResult:
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
            "time": now,
        }
        for s in samples
    ]
    return ingest_rows(session, Sample, rows, ["run_id", "step", "index"])


@router.get("", response_model=schemas.SamplePage)
def read_samples(
    run_id: RunId,
    principal: Reader,
    session: SessionDep,
    step: StepQuery = None,
    step_min: StepQuery = None,
    step_max: StepQuery = None,
    prompt_hash_: Annotated[
        str | None,
        Query(alias="prompt_hash", pattern=r"^[0-9a-f]{1,64}$", description="One prompt across steps"),
    ] = None,
    sort: schemas.SampleSort = "step",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> schemas.SamplePage:
    readable_run(session, principal, run_id)
    filters = [Sample.run_id == run_id]
    if step is not None:
        filters.append(Sample.step == step)
    if step_min is not None:
        filters.append(Sample.step >= step_min)
    if step_max is not None:
        filters.append(Sample.step <= step_max)
    if prompt_hash_:
        filters.append(Sample.prompt_hash == prompt_hash_)
    column = Sample.reward if sort.lstrip("-") == "reward" else Sample.step
    order = desc if sort.startswith("-") else asc
    query = select(Sample).where(*filters).order_by(order(column).nulls_last(), Sample.step, Sample.index)
    rows = session.scalars(query.limit(limit).offset(offset)).all()
    total = session.scalar(select(func.count()).select_from(Sample).where(*filters)) or 0
    return schemas.SamplePage(data=[_public(r) for r in rows], count=total)


@router.get("/prompts", response_model=schemas.PromptList)
def list_prompts(
    run_id: RunId,
    principal: Reader,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> schemas.PromptList:
    """Distinct prompts of a run, to pick one and follow its responses across steps."""
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
