"""torch.distributed.checkpoint's `Metadata` <-> JSON, so a sharded checkpoint's index is readable text.

torch's own FileSystemWriter pickles this object into `.metadata`; here it becomes `metadata.json`:
every entry's dtype, global size and chunks (offset and size of each piece some rank wrote), and
where each chunk lies (`StoredChunk`: a safetensors file and the key inside it). Types are rebuilt
from allowlists, never from names looked up freely.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

from trainer_core.checkpoint import codec
from trainer_core.checkpoint.errors import CheckpointError

FORMAT = "rlplane-dcp-safetensors"
FORMAT_VERSION = 1

# The dtypes safetensors can hold; a name outside this list is refused rather than looked up.
_DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    )
}
_LAYOUTS = {"strided": torch.strided}
_MEMORY_FORMATS = {
    "contiguous_format": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "preserve_format": torch.preserve_format,
}


@dataclass(frozen=True)
class StoredChunk:
    """Where one written chunk lies: `file` (relative to the checkpoint directory) and its safetensors `key`."""

    file: str
    key: str


def dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise CheckpointError(f"a tensor of dtype {dtype} cannot go into a safetensors checkpoint; cast it first.")
    return name


def _named(table: dict[str, Any], value: Any, what: str) -> str:
    for name, known in table.items():
        if known == value:
            return name
    raise CheckpointError(f"{what} {value} is not supported in a sharded checkpoint (only {', '.join(table)}).")


def _lookup(table: dict[str, Any], name: Any, what: str) -> Any:
    if name not in table:
        raise CheckpointError(f"metadata.json names an unknown {what} {name!r}; was it written by another program?")
    return table[name]


def encode_metadata(metadata: Metadata) -> dict[str, Any]:
    """`metadata` (storage_data holding a StoredChunk per MetadataIndex) as JSON-ready data."""
    entries: dict[str, Any] = {}
    for fqn, entry in metadata.state_dict_metadata.items():
        if isinstance(entry, BytesStorageMetadata):
            entries[fqn] = {"type": "bytes"}
            continue
        properties = entry.properties
        entries[fqn] = {
            "type": "tensor",
            "dtype": dtype_name(properties.dtype),
            "layout": _named(_LAYOUTS, properties.layout, "layout"),
            "memory_format": _named(_MEMORY_FORMATS, properties.memory_format, "memory format"),
            "requires_grad": properties.requires_grad,
            "pin_memory": properties.pin_memory,
            "size": list(entry.size),
            "chunks": [{"offsets": list(chunk.offsets), "sizes": list(chunk.sizes)} for chunk in entry.chunks],
        }
    storage = [
        {"fqn": index.fqn, "offset": None if index.offset is None else list(index.offset), "file": where.file, "key": where.key}
        for index, where in (metadata.storage_data or {}).items()
    ]
    meta = metadata.storage_meta
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "version": metadata.version,
        "entries": entries,
        "storage": storage,
        # DCP's own flattening map (flat key -> path of keys): plain strings, ints and tuples.
        "planner_data": codec.encode(metadata.planner_data, {}, "planner_data"),
        "storage_meta": None
        if meta is None
        else {
            "checkpoint_id": None if meta.checkpoint_id is None else str(meta.checkpoint_id),
            "save_id": meta.save_id,
            "load_id": meta.load_id,
            "modules": list(meta.modules),
        },
    }


def decode_metadata(document: Any) -> Metadata:
    """The inverse of `encode_metadata`."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"metadata.json is not a {FORMAT} index; this directory was not written by rlplane.")
    if document.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"metadata.json has format_version {document.get('format_version')!r}; this rlplane reads {FORMAT_VERSION}."
        )
    entries: dict[str, TensorStorageMetadata | BytesStorageMetadata] = {}
    for fqn, entry in document["entries"].items():
        if entry["type"] == "bytes":
            entries[fqn] = BytesStorageMetadata()
            continue
        properties = TensorProperties(
            dtype=_lookup(_DTYPES, entry["dtype"], "dtype"),
            layout=_lookup(_LAYOUTS, entry["layout"], "layout"),
            requires_grad=bool(entry["requires_grad"]),
            memory_format=_lookup(_MEMORY_FORMATS, entry["memory_format"], "memory format"),
            pin_memory=bool(entry["pin_memory"]),
        )
        chunks = [ChunkStorageMetadata(torch.Size(c["offsets"]), torch.Size(c["sizes"])) for c in entry["chunks"]]
        entries[fqn] = TensorStorageMetadata(properties, torch.Size(entry["size"]), chunks)
    storage = {MetadataIndex(item["fqn"], item["offset"]): StoredChunk(item["file"], item["key"]) for item in document["storage"]}
    meta = document.get("storage_meta")
    return Metadata(
        state_dict_metadata=entries,
        planner_data=codec.decode(document.get("planner_data"), {}),
        storage_data=storage,
        storage_meta=None if meta is None else StorageMeta(**meta),
        version=document.get("version"),
    )
