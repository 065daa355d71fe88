import re
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response, status
from fastapi.responses import FileResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from api.artifacts import ArtifactStore
from api.auth.deps import CurrentPrincipal, Reader, Writer
from api.checkpoints import schemas, service
from api.checkpoints.archive import tar_stream
from api.db import SessionDep
from api.models import Checkpoint
from api.params import RunId, StepPath
from api.runs import scripts
from api.unit_of_work import transaction

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


# A scripted run's checkpoint files (api/runs/scripts.py): large, so under the upload limit, not the JSON one.
FILE_UPLOAD_PATH = re.compile(r"^/api/v1/runs/[0-9]+/checkpoints/[0-9]+/files/.+$")


@router.put("/{step}/files/{file_path:path}", status_code=status.HTTP_201_CREATED, response_model=schemas.CheckpointFile)
async def upload_checkpoint_file(
    run_id: RunId, step: StepPath, file_path: str, principal: Writer, request: Request
) -> schemas.CheckpointFile:
    """One file of a checkpoint of a run its script started itself (the SDK's log_checkpoint outside a worker): the
    body is the file's bytes. Upload every file, manifest.json last, then register the checkpoint (POST)."""
    with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as spool:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            spool.write(chunk)
        spool.seek(0)

        def save() -> None:
            with transaction(request.app.state.sessionmaker) as uow:
                scripts.save_checkpoint_file(uow.session, principal, _store(request), run_id, step, file_path, spool)

        await run_in_threadpool(save)
    return schemas.CheckpointFile(name=file_path, size=size)
