from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from pydantic import Field, TypeAdapter
from sqlalchemy.orm import Session

from api.auth.deps import Reader
from api.auth.principal import Principal
from api.db import SessionDep
from api.inserts import IngestResult
from api.params import Offset, RunId, StepQuery
from api.reporting import in_one_hop, json_body, parse
from api.runs.service import claim_for_report
from api.samples import compare, schemas, service
from rlplane.limits import MAX_ROWS
from rlplane.rows import SampleRow

router = APIRouter(prefix="/api/v1/runs/{run_id}/samples", tags=["samples"])


_SAMPLES = TypeAdapter(Annotated[list[SampleRow], Field(max_length=MAX_ROWS["samples"])])


@router.post("", response_model=IngestResult, openapi_extra=json_body(_SAMPLES, "Up to 5,000 samples"))
async def add_samples(run_id: RunId, request: Request) -> IngestResult:
    """Store generations; a re-sent (step, index) is stored once."""

    def add(session: Session, principal: Principal, raw: bytes) -> IngestResult:
        claim_for_report(session, principal, run_id)  # first: one who may not report hears so, whatever the body
        return service.store(session, run_id, parse(_SAMPLES, raw))

    return await in_one_hop(request, add)


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
    return service.read(
        session,
        principal,
        run_id,
        step=step,
        step_min=step_min,
        step_max=step_max,
        prompt=prompt_hash_,
        sort=sort,
        limit=limit,
        offset=offset,
    )


@router.get("/prompts", response_model=schemas.PromptList)
def list_prompts(
    run_id: RunId,
    principal: Reader,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
) -> schemas.PromptList:
    """Distinct prompts of a run, to pick one and follow its responses across steps."""
    return service.prompts(session, principal, run_id, limit=limit, offset=offset)


across = APIRouter(prefix="/api/v1/samples", tags=["samples"])


@across.get("", response_model=schemas.SampleComparison)
def compare_samples(
    principal: Reader,
    session: SessionDep,
    runs: Annotated[str, Query(pattern=r"^\d{1,10}(,\d{1,10}){0,19}$", description="Up to 20 run ids, comma-separated")],
    at: Annotated[
        schemas.SampleAt,
        Query(
            description="latest: each run's last sample step; step: its last at or before `step`; best: its best "
            "checkpoint by `metric`; all: every step (with prompt_hash: one prompt across runs and steps)"
        ),
    ] = "latest",
    step: StepQuery = None,
    metric: Annotated[str | None, Query(max_length=256, description="With at=best: e.g. eval/accuracy")] = None,
    mode: Annotated[Literal["max", "min"], Query(description="With at=best: which end of the metric is best")] = "max",
    prompt_hash_: Annotated[str | None, Query(alias="prompt_hash", pattern=r"^[0-9a-f]{1,64}$")] = None,
    reward_below: Annotated[float | None, Query(description="Only answers whose reward is below this")] = None,
    truncated: Annotated[bool, Query(description="Only answers that ran out of tokens")] = False,
    failed: Annotated[
        str | None, Query(max_length=256, description="Only answers where this score (a reward component) is <= 0")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="Prompts at most")] = 50,
) -> schemas.SampleComparison:
    """The same prompts side by side across runs, in one request (Compare's Samples tab)."""
    return compare.compare(
        session,
        principal,
        [int(run_id) for run_id in runs.split(",")],
        at=at,
        step=step,
        metric=metric,
        mode=mode,
        prompt=prompt_hash_,
        reward_below=reward_below,
        truncated=truncated,
        failed=failed,
        limit=limit,
    )
