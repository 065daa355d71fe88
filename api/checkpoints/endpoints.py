import json
from collections.abc import Iterator
from functools import partial
from pathlib import PurePosixPath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response, status
from fastapi.responses import FileResponse, StreamingResponse
from sqlalchemy import delete, select

from api.artifacts import ArtifactStore, UnsafePath, safe_relative
from api.auth.deps import CurrentPrincipal, Reader
from api.checkpoints import schemas
from api.checkpoints.archive import tar_stream
from api.db import SessionDep
from api.exceptions import BadRequest, Conflict, NotFound, Unprocessable
from api.models import Checkpoint, Run
from api.runs.service import claim_for_report, readable_run
from api.values import RunId, StepPath
from rlplane.layout import rotated
from rlplane.spec.sections import TrainSpec

router = APIRouter(prefix="/api/v1/runs/{run_id}/checkpoints", tags=["checkpoints"])


def _public(ckpt: Checkpoint) -> schemas.CheckpointPublic:
    return schemas.CheckpointPublic(
        id=ckpt.id,
        run_id=ckpt.run_id,
        step=ckpt.step,
        kind=ckpt.kind,
        path=ckpt.path,
        size=ckpt.size,
        sha256=ckpt.sha256,
        metadata=ckpt.meta,
        created_at=ckpt.created_at,
    )


def _store(request: Request) -> ArtifactStore:
    return request.app.state.artifacts


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _unstorable(metadata: dict[str, Any]) -> str | None:
    """Why the metadata cannot be stored alike on SQLite and Postgres (JSONB), or None."""
    try:
        json.dumps(metadata, allow_nan=False, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return "metadata must be valid Unicode (no lone surrogates)"
    except ValueError:
        return "metadata may not contain NaN or Infinity; send them as strings"
    if any("\x00" in text for text in _strings(metadata)):
        return "metadata strings may not contain NUL characters"
    return None


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
    claim_for_report(session, principal, run_id)
    try:
        rel = safe_relative(body.path)
        present = _store(request).exists(rel)
    except UnsafePath as exc:
        raise Unprocessable(["body", "path"], str(exc)) from None
    if not present:
        raise Unprocessable(["body", "path"], f"'{body.path}' does not exist under the artifact root; write it first")
    if (why := _unstorable(body.metadata)) is not None:
        raise Unprocessable(["body", "metadata"], why)
    existing = session.scalar(
        select(Checkpoint).where(Checkpoint.run_id == run_id, Checkpoint.step == body.step, Checkpoint.kind == body.kind)
    )
    if existing is not None:
        if (existing.path, existing.size, existing.sha256, existing.meta) != (body.path, body.size, body.sha256, body.metadata):
            raise Conflict(f"run {run_id} already has a different {body.kind} at step {body.step}")
        response.status_code = status.HTTP_200_OK
        return _public(existing)
    ckpt = Checkpoint(
        run_id=run_id, step=body.step, kind=body.kind, path=body.path, size=body.size, sha256=body.sha256, meta=body.metadata
    )
    session.add(ckpt)
    session.flush()
    if body.kind == "checkpoint":
        _forget_rotated(session, run_id)
    return _public(ckpt)


def _forget_rotated(session, run_id: int) -> None:
    """Drop the records of checkpoints the trainer has rotated away (rlplane.layout.rotated: the trainer and a
    remote root's worker keep the same ones), so a listing never offers a checkpoint whose files are gone."""
    spec = session.scalar(select(Run.spec).where(Run.id == run_id)) or {}
    keep_last = (spec.get("train") or {}).get("keep_last", TrainSpec.model_fields["keep_last"].default)
    ours = (Checkpoint.run_id == run_id, Checkpoint.kind == "checkpoint")
    doomed = rotated(session.scalars(select(Checkpoint.step).where(*ours)).all(), keep_last)
    if doomed:
        session.execute(delete(Checkpoint).where(*ours, Checkpoint.step.in_(doomed)))


@router.get("", response_model=schemas.CheckpointList)
def list_checkpoints(run_id: RunId, principal: Reader, session: SessionDep) -> schemas.CheckpointList:
    readable_run(session, principal, run_id)
    rows = session.scalars(select(Checkpoint).where(Checkpoint.run_id == run_id).order_by(Checkpoint.step, Checkpoint.kind)).all()
    return schemas.CheckpointList(data=[_public(c) for c in rows], count=len(rows))


KindQuery = Annotated[schemas.CheckpointKind, Query(description="checkpoint (default) or export: the final model")]


def _checkpoint(
    run_id: RunId, step: StepPath, principal: Reader, session: SessionDep, kind: KindQuery = "checkpoint"
) -> Checkpoint:
    """The checkpoint (or export) a /{step}/... route names, readable by the caller."""
    readable_run(session, principal, run_id)
    ckpt = session.scalar(select(Checkpoint).where(Checkpoint.run_id == run_id, Checkpoint.step == step, Checkpoint.kind == kind))
    if ckpt is None:
        raise NotFound(f"{kind} of run {run_id} at step {step}")
    return ckpt


CheckpointDep = Annotated[Checkpoint, Depends(_checkpoint)]


def _files(store: ArtifactStore, ckpt: Checkpoint) -> list[tuple[str, int]]:
    try:
        return list(store.files_under(safe_relative(ckpt.path)))
    except (UnsafePath, FileNotFoundError):
        raise NotFound(f"files of checkpoint {ckpt.path}") from None


@router.get("/{step}/files", response_model=schemas.CheckpointFileList)
def list_checkpoint_files(ckpt: CheckpointDep, request: Request) -> schemas.CheckpointFileList:
    files = [schemas.CheckpointFile(name=n, size=s) for n, s in _files(_store(request), ckpt)]
    return schemas.CheckpointFileList(data=files, count=len(files))


@router.get(
    "/{step}/files/{file_path:path}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "The file's bytes"}},
)
def download_checkpoint_file(ckpt: CheckpointDep, file_path: str, request: Request) -> Response:
    store = _store(request)
    try:
        base = safe_relative(ckpt.path)
        wanted = safe_relative(file_path)
        # A single-file checkpoint lists itself under its own name.
        rel = base if wanted == PurePosixPath(base.name) and store.is_file(base) else base / wanted
        if store.local:
            target = store.local_path(rel, base)
            if not target.is_file():
                raise FileNotFoundError(file_path)
            return FileResponse(target, filename=target.name)
        if not store.is_file(rel):
            raise FileNotFoundError(file_path)
        return StreamingResponse(store.open_read(rel), media_type="application/octet-stream")
    except UnsafePath as exc:
        raise BadRequest(f"file path rejected: {exc}") from None
    except (FileNotFoundError, NotADirectoryError):
        raise NotFound(f"file '{file_path}' in checkpoint at step {ckpt.step}") from None


@router.get(
    "/{step}/archive",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-tar": {}}, "description": "Every file of the checkpoint, as one tar"}},
)
def download_checkpoint_archive(ckpt: CheckpointDep, request: Request) -> StreamingResponse:
    """The whole checkpoint (or export) as one uncompressed tar, streamed: what `rlplane download` fetches file by file."""
    store = _store(request)
    base = safe_relative(ckpt.path)
    files = _files(store, ckpt)
    single = len(files) == 1 and store.is_file(base)
    entries = [(name, size, partial(store.open_read, base if single else base / name)) for name, size in files]
    top = f"run-{ckpt.run_id}-{ckpt.kind}-step-{ckpt.step}"
    headers = {"Content-Disposition": f'attachment; filename="{top}.tar"'}
    return StreamingResponse(tar_stream(top, entries), media_type="application/x-tar", headers=headers)
