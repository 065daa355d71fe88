import re
import tempfile
from pathlib import Path, PurePosixPath
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request, Response, status
from fastapi.responses import FileResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from api.artifacts import ArtifactStore
from api.auth.deps import CurrentPrincipal, Reader, Writer, get_principal, principal_of_token, require_scope
from api.checkpoints import downloads, schemas, service
from api.checkpoints.archive import file_chunks, tar_archive
from api.db import SessionDep
from api.exceptions import Forbidden, Unauthorized
from api.models import Checkpoint
from api.params import RunId, StepPath
from api.runs import scripts
from api.signed_urls import signing_key
from api.unit_of_work import transaction
from rlplane.wire import INT32_MAX, STEP_MAX

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


ExpiresQuery = Annotated[int | None, Query(ge=0, le=STEP_MAX, description="A signed link's expiry (Unix seconds)")]
TokenIdQuery = Annotated[int | None, Query(ge=1, le=INT32_MAX, description="The id of the token a signed link was made with")]
SigQuery = Annotated[
    str | None, Query(max_length=128, description="A signed link's signature (POST .../download-url); with it, no bearer token")
]


def _downloadable(
    run_id: RunId,
    step: StepPath,
    request: Request,
    session: SessionDep,
    kind: KindQuery = "checkpoint",
    expires: ExpiresQuery = None,
    token_id: TokenIdQuery = None,
    sig: SigQuery = None,
) -> Checkpoint:
    """The checkpoint a download names, for a bearer token that may read it, or a signed link (whose token must still
    be valid and still read it)."""
    if sig is None:
        principal = require_scope("read")(get_principal(request, session))
    else:
        if expires is None or token_id is None:
            raise Forbidden("a signed download link needs expires, token_id and sig: use the url POST .../download-url answers")
        file = request.path_params.get("file_path")
        key = signing_key(request.app.state.settings)
        downloads.check_link(session, key, run_id, step, kind, file, expires, token_id, sig)
        try:
            principal = require_scope("read")(principal_of_token(session, token_id))
        except Unauthorized as exc:
            raise downloads.token_refused(run_id, step, exc.detail) from None
    return service.readable_checkpoint(session, principal, run_id, step, kind)


DownloadableDep = Annotated[Checkpoint, Depends(_downloadable)]
# The signed query is the credential: no cache keeps a response under it.
_NO_STORE = {"Cache-Control": "private, no-store"}


def _attachment(name: str) -> str:
    quoted = quote(name)
    return f"attachment; filename*=utf-8''{quoted}" if quoted != name else f'attachment; filename="{name}"'


@router.post(
    "/{step}/download-url",
    response_model=schemas.DownloadUrl,
    summary="A short-lived signed link to download the checkpoint's tar or one file, without the bearer token",
    responses={404: {"description": "No such run, checkpoint or file"}},
)
def create_download_url(
    run_id: RunId,
    step: StepPath,
    principal: Reader,
    session: SessionDep,
    request: Request,
    kind: KindQuery = "checkpoint",
    body: schemas.DownloadUrlCreate | None = None,
) -> schemas.DownloadUrl:
    """For a browser's own download manager (it streams to disk; a fetch with the token would hold the file in the
    page). Valid for RLPLANE_DOWNLOAD_URL_TTL_S seconds, and only while this token may read the run."""
    settings = request.app.state.settings
    key, ttl_s, file = signing_key(settings), settings.download_url_ttl_s, body.file if body else None
    return downloads.mint(session, principal, _store(request), key, ttl_s, run_id, step, kind, file)


@router.get(
    "/{step}/files/{file_path:path}",
    response_class=Response,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The file's bytes"},
        403: {"description": "A signed link that expired, was altered, or whose token may no longer read the run"},
    },
)
def download_checkpoint_file(ckpt: DownloadableDep, file_path: str, request: Request) -> Response:
    """One file, with the bearer token or a signed link (POST .../download-url with `file`)."""
    found = service.file_to_send(_store(request), ckpt, file_path)
    name = PurePosixPath(file_path).name
    if isinstance(found, Path):
        return FileResponse(found, filename=name, headers=_NO_STORE)
    handle, size = found
    headers = {"Content-Length": str(size), "Content-Disposition": _attachment(name), **_NO_STORE}
    return StreamingResponse(file_chunks(handle), media_type="application/octet-stream", headers=headers)


@router.get(
    "/{step}/archive",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/x-tar": {}}, "description": "Every file of the checkpoint, as one tar"},
        403: {"description": "A signed link that expired, was altered, or whose token may no longer read the run"},
    },
)
def download_checkpoint_archive(ckpt: DownloadableDep, request: Request) -> StreamingResponse:
    """The whole checkpoint (or export) as one uncompressed tar, streamed, with its length: what `rlplane download`
    fetches file by file. With the bearer token or a signed link (POST .../download-url)."""
    entries = service.archive_entries(_store(request), ckpt)
    top = f"run-{ckpt.run_id}-{ckpt.kind}-step-{ckpt.step}"
    length, chunks = tar_archive(top, entries)
    headers = {"Content-Disposition": f'attachment; filename="{top}.tar"', "Content-Length": str(length), **_NO_STORE}
    return StreamingResponse(chunks, media_type="application/x-tar", headers=headers)


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
