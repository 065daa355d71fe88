"""The FastAPI application factory."""

from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from api import dashboard, docs_ui, errors, health, prometheus
from api.alerts import endpoints as alerts
from api.artifacts import ArtifactStore
from api.auth import endpoints as auth
from api.auth.cache import TokenCache
from api.checkpoints import endpoints as checkpoints
from api.code import endpoints as code
from api.compare import endpoints as compare
from api.datasets import endpoints as datasets
from api.db import make_engine, make_sessionmaker
from api.events import endpoints as events
from api.limits import BodyLimitMiddleware
from api.logs import endpoints as logs
from api.metrics import endpoints as metrics
from api.pipelines import endpoints as pipelines
from api.queues import endpoints as queues
from api.reconcile import Reconciler, make_sender
from api.reports import endpoints as reports
from api.runs import endpoints as runs
from api.runs import node_endpoints as nodes
from api.samples import endpoints as samples
from api.samples.endpoints import across as samples_across
from api.settings import Settings
from api.sweeps import endpoints as sweeps
from api.usage import endpoints as usage
from api.workers import endpoints as workers
from rlplane.logformat import configure_logging
from rlplane.spec import RunSpec

OPENAPI_URL = "/api/v1/openapi.json"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    configure_logging(settings.log_format)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        reconciler = None
        if settings.dispatch:
            reconciler = Reconciler(
                app.state.sessionmaker,
                make_sender(settings.resolved_broker_url),
                reconcile_s=settings.reconcile_s,
                redispatch_s=settings.redispatch_s,
                lost_after_s=settings.lost_after_s,
                script_silent_s=settings.script_silent_s,
                reward_entrypoints=settings.reward_entrypoints,
                alert_s=settings.alert_s,
                forget_workers_after_s=settings.forget_workers_after_s,
                preempt_after_s=settings.preempt_after_s,
                slurm_queues=settings.slurm_queues,
                broker_url=settings.resolved_broker_url,
                artifacts=settings.resolved_artifacts,
            )
            reconciler.start()
        app.state.reconciler = reconciler
        yield
        if reconciler is not None:
            reconciler.stop()
        app.state.engine.dispose()

    app = FastAPI(
        title="rlplane",
        version="0.1.0",
        openapi_url=OPENAPI_URL,
        docs_url=None,  # docs_ui.py serves it without a CDN
        redoc_url=None,
        lifespan=lifespan,
        description="Control plane for LLM post-training runs. Authenticate with `Authorization: Bearer <token>`.",
    )
    app.state.settings = settings
    app.state.engine = make_engine(settings.resolved_database_url)
    app.state.sessionmaker = make_sessionmaker(app.state.engine)
    app.state.artifacts = ArtifactStore(settings.resolved_artifacts)
    app.state.token_cache = TokenCache(settings.auth_cache_s)
    app.add_middleware(
        BodyLimitMiddleware,
        default_limit=settings.max_body_bytes,
        upload_limit=settings.max_upload_bytes,
        upload_paths=(datasets.UPLOAD_PATH, code.UPLOAD_PATH, checkpoints.FILE_UPLOAD_PATH),
    )
    for module in (
        health,
        auth,
        runs,
        nodes,
        metrics,
        logs,
        samples,
        compare,
        reports,
        checkpoints,
        code,
        datasets,
        workers,
        queues,
        usage,
        events,
        pipelines,
        alerts,
        sweeps,
    ):
        app.include_router(module.router)
    app.include_router(samples_across)  # GET /api/v1/samples: several runs' samples in one view
    docs_ui.install(app, OPENAPI_URL)
    prometheus.install(app)  # GET /metrics (read scope) and the request counters, outermost middleware
    errors.install(app)
    dashboard.install(app, settings.frontend_dir or dashboard.default_directory())
    app.openapi = lambda: _openapi(app)
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document plus the run spec schema (the spec body is parsed by hand to accept YAML) and bearer auth."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {})
    spec_schema = RunSpec.model_json_schema(ref_template="#/components/schemas/{model}")
    components.setdefault("schemas", {}).update(spec_schema.pop("$defs", {}))
    components["schemas"]["RunSpec"] = spec_schema
    components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    for operations in schema["paths"].values():
        for operation in operations.values():
            # Bodies parsed by hand (api/reporting.py) bring their own definitions along.
            components["schemas"].update(operation.pop("x-components", {}))
    for path, operations in schema["paths"].items():
        if path in ("/healthz", "/readyz"):
            continue
        for operation in operations.values():
            operation["security"] = [{"bearer": []}]
            operation.setdefault("responses", {}).update(
                {
                    "401": {"description": "Missing, invalid, expired or revoked token"},
                    "403": {"description": "Outside the caller's projects or scopes"},
                }
            )
    app.openapi_schema = schema
    return schema
