import hashlib
import re
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import Annotated

from fastapi import APIRouter, File, Form, Query, Request, UploadFile, status
from sqlalchemy import func, select

from api.artifacts import ArtifactStore
from api.auth.deps import Reader, Writer
from api.auth.schemas import NAME_PATTERN
from api.auth.service import readable_project
from api.datasets import schemas, validate
from api.db import SessionDep
from api.exceptions import NotFound, Unprocessable
from api.models import Dataset, Project
from api.params import ItemId, Offset

router = APIRouter(prefix="/api/v1/datasets", tags=["datasets"])
UPLOAD_PATH = "/api/v1/datasets"


def _public(dataset: Dataset, project: str) -> schemas.DatasetPublic:
    return schemas.DatasetPublic(
        id=dataset.id,
        project=project,
        name=dataset.name,
        kind=dataset.kind,
        format=dataset.format,
        size=dataset.size,
        sha256=dataset.sha256,
        rows=dataset.rows,
        columns=dataset.columns,
        created_at=dataset.created_at,
        source=f"dataset:{dataset.id}",
    )


def _spool(upload: UploadFile, into: Path) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with into.open("wb") as out:
        while chunk := upload.file.read(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    return size, digest.hexdigest()


@router.post("", response_model=schemas.DatasetPublic, status_code=status.HTTP_201_CREATED)
def upload_dataset(
    principal: Writer,
    session: SessionDep,
    request: Request,
    file: Annotated[UploadFile, File(description="A .jsonl, .json (one array of rows) or .parquet file")],
    kind: Annotated[schemas.DatasetKind, Form()],
    project: Annotated[str, Form(pattern=NAME_PATTERN)] = "default",
    name: Annotated[str | None, Form(max_length=256)] = None,
) -> schemas.DatasetPublic:
    target_project = readable_project(session, principal, project)
    principal.require(target_project.id, "write")
    filename = Path(file.filename or "").name
    fmt = validate.FORMATS.get(Path(filename).suffix.lower())
    if fmt is None:
        raise Unprocessable(["body", "file"], f"'{filename}' must end in .jsonl, .json or .parquet")
    safe_name = re.sub(r"[^A-Za-z0-9._-]", "_", filename)[-200:] or f"data.{fmt}"
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / safe_name
        size, sha256 = _spool(file, local)
        report = validate.validate_file(local, fmt, kind)
        if report.errors:
            raise Unprocessable.many(report.errors)
        display = (name or filename).replace("\x00", "\ufffd")  # Postgres text cannot hold NUL
        dataset = Dataset(
            project_id=target_project.id,
            name=display,
            kind=kind,
            format=fmt,
            path="",
            size=size,
            sha256=sha256,
            rows=report.rows,
            columns=report.columns,
            created_by=principal.user_id,
        )
        session.add(dataset)
        session.flush()
        dataset.path = f"datasets/{dataset.id}/{safe_name}"
        with local.open("rb") as source:
            request.app.state.artifacts.save(PurePosixPath(dataset.path), source)
    session.flush()
    return _public(dataset, target_project.name)


@router.get("", response_model=schemas.DatasetList)
def list_datasets(
    principal: Reader,
    session: SessionDep,
    project: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    kind: schemas.DatasetKind | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Offset = 0,
) -> schemas.DatasetList:
    query = select(Dataset, Project.name).join(Project, Project.id == Dataset.project_id)
    if project:
        query = query.where(Dataset.project_id == readable_project(session, principal, project).id)
    elif (ids := principal.project_ids()) is not None:
        query = query.where(Dataset.project_id.in_(ids))
    if kind:
        query = query.where(Dataset.kind == kind)
    rows = session.execute(query.order_by(Dataset.id.desc()).limit(limit).offset(offset)).all()
    total = session.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0
    return schemas.DatasetList(data=[_public(d, p) for d, p in rows], count=total)


def _readable(session, principal, dataset_id: int) -> tuple[Dataset, str]:
    row = session.execute(
        select(Dataset, Project.name).join(Project, Project.id == Dataset.project_id).where(Dataset.id == dataset_id)
    ).one_or_none()
    if row is None:
        raise NotFound(f"dataset {dataset_id}")
    principal.require(row[0].project_id, "read")
    return row[0], row[1]


@router.get("/{dataset_id}", response_model=schemas.DatasetPublic)
def read_dataset(dataset_id: ItemId, principal: Reader, session: SessionDep) -> schemas.DatasetPublic:
    return _public(*_readable(session, principal, dataset_id))


@router.get("/{dataset_id}/preview", response_model=schemas.DatasetPreview)
def preview_dataset(
    dataset_id: ItemId,
    principal: Reader,
    session: SessionDep,
    request: Request,
    rows: Annotated[int, Query(ge=1, le=100)] = 10,
) -> schemas.DatasetPreview:
    dataset, _ = _readable(session, principal, dataset_id)
    store: ArtifactStore = request.app.state.artifacts
    rel = PurePosixPath(dataset.path)
    if store.local:
        return schemas.DatasetPreview(id=dataset.id, rows=validate.preview(store.local_path(rel), dataset.format, rows))
    with tempfile.TemporaryDirectory() as tmp, store.open_read(rel) as source:
        local = Path(tmp) / rel.name
        with local.open("wb") as out:
            shutil.copyfileobj(source, out)
        return schemas.DatasetPreview(id=dataset.id, rows=validate.preview(local, dataset.format, rows))
