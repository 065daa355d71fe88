"""The artifact root: a local directory or an fsspec URL. Every path is checked before it is touched."""

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import fsspec

# Characters that other tools' path-traversal CVEs smuggled through: backslash separators, percent
# escapes that a second decoder would turn into '../', ';' parameters, NUL and other controls.
_FORBIDDEN = re.compile(r"[\\%;\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")


class UnsafePath(ValueError):
    pass


def safe_relative(path: str) -> PurePosixPath:
    """A normalised relative path that cannot leave its base, or UnsafePath saying why."""
    if not path or len(path) > 1024:
        raise UnsafePath("path must be 1-1024 characters")
    if _FORBIDDEN.search(path):
        raise UnsafePath("path may not contain backslashes, '%', ';' or control characters")
    if path.startswith("/") or _DRIVE.match(path):
        raise UnsafePath("path must be relative to the artifact root")
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise UnsafePath("path may not contain empty, '.' or '..' segments")
    if any(len(part.encode()) > 255 for part in parts):
        raise UnsafePath("each path segment must be at most 255 bytes (the file system's limit)")
    return PurePosixPath(*parts)


class ArtifactStore:
    def __init__(self, root: str) -> None:
        self.url = root
        self.local = "://" not in root or root.startswith("file://")
        if self.local:
            self.root = Path(root.removeprefix("file://")).expanduser().resolve()
            self.root.mkdir(parents=True, exist_ok=True)
        else:
            self.fs, self.remote_root = fsspec.core.url_to_fs(root)

    def _local(self, rel: PurePosixPath, base: PurePosixPath | None = None) -> Path:
        """Resolve symlinks and refuse anything that ends up outside the root (or outside `base`)."""
        fence = (self.root / base).resolve() if base is not None else self.root
        if fence != self.root and self.root not in fence.parents:
            raise UnsafePath("the checkpoint directory points outside the artifact root")
        target = (self.root / rel).resolve()
        if target != fence and fence not in target.parents:
            raise UnsafePath("path leads outside its directory (symlink or traversal)")
        return target

    def _remote(self, rel: PurePosixPath) -> str:
        return f"{self.remote_root.rstrip('/')}/{rel}"

    def exists(self, rel: PurePosixPath) -> bool:
        return self._local(rel).exists() if self.local else self.fs.exists(self._remote(rel))

    def is_file(self, rel: PurePosixPath, base: PurePosixPath | None = None) -> bool:
        return self._local(rel, base).is_file() if self.local else self.fs.isfile(self._remote(rel))

    def local_path(self, rel: PurePosixPath, base: PurePosixPath | None = None) -> Path:
        return self._local(rel, base)

    def open_read(self, rel: PurePosixPath) -> BinaryIO:
        return self._local(rel).open("rb") if self.local else self.fs.open(self._remote(rel), "rb")

    def size(self, rel: PurePosixPath) -> int:
        return self._local(rel).stat().st_size if self.local else int(self.fs.size(self._remote(rel)))

    def files_under(self, rel: PurePosixPath) -> Iterator[tuple[str, int]]:
        """(relative name, size) of every regular file in a checkpoint directory (or the file itself)."""
        if not self.local:
            base = self._remote(rel)
            if self.fs.isfile(base):
                yield rel.name, int(self.fs.size(base))
                return
            if not self.fs.isdir(base):
                raise FileNotFoundError(str(rel))
            for path, info in sorted(self.fs.find(base, detail=True).items()):
                yield path[len(base) :].lstrip("/"), int(info["size"])
            return
        base = self._local(rel)
        if base.is_file():
            yield base.name, base.stat().st_size
            return
        if not base.is_dir():
            raise FileNotFoundError(str(rel))  # os.walk would quietly list nothing
        for dirpath, _dirs, files in sorted(os.walk(base)):
            for name in sorted(files):
                full = Path(dirpath) / name
                if full.is_file() and not full.is_symlink():
                    yield full.relative_to(base).as_posix(), full.stat().st_size

    def save(self, rel: PurePosixPath, source: BinaryIO) -> None:
        if self.local:
            target = self._local(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                shutil.copyfileobj(source, out, 1024 * 1024)
        else:
            # Object stores have no directories (a no-op there); sftp and other real file systems need them.
            self.fs.makedirs(self._remote(rel.parent), exist_ok=True)
            with self.fs.open(self._remote(rel), "wb") as out:
                shutil.copyfileobj(source, out, 1024 * 1024)

    def delete_tree(self, rel: PurePosixPath) -> None:
        if self.local:
            shutil.rmtree(self._local(rel), ignore_errors=True)
        elif self.fs.exists(self._remote(rel)):
            self.fs.rm(self._remote(rel), recursive=True)
