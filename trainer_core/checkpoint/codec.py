"""Nested Python state <-> (JSON document, flat tensor dict), so that state dicts never need pickle.

Tensors move to a safetensors file under their dotted path (`state.0.exp_avg`) and leave a
`{"__tensor__": key}` marker behind. Tuples and dicts with non-string keys (the optimizer's
integer parameter ids) are tagged so that decoding rebuilds exactly the same types.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainer_core.checkpoint.errors import CheckpointError

TENSOR, TUPLE, ITEMS, FLOAT = "__tensor__", "__tuple__", "__items__", "__float__"
_TAGS = {TENSOR, TUPLE, ITEMS, FLOAT}


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def encode(value: Any, tensors: dict[str, torch.Tensor], path: str) -> Any:
    """`value` as JSON-ready data; every tensor in it is added to `tensors` under its dotted path."""
    if isinstance(value, torch.Tensor):
        if path in tensors:
            raise CheckpointError(f"two tensors map to the key {path!r}; avoid dots in state dict keys.")
        # safetensors wants contiguous CPU tensors that share no memory with each other.
        tensors[path] = value.detach().to("cpu", copy=True).contiguous()
        return {TENSOR: path}
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {FLOAT: repr(value)}
    if isinstance(value, tuple):
        return {TUPLE: [encode(item, tensors, _join(path, i)) for i, item in enumerate(value)]}
    if isinstance(value, list):
        return [encode(item, tensors, _join(path, i)) for i, item in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value) and not _TAGS & value.keys():
            return {key: encode(item, tensors, _join(path, key)) for key, item in value.items()}
        return {
            ITEMS: [
                [encode(key, tensors, _join(path, f"key{i}")), encode(item, tensors, _join(path, key))]
                for i, (key, item) in enumerate(value.items())
            ]
        }
    raise CheckpointError(
        f"cannot store {path!r} of type {type(value).__name__} without pickle; "
        "keep checkpointed state to tensors, numbers, strings, lists, tuples and dicts."
    )


def decode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The inverse of `encode`."""
    if isinstance(value, list):
        return [decode(item, tensors) for item in value]
    if not isinstance(value, dict):
        return value
    if TENSOR in value:
        key = value[TENSOR]
        if key not in tensors:
            raise CheckpointError(f"tensor {key!r} is named in the JSON state but missing from its safetensors file.")
        return tensors[key]
    if FLOAT in value:
        return float(value[FLOAT])
    if TUPLE in value:
        return tuple(decode(item, tensors) for item in value[TUPLE])
    if ITEMS in value:
        return {decode(key, tensors): decode(item, tensors) for key, item in value[ITEMS]}
    return {key: decode(item, tensors) for key, item in value.items()}
