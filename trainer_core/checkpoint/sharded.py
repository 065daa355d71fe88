"""A flat training state saved by every rank at once: tensors through dcp, everything else as JSON.

`save_sharded` hands the tensors (sharded DTensors or plain ones) to dcp.save with our safetensors
storage layer (dcp_storage.py), so each rank writes only its own shards; the values that are not
tensors (an optimizer's lr, betas, flags) go to `values.json`, written by rank zero, because dcp
would pickle them. `load_sharded` fills a like-shaped state in place, resharding to this run's
process count, and puts the saved values back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from trainer_core.checkpoint import codec
from trainer_core.checkpoint.dcp_storage import METADATA, SafetensorsReader, SafetensorsWriter
from trainer_core.checkpoint.errors import CheckpointError
from trainer_core.checkpoint.files import fsync_path, read_json, write_json

DCP_DIR = "dcp"  # a checkpoint's sharded state, beside model/ and the rest
VALUES = "values.json"
# Where each backend.kind that shards checkpoints keeps its state in one, each a directory whose
# metadata.json is written last: fsdp2's DCP shards (this module), megatron's dist_checkpointing
# (trainer_core/backends/megatron/dist_checkpoint.py).
SHARDED_STATE_DIRS = {"fsdp2": DCP_DIR, "megatron": "megatron"}


def sharded_state_kind(checkpoint: Path) -> str | None:
    """The backend.kind whose sharded model and optimizer state the checkpoint keeps; None for gathered state."""
    for kind, name in SHARDED_STATE_DIRS.items():
        if (Path(checkpoint) / name / METADATA).is_file():
            return kind
    return None


def has_sharded_state(checkpoint: Path) -> bool:
    """True where the checkpoint keeps its model and optimizer state in shards (fsdp2's dcp/, megatron's megatron/)."""
    return sharded_state_kind(checkpoint) is not None


def sharded_state_dir(checkpoint: Path, kind: str) -> Path:
    return Path(checkpoint) / SHARDED_STATE_DIRS[kind]


def foreign_sharded_state(checkpoint: Path, kind: str, reader: str) -> str:
    """Why `reader` (a backend.kind, or "this loader") cannot resume a checkpoint whose state `kind` sharded."""
    layouts = "any tensor_parallel size and number of processes" if kind == "megatron" else "any number of processes"
    return (
        f"{checkpoint} keeps its model and optimizer state sharded as backend.kind {kind} writes it "
        f"({SHARDED_STATE_DIRS[kind]}/), which {reader} cannot read; resume it with backend.kind: {kind} ({layouts}), "
        "or start a new run from its weights (model: run:<id>@<step>)."
    )


def saved_keys(directory: Path) -> set[str]:
    """Every key of the flat state saved in `directory`, tensors and values."""
    directory = Path(directory)
    tensors = SafetensorsReader(directory).read_metadata().state_dict_metadata.keys()
    return set(tensors) | set(read_json(directory / VALUES))


def _split(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors = {key: value for key, value in state.items() if isinstance(value, torch.Tensor)}
    return tensors, {key: value for key, value in state.items() if key not in tensors}


def save_sharded(directory: Path, state: dict[str, Any], *, is_rank_zero: bool) -> None:
    """Every rank calls it with its own shards of the same flat state (same keys on every rank)."""
    tensors, values = _split(state)
    directory = Path(directory)
    # Replicated plain tensors (an optimizer's step count) are written once, by one of the ranks holding them.
    with _as_checkpoint_error(f"writing the sharded state to {directory}"):
        dcp.save(tensors, storage_writer=SafetensorsWriter(directory), planner=DefaultSavePlanner())
    if is_rank_zero:
        spilled: dict[str, torch.Tensor] = {}
        write_json(directory / VALUES, codec.encode(values, spilled, ""))  # no tensors left: they went to dcp
        fsync_path(directory / VALUES)


def load_sharded(directory: Path, state: dict[str, Any]) -> dict[str, Any]:
    """`state` (this run's tensors, shaped and sharded as they should be) with every tensor filled from the
    checkpoint in place and every other value replaced by the saved one; the keys must be the saved ones."""
    directory = Path(directory)
    tensors, values = _split(state)
    saved = SafetensorsReader(directory).read_metadata().state_dict_metadata
    _check_same_tensors(directory, saved, tensors)
    saved_values = codec.decode(read_json(directory / VALUES), {})
    if saved_values.keys() != values.keys():
        raise CheckpointError(
            f"the values in {directory / VALUES} ({_differences(saved_values.keys(), values.keys())}) do not fit this "
            "run's optimizer; resume with the spec and optimizer the checkpoint was written with."
        )
    with _as_checkpoint_error(f"reading the sharded state in {directory}"):
        dcp.load(tensors, storage_reader=SafetensorsReader(directory), planner=DefaultLoadPlanner())
    return {**tensors, **saved_values}


@contextlib.contextmanager
def _as_checkpoint_error(action: str) -> Iterator[None]:
    """dcp gathers every rank's failure into a CheckpointException, a BaseException that `except Exception`
    misses: raised again as our CheckpointError, with the first rank's reason."""
    try:
        yield
    except CheckpointException as exc:
        rank, (error, _) = next(iter(exc.failures.items()))
        raise CheckpointError(f"{action} failed on rank {rank}: {type(error).__name__}: {error}") from exc


def _check_same_tensors(directory: Path, saved: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    """dcp.load would ignore saved entries this run lacks; a resume must find exactly its own state."""
    if saved.keys() != tensors.keys():
        raise CheckpointError(
            f"the sharded state in {directory} ({_differences(saved.keys(), tensors.keys())}) does not fit this "
            "run's model and optimizer; resume with the spec the checkpoint was written with."
        )
    for key, tensor in tensors.items():
        entry = saved[key]
        if not isinstance(entry, TensorStorageMetadata) or entry.size != tensor.size():  # a DTensor's size is global
            size = tuple(entry.size) if isinstance(entry, TensorStorageMetadata) else "not a tensor"
            raise CheckpointError(
                f"{key} is {size} in the checkpoint {directory}, {tuple(tensor.size())} here; "
                "resume with the model spec the checkpoint was written with."
            )


def _differences(saved: Any, expected: Any) -> str:
    missing, extra = sorted(set(expected) - set(saved)), sorted(set(saved) - set(expected))
    return f"missing {missing[:3]}, unexpected {extra[:3]}"
