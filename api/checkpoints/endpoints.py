from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response, status
from fastapi.responses import FileResponse, StreamingResponse

from api.artifacts import ArtifactStore
from api.auth.deps import CurrentPrincipal, Reader
from api.checkpoints import schemas, service
from api.checkpoints.archive import tar_stream
from api.db import SessionDep
from api.models import Checkpoint
from api.values import RunId, StepPath

router = APIRouter(prefix="/api/v1/runs/{run_id}/checkpoints", tags=["checkpoints"])


def _store(request: Request) -> ArtifactStore:
    return request.app.state.artifacts


@router.post(
    "",
    response_model=schemas.CheckpointPublic,
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": schemas.CheckpointPublic, "description": "Already registered, identical"}},
)
def register_checkpoint(
    run_id: RunId,
    body: schemas.CheckpointCreate,
    principal: CurrentPrincipal,
    session: SessionDep,
    request: Request,
    response: Response,
) -> schemas.CheckpointPublic:
    ckpt, created = service.register(session, principal, _store(request), run_id, body)
    if not created:
        response.status_code = status.HTTP_200_OK
    return service.public(ckpt)


@router.get("", response_model=schemas.CheckpointList)
def list_checkpoints(run_id: RunId, principal: Reader, session: SessionDep) -> schemas.CheckpointList:
    return service.list_checkpoints(session, principal, run_id)


KindQuery = Annotated[schemas.CheckpointKind, Query(description="checkpoint (default) or export: the final model")]


def _checkpoint(
    run_id: RunId, step: StepPath, principal: Reader, session: SessionDep, kind: KindQuery = "checkpoint"
) -> Checkpoint:
    """The checkpoint (or export) a /{step}/... route names, readable by the caller."""
    return service.readable_checkpoint(session, principal, run_id, step, kind)


CheckpointDep = Annotated[Checkpoint, Depends(_checkpoint)]


@router.get("/{step}/files", response_model=schemas.CheckpointFileList)
def list_checkpoint_files(ckpt: CheckpointDep, request: Request) -> schemas.CheckpointFileList:
    files = [schemas.CheckpointFile(name=n, size=s) for n, s in service.files(_store(request), ckpt)]
    return schemas.CheckpointFileList(data=files, count=len(files))


@router.get(
    "/{step}/files/{file_path:path}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "The file's bytes"}},
)
def download_checkpoint_file(ckpt: CheckpointDep, file_path: str, request: Request) -> Response:
    found = service.file_to_send(_store(request), ckpt, file_path)
    if isinstance(found, Path):
        return FileResponse(found, filename=found.name)
    return StreamingResponse(found, media_type="application/octet-stream")


@router.get(
    "/{step}/archive",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-tar": {}}, "description": "Every file of the checkpoint, as one tar"}},
)
def download_checkpoint_archive(ckpt: CheckpointDep, request: Request) -> StreamingResponse:
    """The whole checkpoint (or export) as one uncompressed tar, streamed: what `rlplane download` fetches file by file."""
    entries = service.archive_entries(_store(request), ckpt)
    top = f"run-{ckpt.run_id}-{ckpt.kind}-step-{ckpt.step}"
    headers = {"Content-Disposition": f'attachment; filename="{top}.tar"'}
    return StreamingResponse(tar_stream(top, entries), media_type="application/x-tar", headers=headers)
