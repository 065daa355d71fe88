"""Durable writes, the manifest (every file's size and sha256) and completeness checks.

A checkpoint directory is complete only when its manifest exists and every file it lists is
present with the listed size; `verify` also compares hashes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from rlplane.manifest import (
    FORMAT_VERSION,
    fsync_path,
    manifest_digest_and_size,
    missing,
    read_manifest,
    sha256_file,
    write_manifest,
)

__all__ = ["FORMAT_VERSION", "fsync_path", "manifest_digest_and_size", "read_manifest", "sha256_file", "write_manifest"]


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under `root` (files others wrote too, e.g. save_pretrained's)."""
    for directory, _, names in os.walk(root):
        for name in names:
            fsync_path(Path(directory) / name)
        fsync_path(Path(directory))


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    save_file(tensors, str(path))


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path)) if path.exists() else {}


def is_complete(root: Path) -> bool:
    """Manifest present and every listed file has its listed size (cheap: no hashing)."""
    return not missing(root)


def verify(path: Path) -> bool:
    """True when the manifest is present and every listed file matches its size and sha256."""
    root = Path(path)
    if not is_complete(root):
        return False
    manifest = read_manifest(root)
    assert manifest is not None
    return all(sha256_file(root / name) == entry.get("sha256") for name, entry in manifest["files"].items())
