from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import Field, TypeAdapter
from sqlalchemy.orm import Session

from api.auth.deps import Reader
from api.db import SessionDep
from api.inserts import IngestResult
from api.metrics import schemas, service
from api.params import RunId, StepQuery
from api.reporting import in_one_hop, json_body, parse
from api.runs.service import readable_run
from rlplane.limits import MAX_ROWS
from rlplane.rows import MetricRow

router = APIRouter(prefix="/api/v1/runs/{run_id}/metrics", tags=["metrics"])

MAX_BATCH = MAX_ROWS["metrics"]


_POINTS = TypeAdapter(Annotated[list[MetricRow], Field(max_length=MAX_BATCH)])


@router.post("", response_model=IngestResult, openapi_extra=json_body(_POINTS, f"Up to {MAX_BATCH} points"))
async def ingest_metrics(run_id: RunId, request: Request) -> IngestResult:
    """Store points; a replayed batch neither duplicates nor changes a stored point."""
    return await in_one_hop(request, lambda session, who, raw: service.ingest(session, who, run_id, parse(_POINTS, raw)))


_COUNT_HEADER = {
    "X-Series-Count": {
        "description": "How many series the body holds: a client can drop a big answer on its headers",
        "schema": {"type": "integer"},
    }
}


Keys = Annotated[list[str], Query(max_length=100, description="Keys to return; default: all")]
MaxPoints = Annotated[int, Query(ge=2, le=20_000)]


@dataclass(frozen=True)
class SeriesQuery:
    """What both history routes take: which run and keys, how many points, which steps; checked readable."""

    run_id: int
    keys: list[str]
    window: tuple[int, int | None, int | None]  # max_points, step_min, step_max


def _series_query(
    run_id: RunId,
    principal: Reader,
    session: SessionDep,
    keys: Keys = [],  # noqa: B006 - FastAPI copies defaults
    max_points: MaxPoints = 1000,
    step_min: StepQuery = None,
    step_max: StepQuery = None,
) -> SeriesQuery:
    readable_run(session, principal, run_id)
    return SeriesQuery(run_id, keys, (max_points, step_min, step_max))


SeriesQueryDep = Annotated[SeriesQuery, Depends(_series_query)]


def _stream(request: Request, session: Session, query: SeriesQuery, *, columns: bool) -> StreamingResponse:
    """The series written one by one, their count in a header (a client may hang up on it)."""
    wanted = query.keys or [k.key for k in service.key_summaries(session, query.run_id)]
    document = service.series_document(request.app.state.sessionmaker, query.run_id, wanted, *query.window, columns=columns)
    return StreamingResponse(document, media_type="application/json", headers={"X-Series-Count": str(len(wanted))})


@router.get("", response_model=schemas.SeriesResponse, responses={200: {"headers": _COUNT_HEADER}})
def read_metrics(query: SeriesQueryDep, session: SessionDep, request: Request) -> StreamingResponse:
    return _stream(request, session, query, columns=False)


@router.get("/columns", response_model=schemas.ColumnsResponse, responses={200: {"headers": _COUNT_HEADER}})
def read_metric_columns(query: SeriesQueryDep, session: SessionDep, request: Request) -> StreamingResponse:
    """The same series as `GET /metrics`, one list per field: half the bytes and the server's work (the dashboard's charts)."""
    return _stream(request, session, query, columns=True)


@router.get("/keys", response_model=schemas.KeyList)
def list_keys(run_id: RunId, principal: Reader, session: SessionDep) -> schemas.KeyList:
    readable_run(session, principal, run_id)
    keys = service.key_summaries(session, run_id)
    return schemas.KeyList(data=keys, count=len(keys))
