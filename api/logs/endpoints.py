from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import Field, TypeAdapter
from sqlalchemy.orm import Session

from api.auth.deps import Reader
from api.auth.principal import Principal
from api.db import SessionDep
from api.inserts import IngestResult
from api.logs import schemas, service
from api.params import Offset, RunId
from api.reporting import in_one_hop, json_body, parse
from api.runs.service import claim_for_report
from rlplane.limits import MAX_ROWS
from rlplane.rows import LogRow

router = APIRouter(prefix="/api/v1/runs/{run_id}/logs", tags=["logs"])


_LINES = TypeAdapter(Annotated[list[LogRow], Field(max_length=MAX_ROWS["logs"])])


@router.post("", response_model=IngestResult, openapi_extra=json_body(_LINES, "Up to 10,000 lines"))
async def append_logs(run_id: RunId, request: Request) -> IngestResult:
    """Append lines; a re-sent (attempt, rank, seq) is stored once."""

    def append(session: Session, principal: Principal, raw: bytes) -> IngestResult:
        claim_for_report(session, principal, run_id)  # first: one who may not report hears so, whatever the body
        return service.store(session, run_id, parse(_LINES, raw))

    return await in_one_hop(request, append)


@router.get("", response_model=schemas.LogPage)
def read_logs(
    run_id: RunId,
    principal: Reader,
    session: SessionDep,
    offset: Annotated[Offset, Query(description="Return lines after this id")] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    tail: Annotated[int | None, Query(ge=1, le=10_000, description="Only the last N lines (ignores offset)")] = None,
    rank: Annotated[int | None, Query(ge=0, le=100_000)] = None,
    q: Annotated[str | None, Query(max_length=256, description="Case-insensitive substring")] = None,
    node: Annotated[int | None, Query(ge=0, le=1024, description="Only the lines of this node's ranks")] = None,
) -> schemas.LogPage:
    return service.read(session, principal, run_id, offset=offset, limit=limit, tail=tail, rank=rank, q=q, node=node)
