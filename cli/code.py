"""`rlplane submit --code DIR`: a command run's code, packed as the worker will unpack it.

What goes in: in a git work tree, the files git would commit (tracked, and untracked ones .gitignore does not
exclude); elsewhere every file but version-control, virtual-environment and cache directories. The archive is
reproducible (sorted, no times or owners), so the same code is the same snapshot, stored once. Its git commit and
uncommitted diff are recorded in the spec (command.code).
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlplane.limits import MAX_CODE_BYTES
from rlplane.sdk.environment import git

SKIPPED_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "__pycache__", "node_modules", ".mypy_cache", ".pytest_cache"}


class CodeError(Exception):
    """The directory cannot be packed (the message says why and what to do)."""


@dataclass(frozen=True)
class Packed:
    archive: Path
    files: int
    size: int
    git: dict[str, Any] | None


def files_of(directory: Path) -> list[str]:
    """The relative paths to pack, sorted."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=directory,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        listed = None
    if listed is not None and listed.returncode == 0:
        names = [n for n in listed.stdout.decode(errors="surrogateescape").split("\0") if n]
        return sorted(n for n in names if (directory / n).is_file() and not (directory / n).is_symlink())
    found = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in names:
            path = Path(root) / name
            if path.is_file() and not path.is_symlink() and not name.endswith((".pyc", ".pyo")):
                found.append(path.relative_to(directory).as_posix())
    return sorted(found)


def pack(directory: Path, limit: int = MAX_CODE_BYTES) -> Packed:
    """A .tar.gz of `directory` (in a temporary file the caller removes)."""
    directory = directory.expanduser().resolve()
    if not directory.is_dir():
        raise CodeError(f"--code {directory}: not a directory")
    names = files_of(directory)
    if not names:
        raise CodeError(f"--code {directory}: no files to send")
    handle, name = tempfile.mkstemp(prefix="rlplane-code-", suffix=".tar.gz")
    os.close(handle)
    archive = Path(name)
    with archive.open("wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as zipped:
        with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for relative in names:
                path = directory / relative
                data = path.read_bytes()
                info = tarfile.TarInfo(relative)
                info.size, info.mode = len(data), 0o755 if os.access(path, os.X_OK) else 0o644
                tar.addfile(info, io.BytesIO(data))
                if raw.tell() > limit:
                    archive.unlink()
                    raise CodeError(
                        f"--code {directory}: over {limit // 2**20} MiB packed; leave data, checkpoints and outputs out "
                        "(.gitignore them) or put the code on a directory every worker mounts (command.code.path)"
                    )
    return Packed(archive, len(names), archive.stat().st_size, git(directory))
