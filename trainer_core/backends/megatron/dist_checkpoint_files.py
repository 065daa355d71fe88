"""The files of a Megatron distributed checkpoint as rlplane writes it: JSON and safetensors, never pickle.

    <dir>/metadata.json              megatron's CheckpointingConfig (which strategies wrote the rest);
                                     written last, so a directory without it is an unfinished save
    <dir>/common.json (+ .safetensors)   the state every rank shares (rank 0 writes it)
    <dir>/objects/<unique key>.json      megatron ShardedObjects (each by the rank holding its main replica)
    <dir>/shards/metadata.json           DCP's index of every tensor chunk (trainer_core/checkpoint/dcp_storage.py)
    <dir>/shards/__<rank>_0.safetensors  the ShardedTensor chunks each rank wrote

Megatron's own torch_dist format keeps DCP's pickled `.metadata` and torch.saves `common.pt` and
every ShardedObject; this module is what replaces those pickles. It needs no megatron import.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import torch

from trainer_core.checkpoint import codec
from trainer_core.checkpoint.errors import CheckpointError
from trainer_core.checkpoint.files import fsync_path, read_json, read_tensors, write_json, write_tensors

SHARDED_BACKEND = "rlplane_safetensors"
COMMON_BACKEND = "rlplane_json"
FORMAT_VERSION = 1
COMMON = "common"
OBJECTS = "objects"
SHARDS = "shards"

_SAFETENSORS_HEADER_LIMIT = 100 * 1024 * 1024  # safetensors' own cap on its JSON header


def write_state(stem: Path, value: Any) -> None:
    """`value` as `<stem>.json`, its tensors (if any) in `<stem>.safetensors` beside it."""
    tensors: dict[str, torch.Tensor] = {}
    document = codec.encode(value, tensors, "state")
    stem.parent.mkdir(parents=True, exist_ok=True)
    if tensors:
        write_tensors(stem.with_name(stem.name + ".safetensors"), tensors)
        fsync_path(stem.with_name(stem.name + ".safetensors"))
    write_json(stem.with_name(stem.name + ".json"), document)
    fsync_path(stem.with_name(stem.name + ".json"))


def read_state(stem: Path) -> Any:
    """The inverse of `write_state`; CheckpointError naming the file when it is missing."""
    path = stem.with_name(stem.name + ".json")
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the checkpoint is incomplete or was not written by rlplane.")
    return codec.decode(read_json(path), read_tensors(stem.with_name(stem.name + ".safetensors")))


def object_stem(directory: Path, unique_key: str) -> Path:
    """Where a ShardedObject lies; its unique key (`name/shard_0_2`) becomes a relative path."""
    if unique_key.startswith("/") or ".." in Path(unique_key).parts:
        raise CheckpointError(f"sharded object key {unique_key!r} would leave the checkpoint directory.")
    return Path(directory) / OBJECTS / unique_key


def object_keys(directory: Path) -> list[str]:
    """The unique keys of every ShardedObject saved in `directory`."""
    root = Path(directory) / OBJECTS
    return sorted(path.relative_to(root).as_posix().removesuffix(".json") for path in root.rglob("*.json"))


def check_no_pickle(directory: Path) -> None:
    """CheckpointError naming the first file under `directory` that is neither JSON nor safetensors.

    An allowlist rather than a search for pickle's b"\\x80": a safetensors file may begin with that
    byte too (its first 8 bytes are the header length), and torch.save's zip files begin with b"PK".
    """
    for path in sorted(Path(directory).rglob("*")):
        if path.is_file() and not (_is_json(path) or _is_safetensors(path)):
            head = path.read_bytes()[:2]
            what = "a pickle" if head[:1] == b"\x80" else "a torch.save zip" if head == b"PK" else "neither JSON nor safetensors"
            raise CheckpointError(
                f"{path} is {what}: a checkpoint must hold only JSON and safetensors files. Something wrote it "
                "outside rlplane's strategies (megatron's default torch_dist / torch common strategy?)."
            )


def _is_json(path: Path) -> bool:
    if path.suffix != ".json":
        return False
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return True


def _is_safetensors(path: Path) -> bool:
    """A little-endian u64 header length, then that many bytes of a JSON object."""
    if path.suffix != ".safetensors":
        return False
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) != 8:
            return False
        (length,) = struct.unpack("<Q", prefix)
        if not 0 < length <= _SAFETENSORS_HEADER_LIMIT:
            return False
        header = handle.read(length)
    try:
        return isinstance(json.loads(header), dict)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
