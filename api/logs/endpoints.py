import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import Field, TypeAdapter
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth.deps import Reader
from api.auth.principal import Principal
from api.db import SessionDep
from api.inserts import IngestResult, ingest_rows
from api.logs import schemas
from api.models import LogLine
from api.reporting import in_one_hop, json_body, parse
from api.runs.service import claim_for_report, readable_run
from api.values import Offset, RunId, without_nul
from rlplane.limits import MAX_ROWS

router = APIRouter(prefix="/api/v1/runs/{run_id}/logs", tags=["logs"])


_LINES = TypeAdapter(Annotated[list[schemas.LogLineIn], Field(max_length=MAX_ROWS["logs"])])


@router.post("", response_model=IngestResult, openapi_extra=json_body(_LINES, "Up to 10,000 lines"))
async def append_logs(run_id: RunId, request: Request) -> IngestResult:
    """Append lines; a re-sent (attempt, rank, seq) is stored once."""

    def append(session: Session, principal: Principal, raw: bytes) -> IngestResult:
        claim_for_report(session, principal, run_id)
        return store(session, run_id, parse(_LINES, raw))

    return await in_one_hop(request, append)


def store(session: Session, run_id: int, lines: list[schemas.LogLineIn]) -> IngestResult:
    """Insert lines; the caller has claimed the run (claim_for_report)."""
    now = time.time()
    rows = [{**line.model_dump(), "run_id": run_id, "time": line.time or now} for line in lines]
    return ingest_rows(session, LogLine, rows, ["run_id", "attempt", "rank", "seq"])


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
) -> schemas.LogPage:
    readable_run(session, principal, run_id)
    query = select(LogLine).where(LogLine.run_id == run_id)
    if rank is not None:
        query = query.where(LogLine.rank == rank)
    if q:
        escaped = without_nul(q).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(LogLine.text.ilike(f"%{escaped}%", escape="\\"))
    if tail is not None:
        lines = list(reversed(session.scalars(query.order_by(LogLine.id.desc()).limit(tail)).all()))
    else:
        lines = list(session.scalars(query.where(LogLine.id > offset).order_by(LogLine.id).limit(limit)))
    data = [schemas.LogLineOut.model_validate(line, from_attributes=True) for line in lines]
    return schemas.LogPage(data=data, next_offset=data[-1].id if data else offset)
