from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, status

from api.auth.deps import Reader, Writer
from api.bodies import document_body, document_openapi, located
from api.code import service as code
from api.db import SessionDep
from api.pipelines import schemas, service, views
from rlplane.pipeline import PipelineDoc, dependencies, load_pipeline
from rlplane.spec import SpecError

router = APIRouter(prefix="/api/v1/pipelines", tags=["pipelines"])

_DOCUMENT_BODY = document_openapi(
    "The pipeline document ({name, project, stages: {<name>: {spec, needs, when, best}}}), as JSON or YAML"
)


async def pipeline_body(request: Request) -> PipelineDoc:
    data, _ = await document_body(request, "pipeline")
    try:
        return load_pipeline(data)
    except SpecError as exc:
        raise located(exc) from None


@router.post("", status_code=status.HTTP_201_CREATED, response_model=schemas.PipelineDetail, openapi_extra=_DOCUMENT_BODY)
def create_pipeline(
    principal: Writer, body: Annotated[PipelineDoc, Depends(pipeline_body)], session: SessionDep, request: Request
) -> schemas.PipelineDetail:
    """Validate the whole pipeline (every stage's spec, references, gates, no cycles) and start the stages that need
    nothing; the rest start as the reconciler finds their inputs."""
    _snapshots_uploaded(request, body)
    pipeline = service.submit(session, principal, body, request.app.state.settings.reward_entrypoints)
    session.flush()
    return views.detail(session, pipeline)


def _snapshots_uploaded(request: Request, body: PipelineDoc) -> None:
    for name, stage in body.stages.items():
        code.check_snapshot(request.app.state.artifacts, stage.spec, ("body", "stages", name, "spec"))


@router.post("/validate", response_model=schemas.PipelineCheck, openapi_extra=_DOCUMENT_BODY)
def validate_pipeline(
    principal: Writer, body: Annotated[PipelineDoc, Depends(pipeline_body)], session: SessionDep, request: Request
) -> schemas.PipelineCheck:
    """Check a pipeline as a submit would (every stage, references, gates, cycles, project and write access,
    allowed rewards, datasets) without storing it: the New run page calls it as you type."""
    _snapshots_uploaded(request, body)
    service.check_submission(session, principal, body, request.app.state.settings.reward_entrypoints)
    return schemas.PipelineCheck(stages=[schemas.StageNeeds(name=n, needs=needs) for n, needs in dependencies(body).items()])


@router.get("", response_model=schemas.PipelineList)
def list_pipelines(
    principal: Reader,
    session: SessionDep,
    project: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> schemas.PipelineList:
    return views.listing(session, principal.project_ids(), project, limit)


@router.get("/{pipeline_id}", response_model=schemas.PipelineDetail)
def get_pipeline(principal: Reader, pipeline_id: int, session: SessionDep) -> schemas.PipelineDetail:
    return views.detail(session, service.readable(session, principal, pipeline_id))


@router.post("/{pipeline_id}/cancel", response_model=schemas.PipelineDetail)
def cancel_pipeline(principal: Writer, pipeline_id: int, session: SessionDep) -> schemas.PipelineDetail:
    pipeline = service.cancel(session, principal, pipeline_id)
    session.flush()
    return views.detail(session, pipeline)


@router.post("/{pipeline_id}/stages/{name}/retry", response_model=schemas.PipelineDetail)
def retry_stage(
    principal: Writer, pipeline_id: int, name: str, body: schemas.StageRetry, session: SessionDep, request: Request
) -> schemas.PipelineDetail:
    """Run a stage again, from a new spec if one is given; stages downstream that had run become stale."""
    allowed = request.app.state.settings.reward_entrypoints
    pipeline = service.retry(session, principal, pipeline_id, name, body.spec, allowed)
    session.flush()
    return views.detail(session, pipeline)
