"""megatron-core dist_checkpointing strategies that write safetensors and JSON instead of pickles.

The sharded strategies keep megatron's translation of its ShardedTensors into the state torch's
distributed checkpoint (DCP) understands (strategies/torch.py: grouping by sharded key, building
torch sharded tensors, the MCore save and load planners with their global-shape checks) and swap
only the storage layer: DCP's FileSystemWriter/Reader (pickled `.metadata`) becomes our
SafetensorsWriter/Reader (trainer_core/checkpoint/dcp_storage.py), under `<dir>/shards/`.
The common strategies replace torch.save of `common.pt` and of each ShardedObject with JSON
(+ safetensors for tensors); see dist_checkpoint_files.py for the layout.

None is async or fully parallel: those need CUDA streams and helper processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from megatron.core.dist_checkpointing.dict_utils import dict_list_map_inplace, nested_values
from megatron.core.dist_checkpointing.mapping import (
    CheckpointingException,
    ShardedObject,
    ShardedStateDict,
    ShardedTensor,
    StateDict,
    is_main_replica,
)
from megatron.core.dist_checkpointing.strategies.base import (
    LoadCommonStrategy,
    LoadShardedStrategy,
    SaveCommonStrategy,
    SaveShardedStrategy,
)
from megatron.core.dist_checkpointing.strategies.torch import (
    MCoreLoadPlanner,
    MCoreSavePlanner,
    _replace_sharded_keys_with_state_dict_keys,
    _replace_state_dict_keys_with_sharded_keys,
    _restore_dict_types,
    _unwrap_pyt_sharded_tensor,
    mcore_to_pyt_state_dict,
)

from trainer_core.backends.megatron.dist_checkpoint_files import (
    COMMON,
    COMMON_BACKEND,
    FORMAT_VERSION,
    SHARDED_BACKEND,
    SHARDS,
    object_keys,
    object_stem,
    read_state,
    write_state,
)
from trainer_core.checkpoint.dcp_storage import SafetensorsReader, SafetensorsWriter
from trainer_core.checkpoint.sharded import _as_checkpoint_error


def _check_backend(found: str, expected: str, what: str) -> None:
    if found != expected:
        raise CheckpointingException(
            f"the checkpoint's {what} backend is {found!r}; rlplane reads only {expected!r} checkpoints "
            "(megatron's torch_dist/torch formats hold pickles). Convert it or start from HF weights."
        )


def _check_version(found: int, what: str) -> None:
    if found != FORMAT_VERSION:
        raise CheckpointingException(f"the checkpoint's {what} format version is {found}; this rlplane reads {FORMAT_VERSION}.")


class SafetensorsSaveShardedStrategy(SaveShardedStrategy):
    """Megatron's TorchDistSaveShardedStrategy, synchronous, through SafetensorsWriter."""

    def __init__(self) -> None:
        super().__init__(SHARDED_BACKEND, FORMAT_VERSION)

    def save(self, sharded_state_dict: ShardedStateDict, checkpoint_dir: str | Path) -> None:
        # Only main replicas are written: a replicated weight goes to disk once, by the rank megatron names.
        by_key, _, _ = _replace_state_dict_keys_with_sharded_keys(sharded_state_dict, keep_only_main_replica=True)
        if any(isinstance(item, ShardedObject) for items in by_key.values() for item in items):
            raise CheckpointingException("ShardedObjects reached the sharded strategy; they belong to the JSON common strategy.")
        torch_state = mcore_to_pyt_state_dict(by_key, is_loading=False)
        writer = SafetensorsWriter(Path(checkpoint_dir) / SHARDS)
        with _as_checkpoint_error(f"writing the Megatron shards to {checkpoint_dir}"):
            dcp.save(torch_state, storage_writer=writer, planner=MCoreSavePlanner(flatten_state_dict=False))

    @property
    def can_handle_sharded_objects(self) -> bool:
        return False


