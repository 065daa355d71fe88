"""A torch.distributed.checkpoint storage layer of safetensors files and a JSON index: no pickle.

torch's FileSystemWriter pickles the checkpoint's metadata and torch.saves every non-tensor item,
which our checkpoints never do, so dcp.save / dcp.load go through these instead:
  __<rank>_0.safetensors  the chunks one rank wrote (its shards), one key per chunk
  metadata.json           dcp's Metadata (dcp_metadata.py), written by the coordinator once all ranks wrote
Non-tensor items are refused: keep them out of the state handed to dcp (sharded.py puts them in JSON).
Reading takes only the slices each rank needs (safetensors get_slice), so a checkpoint written by
any number of ranks loads on any other number.
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    ReadItem,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from trainer_core.checkpoint.dcp_metadata import StoredChunk, decode_metadata, encode_metadata
from trainer_core.checkpoint.errors import CheckpointError
from trainer_core.checkpoint.files import fsync_path, read_json, write_json

METADATA = "metadata.json"


def chunk_key(index: MetadataIndex) -> str:
    """The safetensors key of one chunk: its state-dict key and where the chunk starts (`fqn@0,128`)."""
    offset = "" if index.offset is None else ",".join(str(o) for o in index.offset)
    return f"{index.fqn}@{offset}"


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def _not_a_tensor(fqn: str) -> CheckpointError:
    return CheckpointError(
        f"state entry {fqn!r} is not a tensor: dcp would pickle it. Keep only tensors in the state given to "
        "dcp.save and store other values as JSON (trainer_core.checkpoint.sharded does)."
    )


class SafetensorsWriter(StorageWriter):
    """Each rank writes its chunks to one safetensors file; the coordinator writes metadata.json last."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self.is_coordinator = False

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            self.path = Path(checkpoint_id)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        # Refused here, before any rank writes, rather than after the planner has pickled the item.
        for item in plan.items:
            if item.type == WriteItemType.BYTE_IO:
                raise _not_a_tensor(item.index.fqn)
        self.path.mkdir(parents=True, exist_ok=True)
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        # The file each rank writes is named by its place in the list, which is its rank.
        return [dataclasses.replace(plan, storage_data=f"__{rank}_0.safetensors") for rank, plan in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        file = str(plan.storage_data)
        tensors: dict[str, torch.Tensor] = {}
        results = []
        for item in plan.items:
            if item.type == WriteItemType.BYTE_IO:
                raise _not_a_tensor(item.index.fqn)
            data = planner.resolve_data(item)
            assert isinstance(data, torch.Tensor)
            key = chunk_key(item.index)
            # A copy: safetensors refuses tensors that share memory (tied weights), and wants contiguous CPU data.
            tensors[key] = data.detach().to("cpu", copy=True).contiguous()
            size = tensors[key].numel() * tensors[key].element_size()
            results.append(WriteResult(index=item.index, size_in_bytes=size, storage_data=StoredChunk(file, key)))
        if tensors:
            save_file(tensors, str(self.path / file))
            fsync_path(self.path / file)
        return _done(results)

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        storage = {result.index: result.storage_data for rank_results in results for result in rank_results}
        partial = self.path / f"{METADATA}.tmp"
        write_json(partial, encode_metadata(dataclasses.replace(metadata, storage_data=storage)))
        fsync_path(partial)
        partial.rename(self.path / METADATA)
        fsync_path(self.path)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return True  # any local directory


class SafetensorsReader(StorageReader):
    """Reads metadata.json, then for each read item the slice of a stored chunk that the planner asks for."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self.storage: dict[MetadataIndex, StoredChunk] = {}

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            self.path = Path(checkpoint_id)

    def read_metadata(self) -> Metadata:
        path = self.path / METADATA
        if not path.is_file():
            raise CheckpointError(f"{path} is missing: {self.path} is not a sharded checkpoint, or its save did not finish.")
        return decode_metadata(read_json(path))

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.storage = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        by_file: dict[str, list[ReadItem]] = defaultdict(list)
        for item in plan.items:
            if item.type == LoadItemType.BYTE_IO:
                raise _not_a_tensor(item.storage_index.fqn)
            by_file[self._stored(item).file].append(item)
        for file, items in by_file.items():
            with safe_open(str(self.path / file), framework="pt", device="cpu") as handle:
                for item in items:
                    data = _read_slice(handle, self._stored(item).key, item.storage_offsets, item.lengths)
                    target = planner.resolve_tensor(item).detach()
                    if target.shape != data.shape:
                        raise CheckpointError(
                            f"{item.dest_index.fqn}: the checkpoint's slice has shape {tuple(data.shape)}, "
                            f"this run's has {tuple(target.shape)}; resume with the same model spec."
                        )
                    target.copy_(data)
                    planner.commit_tensor(item, target)
        return _done(None)

    def _stored(self, item: ReadItem) -> StoredChunk:
        stored = self.storage.get(item.storage_index)
        if stored is None:
            raise CheckpointError(f"metadata.json lists no stored chunk {chunk_key(item.storage_index)}; the index is damaged.")
        return stored

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return True


def _read_slice(handle: Any, key: str, offsets: torch.Size, lengths: torch.Size) -> torch.Tensor:
    """The hypercube at `offsets` of `lengths` inside a stored chunk; the whole tensor when that is all of it."""
    part = handle.get_slice(key)
    shape = list(part.get_shape())
    if all(offset == 0 for offset in offsets) and list(lengths) == shape:
        return handle.get_tensor(key)
    return part[tuple(slice(offset, offset + length) for offset, length in zip(offsets, lengths, strict=True))]
