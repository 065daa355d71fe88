"""A code snapshot is a .tar.gz of a directory, stored once under code/<sha256>.tar.gz of the artifact root. It is
checked before it is kept: a gzip'd tar of regular files and directories whose names stay inside it, so the worker
that unpacks it (worker/code.py, with the same rules) writes nothing outside the run's directory."""

from __future__ import annotations

import tarfile
from pathlib import Path, PurePosixPath

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.artifacts import ArtifactStore, UnsafePath, safe_relative
from api.auth.principal import Principal
from api.exceptions import NotFound, Unprocessable
from api.models import Run
from rlplane.layout import code_snapshot
from rlplane.spec import RunSpec

MAX_FILES = 100_000
MAX_UNPACKED_BYTES = 4 * 1024**3


def check_archive(path: Path) -> int:
    """The number of files in a valid snapshot; Unprocessable naming what is wrong otherwise."""
    where = ["body", "file"]
    files = unpacked = 0
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                try:
                    safe_relative(member.name.removeprefix("./").rstrip("/") or "x")
                except UnsafePath as exc:
                    raise Unprocessable(where, f"{member.name!r} in the archive: {exc}") from None
                if not (member.isfile() or member.isdir()):
                    raise Unprocessable(where, f"{member.name!r} is a link or a device; a snapshot holds files and directories")
                files += member.isfile()
                unpacked += member.size
                if files > MAX_FILES or unpacked > MAX_UNPACKED_BYTES:
                    raise Unprocessable(
                        where, f"the snapshot unpacks to more than {MAX_FILES} files or {MAX_UNPACKED_BYTES} bytes"
                    )
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise Unprocessable(where, f"not a .tar.gz archive ({exc}); `rlplane submit --code DIR` makes one") from None
    return files


def store(artifacts: ArtifactStore, path: Path, sha256: str) -> None:
    target = PurePosixPath(code_snapshot(sha256))
    if not artifacts.exists(target):
        with path.open("rb") as source:
            artifacts.save(target, source)


def exists(artifacts: ArtifactStore, sha256: str) -> bool:
    return artifacts.exists(PurePosixPath(code_snapshot(sha256)))


def readable(session: Session, principal: Principal, artifacts: ArtifactStore, sha256: str) -> PurePosixPath:
    """The snapshot's path, for a reader of a run that runs it (a site admin reads any)."""
    # Matched in SQL (JSONB on Postgres, json_extract on SQLite): a worker fetches a snapshot at every launch, and
    # reading every command run's spec for it would grow with the history.
    snapshot = Run.spec["command"]["code"]["snapshot"].as_string()
    query = select(Run.id).where(Run.algorithm == "command", snapshot == sha256).limit(1)
    if (projects := principal.project_ids()) is not None:
        query = query.where(Run.project_id.in_(projects))
    named = principal.is_site_admin or session.scalar(query) is not None
    if not named or not exists(artifacts, sha256):
        raise NotFound(f"code snapshot {sha256}")
    return PurePosixPath(code_snapshot(sha256))


def _snapshot_of(spec: dict | None) -> str | None:
    command = (spec or {}).get("command") if isinstance(spec, dict) else None
    code = command.get("code") if isinstance(command, dict) else None
    return code.get("snapshot") if isinstance(code, dict) else None


def check_snapshot(artifacts: ArtifactStore, spec: RunSpec | dict, at: tuple[str, ...] = ("body",)) -> None:
    """A command run's snapshot must have been uploaded (POST /code) before a run names it: a submitted spec, or a
    pipeline stage's or a sweep's (a document still to be resolved, `at` its place in the body)."""
    document = spec.model_dump(mode="json") if isinstance(spec, RunSpec) else spec
    sha = _snapshot_of(document)
    if isinstance(sha, str) and not exists(artifacts, sha):
        raise Unprocessable(
            [*at, "command", "code", "snapshot"],
            f"no code snapshot {sha} was uploaded: upload it first (POST /api/v1/code), or let "
            "`rlplane submit --code DIR` do both",
        )
