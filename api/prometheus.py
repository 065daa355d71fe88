"""Operational metrics of an API process in Prometheus's text format: GET /metrics, with a site admin's
token that has the read scope (the same port as the API; see docs/deploy.md for the scrape config).

    rlplane_http_requests_total{method,route,status}       requests, by route template (not raw path)
    rlplane_http_request_duration_seconds{method,route}    latency histogram
    rlplane_ingested_total{kind}                           metric points, log lines, samples stored (rate() = ingest rate)
    rlplane_queue_depth{queue}                             queued runs per resources.queue (database, at scrape)
    rlplane_runs{status}                                   runs by status (database, at scrape)
    rlplane_usage_seconds_total{project,queue,unit}        GPU-seconds (unit gpu) or worker-slot-seconds (unit
                                                           cpu_slot) of every attempt so far (database, at scrape)

Not to be confused with api/metrics/, the training metrics runs report. Each app has its own
registry, so several apps in one process (tests) never collide. Counters are per API process: with
`rlplane api --workers N` a scrape sees one process; in a cluster scale replicas and scrape each pod.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4 as CONTENT_TYPE
from prometheus_client.registry import Collector
from pydantic import BaseModel
from sqlalchemy import func, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth.deps import Reader
from api.exceptions import Forbidden
from api.inserts import IngestResult
from api.models import Project, Run
from api.models.base import utcnow
from api.usage.service import slot_seconds
from rlplane.status import STATUSES

router = APIRouter(tags=["operations"])
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ApiMetrics:
    def __init__(self, sessionmaker) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "rlplane_http_requests", "HTTP requests answered", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "rlplane_http_request_duration_seconds",
            "Time to answer an HTTP request (until the response starts; streams excluded)",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.ingested = Counter(
            "rlplane_ingested", "Rows stored by the reporting endpoints (metric points, log lines, samples)", ["kind"],
            registry=self.registry,
        )  # fmt: skip
        self.registry.register(_RunsCollector(sessionmaker))


class _RunsCollector(Collector):
    """Queue depth and runs by status, counted in the database when scraped (so every replica agrees)."""

    def __init__(self, sessionmaker) -> None:
        self.sessionmaker = sessionmaker

    def describe(self) -> list:
        return []  # the families are produced at scrape time only

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self.sessionmaker() as session:
            by_status = dict(session.execute(select(Run.status, func.count()).group_by(Run.status)).all())
            queued = session.execute(select(Run.queue, func.count()).where(Run.status == "queued").group_by(Run.queue)).all()
        runs = GaugeMetricFamily("rlplane_runs", "Runs by status", labels=["status"])
        for status in STATUSES:
            runs.add_metric([status], by_status.get(status, 0))
        depth = GaugeMetricFamily("rlplane_queue_depth", "Queued runs waiting for a worker, per queue", labels=["queue"])
        for queue, count in sorted(queued):
            depth.add_metric([queue], count)
        yield runs
        yield depth
        yield self._usage()

    def _usage(self) -> CounterMetricFamily:
        """Every attempt's cost so far: a counter (it only grows while attempts run), by project and queue."""
        with self.sessionmaker() as session:
            names = dict(session.execute(select(Project.id, Project.name)).all())
            used = slot_seconds(session, EPOCH, utcnow())
        family = CounterMetricFamily(
            "rlplane_usage_seconds", "GPU-seconds, or worker-slot-seconds on CPU queues, of all attempts",
            labels=["project", "queue", "unit"],
        )  # fmt: skip
        for (project_id, queue, unit), seconds in sorted(used.items()):
            family.add_metric([names.get(project_id, str(project_id)), queue, unit], seconds)
        return family


class PrometheusMiddleware:
    """Counts and times every HTTP request by its route template (/api/v1/runs/{run_id}), not its path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), 500

        async def send_and_time(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                metrics: ApiMetrics = scope["app"].state.prometheus
                metrics.latency.labels(scope["method"], _route(scope)).observe(time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, send_and_time)
        finally:
            scope["app"].state.prometheus.requests.labels(scope["method"], _route(scope), str(status)).inc()


def _route(scope: Scope) -> str:
    route = scope.get("route")
    return getattr(route, "path", None) or "unmatched"  # unmatched: the dashboard's pages, files and 404s


def record_ingest(request: Request, result: BaseModel) -> None:
    """Called by the reporting hot path after its commit: /api/v1/runs/{id}/metrics|logs|samples, or
    /reports, whose result holds one IngestResult per kind."""
    if isinstance(result, IngestResult):
        results = {request.url.path.rstrip("/").rsplit("/", 1)[-1]: result}
    else:
        results = {kind: part for kind, part in result if isinstance(part, IngestResult)}
    for kind, part in results.items():
        request.app.state.prometheus.ingested.labels(kind).inc(part.accepted)


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE: {}}}})
def metrics(request: Request, principal: Reader) -> Response:
    """Operational metrics in Prometheus's text format: a site admin's token with the read scope (the
    figures span every project), e.g. `rlplane tokens create --name prometheus --scope read`."""
    if not principal.is_site_admin:
        raise Forbidden("the operational metrics span every project: scrape with a site admin's token (read scope suffices)")
    return Response(generate_latest(request.app.state.prometheus.registry), media_type=CONTENT_TYPE)


def install(app: FastAPI) -> None:
    app.state.prometheus = ApiMetrics(app.state.sessionmaker)
    app.add_middleware(PrometheusMiddleware)
    app.include_router(router)
