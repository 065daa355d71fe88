from fastapi import APIRouter, Request
from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.logs import service as logs
from api.metrics import service as metrics
from api.params import RunId
from api.reporting import in_one_hop, json_body, parse
from api.reports.schemas import ReportResult
from api.runs.service import claim_for_report
from api.samples import service as samples
from rlplane.rows import Report

router = APIRouter(prefix="/api/v1/runs/{run_id}/reports", tags=["metrics"])

_REPORT = TypeAdapter(Report)


@router.post(
    "",
    response_model=ReportResult,
    openapi_extra=json_body(_REPORT, "Metrics, samples and log lines, each list as its own endpoint takes it"),
)
async def ingest_report(run_id: RunId, request: Request) -> ReportResult:
    """Store what the metrics, samples and logs endpoints store, in one request and one transaction (a
    worker's forwarder sends this once per tick: per-request work is most of the API's cost). Idempotent."""

    def ingest(session: Session, principal: Principal, raw: bytes) -> ReportResult:
        report = parse(_REPORT, raw)
        claim_for_report(session, principal, run_id, metrics.top_step(report.metrics))
        return ReportResult(
            metrics=metrics.store(session, run_id, report.metrics),
            samples=samples.store(session, run_id, report.samples),
            logs=logs.store(session, run_id, report.logs),
        )

    return await in_one_hop(request, ingest)
