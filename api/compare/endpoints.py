from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse

from api.auth.deps import Reader
from api.compare import schemas, service
from api.db import SessionDep

router = APIRouter(prefix="/api/v1/compare", tags=["compare"])

RUN_IDS = rf"^\d{{1,10}}(,\d{{1,10}}){{0,{schemas.MAX_RUNS - 1}}}$"


@router.get("", response_model=schemas.Comparison)
def compare_runs(
    principal: Reader,
    session: SessionDep,
    runs: Annotated[str, Query(pattern=RUN_IDS, description=f"Up to {schemas.MAX_RUNS} run ids, comma-separated")],
    cursors: Annotated[
        str | None,
        Query(
            max_length=4096,
            description="RUN:CURSOR,... with each run's keys.cursor from the last answer: only keys that changed "
            "since come back; a run without one gets all its keys",
        ),
    ] = None,
) -> Response:
    """The compared runs' details and metric keys, in one request (Compare's poll); a run that cannot be read
    carries its reason instead of failing the others."""
    ids = [int(run_id) for run_id in runs.split(",")]
    document = service.compare(session, principal, ids, service.parse_cursors(cursors))
    return Response(document, media_type="application/json")


@router.post("/series", response_model=schemas.RunsColumnsResponse)
def compare_series(body: schemas.SeriesQuery, principal: Reader, session: SessionDep, request: Request) -> StreamingResponse:
    """Several runs' series in columns, each whole (downsampled to max_points) or from after a step: Compare's charts
    ask for every run's keys on screen at once, and a poll only for the points each lacks. A read, sent as POST for
    its length (a cursor per run and key)."""
    service.check_readable(session, principal, body)
    document = service.series_document(request.app.state.sessionmaker, body)
    return StreamingResponse(document, media_type="application/json")