class SafetensorsLoadShardedStrategy(LoadShardedStrategy):
    """Megatron's TorchDistLoadShardedStrategy.load through SafetensorsReader.

    Resharding is DCP's: each rank asks for the global slices its ShardedTensors cover, whatever
    TP layout wrote them, and the reader cuts them out of the stored chunks.
    """

    def load(self, sharded_state_dict: ShardedStateDict, checkpoint_dir: str | Path) -> StateDict:
        tensors = [item for item in nested_values(sharded_state_dict) if isinstance(item, ShardedTensor)]
        by_key, flat_mapping, rename_mapping = _replace_state_dict_keys_with_sharded_keys(sharded_state_dict)
        torch_state = mcore_to_pyt_state_dict(by_key, is_loading=True)
        planner = MCoreLoadPlanner(
            shapes_validation_sharded_tensors=[t for t in tensors if not t.allow_shape_mismatch],
            allow_shape_mismatch_sharded_tensors={t.key: t for t in tensors if t.allow_shape_mismatch},
        )
        with _as_checkpoint_error(f"reading the Megatron shards in {checkpoint_dir}"):
            dcp.load(torch_state, storage_reader=SafetensorsReader(Path(checkpoint_dir) / SHARDS), planner=planner)
        unwrapped = {key: _unwrap_pyt_sharded_tensor(value) for key, value in torch_state.items()}
        loaded = _replace_sharded_keys_with_state_dict_keys(unwrapped, flat_mapping, rename_mapping)
        _restore_dict_types(loaded, sharded_state_dict)
        return loaded

    def load_tensors_metadata(self, checkpoint_dir: str | Path, metadata: Any = None) -> dict[str, ShardedTensor]:
        """Each stored tensor's key, global shape and dtype (no data), as megatron's torch_dist reports them."""
        if metadata is None:
            metadata = SafetensorsReader(Path(checkpoint_dir) / SHARDS).read_metadata()
        return {
            key: ShardedTensor.from_rank_offsets(
                key, torch.empty(entry.size, dtype=entry.properties.dtype, device="meta")
            ).without_data()
            for key, entry in metadata.state_dict_metadata.items()
        }

    def remove_sharded_tensors(self, checkpoint_dir: str | Path, key_prefix: str) -> None:
        raise NotImplementedError("rlplane checkpoints are written whole; save a new checkpoint instead.")

    def check_backend_compatibility(self, loaded_backend: str) -> None:
        _check_backend(loaded_backend, SHARDED_BACKEND, "sharded")

    def check_version_compatibility(self, loaded_version: int) -> None:
        _check_version(loaded_version, "sharded")


class JsonSaveCommonStrategy(SaveCommonStrategy):
    """Rank 0 writes the common state; each ShardedObject is written by the rank holding its main replica."""

    def __init__(self) -> None:
        super().__init__(COMMON_BACKEND, FORMAT_VERSION)

    def save_common(self, common_state_dict: StateDict, checkpoint_dir: str | Path) -> None:
        if torch.distributed.get_rank() == 0:
            write_state(Path(checkpoint_dir) / COMMON, common_state_dict)

    def save_sharded_objects(self, sharded_objects_state_dict: ShardedStateDict, checkpoint_dir: str | Path) -> None:
        for item in nested_values(sharded_objects_state_dict):
            if is_main_replica(item.replica_id):
                write_state(object_stem(Path(checkpoint_dir), item.unique_key), item.data)

    @property
    def can_handle_sharded_objects(self) -> bool:
        return True


class JsonLoadCommonStrategy(LoadCommonStrategy):
    """Reads what JsonSaveCommonStrategy wrote; every rank reads the common state."""

    def load_common(self, checkpoint_dir: str | Path) -> StateDict:
        return read_state(Path(checkpoint_dir) / COMMON)

    def load_sharded_objects(self, sharded_objects_state_dict: ShardedStateDict, checkpoint_dir: str | Path) -> Any:
        return dict_list_map_inplace(
            lambda item: read_state(object_stem(Path(checkpoint_dir), item.unique_key)), sharded_objects_state_dict
        )

    def load_sharded_metadata(self, checkpoint_dir: str | Path) -> ShardedStateDict:
        return {key: ShardedObject.empty_from_unique_key(key) for key in object_keys(Path(checkpoint_dir))}

    @property
    def can_handle_sharded_objects(self) -> bool:
        return True

    def check_backend_compatibility(self, loaded_backend: str) -> None:
        _check_backend(loaded_backend, COMMON_BACKEND, "common")

    def check_version_compatibility(self, loaded_version: int) -> None:
        _check_version(loaded_version, "common")
