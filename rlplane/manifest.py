"""A checkpoint's manifest: every file's size and sha256, written last, so its presence marks a complete checkpoint;
its own hash is the checkpoint's. Torch-free: the trainer, the SDK (a script's checkpoints) and tests share it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from rlplane.layout import MANIFEST

FORMAT_VERSION = 1
_CHUNK = 1 << 20


def fsync_path(path: Path) -> None:
    """Flush a file's or a directory's data and metadata to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def listing(root: Path) -> dict[str, dict[str, Any]]:
    """Every file under `root` but a manifest, by its path relative to `root`: its size and sha256."""
    return {
        path.relative_to(root).as_posix(): {"size": path.stat().st_size, "sha256": sha256_file(path)}
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }


def link_tree(source: Path, target: Path) -> None:
    """`target` holding what `source` (a directory, or a file) holds, but a manifest: hard links where the file
    system allows, copies elsewhere, so the owner may delete or overwrite its own copy."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    if source.is_file():
        target.mkdir(parents=True)
        link(str(source), str(target / source.name))
    else:
        shutil.copytree(source, target, copy_function=link, ignore=shutil.ignore_patterns(MANIFEST))


def write_manifest(root: Path, step: int, elsewhere: dict[str, dict[str, Any]] | None = None) -> Path:
    """List every file under `root` with size and sha256; written last, so its presence marks completion.
    `elsewhere`: files of the checkpoint written on other nodes (their listing), which reach the artifact root
    from there (a gang's nodes with their own run directories)."""
    files = listing(root)
    clash = sorted(name for name in set(files) & set(elsewhere or {}) if files[name] != elsewhere[name])
    if clash:  # the same file written on every node (a config, say) is one file
        raise ValueError(f"{clash[0]} was written on this node and on another, with different contents")
    files = {**files, **(elsewhere or {})}
    manifest = root / MANIFEST
    document = {"format_version": FORMAT_VERSION, "step": step, "files": files}
    manifest.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    fsync_path(manifest)
    return manifest


def read_manifest(root: Path) -> dict[str, Any] | None:
    """The manifest, or None where it is missing or unreadable (an incomplete checkpoint)."""
    try:
        manifest = json.loads((Path(root) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) else None


def missing(root: Path) -> list[str]:
    """The files `root`'s manifest lists that are not there with their listed size (cheap: no hashing); every one
    where it has no manifest."""
    manifest = read_manifest(root)
    if manifest is None:
        return [MANIFEST]
    return [
        name
        for name, entry in manifest["files"].items()
        if not (root / name).is_file() or (root / name).stat().st_size != entry.get("size")
    ]


def manifest_digest_and_size(root: Path) -> tuple[str, int]:
    """(sha256 of manifest.json, total bytes of the checkpoint including the manifest)."""
    manifest = read_manifest(root) or {"files": {}}
    total = sum(entry["size"] for entry in manifest["files"].values()) + (root / MANIFEST).stat().st_size
    return sha256_file(root / MANIFEST), total
