from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from api.auth.deps import Reader
from api.db import SessionDep
from api.usage import schemas, service

router = APIRouter(prefix="/api/v1/usage", tags=["usage"])


@router.get("", response_model=schemas.UsageReport, responses={200: {"content": {"text/csv": {}}}})
def usage(
    principal: Reader,
    session: SessionDep,
    since: Annotated[datetime | None, Query(description="Start of the period (default: 7 days before until)")] = None,
    until: Annotated[datetime | None, Query(description="End of the period (default: now)")] = None,
    by: Annotated[schemas.GroupBy, Query(description="Roll up by project, user, queue or run")] = "project",
    interval: Annotated[Literal["hour", "day"] | None, Query(description="Also per hour or day, for a chart")] = None,
    format: Annotated[Literal["json", "csv"], Query(description="csv: one line per row and interval")] = "json",
):
    """GPU-seconds (GPUs x wall time of each attempt, start to end) and, for CPU runs, worker-slot-seconds, within the
    period, of the runs you may read."""
    report = service.report(session, principal, since, until, by, interval)
    if format == "csv":
        return Response(service.as_csv(report), media_type="text/csv")
    return report
