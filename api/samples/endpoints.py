from typing import Annotated

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
from api.samples import schemas, service
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
