import hashlib
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, File, Form, Request, UploadFile, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from api.auth.deps import Reader, Writer
from api.auth.service import readable_project
from api.code import service
from api.db import SessionDep
from api.exceptions import Unprocessable
from rlplane.spec.base import NAME_PATTERN

UPLOAD_PATH = "/api/v1/code"

router = APIRouter(prefix=UPLOAD_PATH, tags=["runs"])

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class CodeSnapshot(BaseModel):
    snapshot: str = Field(description="Its sha256: a command run's command.code.snapshot")
    size: int = Field(description="Bytes of the archive")
    files: int = Field(description="Files in it")


@router.post("", response_model=CodeSnapshot, status_code=status.HTTP_201_CREATED)
def upload_code(
    principal: Writer,
    session: SessionDep,
    request: Request,
    file: Annotated[UploadFile, File(description="A .tar.gz of the directory the command runs in")],
    project: Annotated[str, Form(pattern=NAME_PATTERN)] = "default",
) -> CodeSnapshot:
    """Store a command run's code (`rlplane submit --code DIR` packs and sends it): kept once per content, by sha256,
    at most RLPLANE_MAX_CODE_BYTES. Uploading needs write access to `project`, where the run will be."""
    principal.require(readable_project(session, principal, project).id, "write")
    limit = request.app.state.settings.max_code_bytes
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "code.tar.gz"
        digest, size = hashlib.sha256(), 0
        with local.open("wb") as out:
            while chunk := file.file.read(1 << 20):
                size += len(chunk)
                if size > limit:
                    raise Unprocessable(
                        ["body", "file"],
                        f"the snapshot is over {limit} bytes (RLPLANE_MAX_CODE_BYTES): leave data and checkpoints out "
                        "(.gitignore them), or put the code on a shared directory (command.code.path)",
                    )
                digest.update(chunk)
                out.write(chunk)
        files = service.check_archive(local)
        sha256 = digest.hexdigest()
        service.store(request.app.state.artifacts, local, sha256)
    return CodeSnapshot(snapshot=sha256, size=size, files=files)


@router.get(
    "/{sha256}",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/gzip": {}}, "description": "The snapshot, as uploaded"}},
)
def download_code(sha256: Sha256, principal: Reader, session: SessionDep, request: Request) -> StreamingResponse:
    """A command run's code snapshot (for a reader of a run that runs it): what reproduces it, with its spec."""
    store = request.app.state.artifacts
    path = service.readable(session, principal, store, sha256)

    def chunks():
        with store.open_read(path) as handle:
            while chunk := handle.read(1 << 20):
                yield chunk

    headers = {"Content-Disposition": f'attachment; filename="code-{sha256[:12]}.tar.gz"'}
    return StreamingResponse(chunks(), media_type="application/gzip", headers=headers)
