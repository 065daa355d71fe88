import logging
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response, status

from api.artifacts import ArtifactStore
from api.auth.deps import CurrentPrincipal, Reader, WorkerPrincipal, Writer
from api.auth.service import readable_project
from api.bodies import document_body, located
from api.code import service as code
from api.db import SessionDep, UowDep
from api.executors import slurm
from api.params import Offset, RunId
from api.runs import repository, schemas, scripts, service, views
from rlplane.spec import RunSpec, SpecError, parse_spec
from rlplane.spec.warnings import spec_warnings
from rlplane.wire import Lease

logger = logging.getLogger("rlplane.api")

router = APIRouter(prefix="/api/v1/runs", tags=["runs"])

_SPEC_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The run spec, as JSON or YAML (Content-Type application/yaml)",
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/RunSpec"}},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


@dataclass(frozen=True)
class SubmittedSpec:
    spec: RunSpec
    text: str  # the body as sent: YAML keeps its comments


async def spec_body(request: Request) -> SubmittedSpec:
    data, text = await document_body(request, "spec")
    try:
        return SubmittedSpec(parse_spec(data), text)
    except SpecError as exc:
        raise located(exc) from None


# The principal comes before the body in every signature: FastAPI resolves dependencies in that order, so a
# request without a valid token is answered 401 before its body is read (not 422 for a body it may not send).
@router.post("", status_code=status.HTTP_201_CREATED, response_model=schemas.RunCreated, openapi_extra=_SPEC_BODY)
def create_run(
    principal: Writer, body: Annotated[SubmittedSpec, Depends(spec_body)], session: SessionDep, request: Request
) -> schemas.RunCreated:
    allowed = request.app.state.settings.reward_entrypoints
    code.check_snapshot(request.app.state.artifacts, body.spec)
    _check_executor(request, body.spec)
    run = service.create_run(session, principal, body.spec, allowed, spec_text=body.text)
    return schemas.RunCreated(**views.run_detail(session, run.id, principal).model_dump(), warnings=_warnings(body.spec))


def _check_executor(request: Request, spec: RunSpec) -> None:
    """What the run's queue's executor can know at submit: a Slurm partition that holds it (api/executors/slurm.py)."""
    config = request.app.state.settings.slurm_queues.get(spec.resources.queue)
    if config is not None:
        slurm.check_run(spec, config)


@router.post("/external", status_code=status.HTTP_201_CREATED, response_model=schemas.RunDetail)
def create_scripted_run(principal: Writer, body: schemas.ScriptedRunCreate, session: SessionDep) -> schemas.RunDetail:
    """A run a script starts itself and reports to (the SDK's rlplane.init outside any worker, docs/sdk.md): it is
    running at once, no worker holds it, and the script ends it (POST /status) or is failed once it falls silent
    (RLPLANE_SCRIPT_SILENT_S). `spec` is a run spec of algorithm command (its argv what the script was started with)."""
    document, command = dict(body.spec), body.spec.get("command") or {}
    if isinstance(command, dict):  # anything else is refused by the spec's schema
        document["command"] = {**command, "external": True}
    try:
        spec = parse_spec(document)
    except SpecError as exc:
        raise located(exc, prefix=("body", "spec")) from None
    run = scripts.create(session, principal, spec, body.environment)
    return views.run_detail(session, run.id, principal)


@router.post("/{run_id}/environment", response_model=schemas.RunDetail)
def record_environment(
    run_id: RunId, principal: CurrentPrincipal, environment: dict[str, Any], session: SessionDep
) -> schemas.RunDetail:
    """Where the run runs (interpreter, packages, machine, command line, git), as its script's SDK records it."""
    scripts.record_environment(session, principal, run_id, environment)
    return views.run_detail(session, run_id, principal)


@router.post("/validate", response_model=schemas.SpecCheck, openapi_extra=_SPEC_BODY)
def validate_run(
    principal: Writer, body: Annotated[SubmittedSpec, Depends(spec_body)], session: SessionDep, request: Request
) -> schemas.SpecCheck:
    """Check a spec as a submit would (schema, project, referenced runs, allowed rewards) without creating a run."""
    spec = body.spec
    code.check_snapshot(request.app.state.artifacts, spec)
    _check_executor(request, spec)
    _, parents = service.check_submission(session, principal, spec, request.app.state.settings.reward_entrypoints)
    return schemas.SpecCheck(
        spec=spec.model_dump(mode="json"),
        total_steps=spec.total_steps,
        parents=[views.link_public(ref, parent) for parent, ref in parents],
        warnings=_warnings(spec),
    )


def _warnings(spec: RunSpec) -> list[schemas.SpecWarningPublic]:
    return [schemas.SpecWarningPublic(loc=list(w.loc), msg=w.msg) for w in spec_warnings(spec)]


@router.get("", response_model=schemas.RunList)
def list_runs(
    principal: Reader,
    session: SessionDep,
    project: str | None = None,
    status_: Annotated[list[schemas.Status], Query(alias="status")] = [],  # noqa: B006 - FastAPI copies defaults
    algorithm: Annotated[list[schemas.Algorithm], Query()] = [],  # noqa: B006
    q: Annotated[str | None, Query(max_length=128, description="Substring of the run name")] = None,
    archived: Annotated[bool | None, Query(description="Default: hide archived runs")] = False,
    sort: schemas.RunSort = "-created_at",
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Offset = 0,
) -> schemas.RunList:
    project_id = readable_project(session, principal, project).id if project else None
    query = repository.run_rows(
        project_ids=principal.project_ids(),
        project=project_id,
        status=status_,
        algorithm=algorithm,
        search=q,
        archived=archived,
        sort=sort,
    )
    rows = session.execute(query.limit(limit).offset(offset)).all()
    return schemas.RunList(data=views.run_list_items(session, rows), count=repository.count(session, query))


@router.get("/{run_id}", response_model=schemas.RunDetail)
def read_run(run_id: RunId, principal: Reader, session: SessionDep) -> schemas.RunDetail:
    service.readable_run(session, principal, run_id)
    return views.run_detail(session, run_id, principal)


@router.get("/{run_id}/lineage", response_model=schemas.Lineage)
def read_lineage(run_id: RunId, principal: Reader, session: SessionDep) -> schemas.Lineage:
    service.readable_run(session, principal, run_id)
    return views.lineage(session, run_id, principal)


def _action(name: str, apply):
    def endpoint(run_id: RunId, principal: Writer, session: SessionDep) -> schemas.RunDetail:
        apply(session, principal, run_id)
        return views.run_detail(session, run_id, principal)

    endpoint.__name__ = f"{name}_run"
    return endpoint


for _name, _apply, _doc in (
    ("cancel", service.cancel, "Queued runs end at once; active ones become cancelling until the worker stops them."),
    ("resume", service.resume, "Requeue a failed, cancelled or lost run; it resumes from its latest checkpoint."),
    ("archive", lambda s, p, r: service.set_archived(s, p, r, True), "Hide an ended run from default listings."),
    ("unarchive", lambda s, p, r: service.set_archived(s, p, r, False), "Show an archived run again."),
):
    router.add_api_route(
        f"/{{run_id}}/{_name}",
        _action(_name, _apply),
        methods=["POST"],
        response_model=schemas.RunDetail,
        summary=f"{_name.capitalize()} a run",
        description=_doc,
    )


@router.delete("/{run_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_run(run_id: RunId, principal: Writer, uow: UowDep, request: Request) -> Response:
    """Delete an ended run with no child runs: its records, then (once that is committed) its files
    under the artifact root: checkpoints, the export, logs and metrics files."""
    service.delete(uow.session, principal, run_id)
    store = request.app.state.artifacts
    uow.after_commit(lambda: _remove_files(store, run_id))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def _remove_files(store: ArtifactStore, run_id: int) -> None:
    try:
        store.delete_tree(PurePosixPath(f"runs/{run_id}"))
    except Exception:  # the records are gone already: a file left over costs space, not correctness
        logger.exception("run %d deleted; removing its files under the artifact root failed", run_id)


@router.post("/{run_id}/lease", response_model=Lease)
def lease_run(
    run_id: RunId, body: schemas.LeaseRequest, principal: WorkerPrincipal, session: SessionDep, request: Request
) -> Lease:
    """A worker takes a queued run: the contract's Lease, as the worker reads it (the run's typed spec and where it
    resumes), and its attempt number, the fencing token of every report of the attempt."""
    run, attempt = service.lease(session, principal, run_id, body.worker, request.app.state.settings.lost_after_s)
    leased = views.leased_run(session, run)
    return Lease(run=leased, attempt=attempt.number, resume_from_step=leased.latest_checkpoint_step)


@router.post("/{run_id}/status", response_model=schemas.RunPublic)
def update_status(
    run_id: RunId, body: schemas.StatusUpdate, principal: CurrentPrincipal, session: SessionDep
) -> schemas.RunPublic:
    """The lease holder's word on its attempt; for a run its script started itself (rlplane.init), the script's
    (a project writer's token): running as a keep-alive, then how it ended. Answers the run without its spec,
    attempts or environment (a keep-alive comes every 10 s; GET /runs/{id} has them)."""
    service.update_status(session, principal, run_id, body)
    return views.run_public(*repository.run_row(session, run_id))
