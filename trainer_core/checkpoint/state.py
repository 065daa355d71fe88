"""Optimizer, LR-scheduler and RNG state as safetensors + JSON pairs (no pickle).

Each state is split by `codec.encode`: tensors into `<name>.safetensors`, everything else
(hyperparameters, step counters, tuples such as Adam's betas) into `<name>.json`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from trainer_core.checkpoint import codec
from trainer_core.checkpoint.errors import CheckpointError
from trainer_core.checkpoint.files import read_json, read_tensors, write_json, write_tensors

try:
    import numpy as np
except ImportError:  # numpy is optional; without it there is no numpy RNG to save
    np = None


def save_state(root: Path, name: str, state: dict[str, Any]) -> None:
    """Write `state` as `<name>.json` and its tensors (maybe none) as `<name>.safetensors`."""
    tensors: dict[str, torch.Tensor] = {}
    document = codec.encode(state, tensors, path="")
    write_json(root / f"{name}.json", document)
    write_tensors(root / f"{name}.safetensors", tensors)


def load_state(root: Path, name: str) -> dict[str, Any]:
    path = root / f"{name}.json"
    if not path.exists():
        raise CheckpointError(f"{path} is missing: the checkpoint was saved without {name} state.")
    return codec.decode(read_json(path), read_tensors(root / f"{name}.safetensors"))


def save_optimizer(root: Path, optimizer: torch.optim.Optimizer) -> None:
    save_state(root, "optimizer", optimizer.state_dict())


def load_optimizer(root: Path, optimizer: torch.optim.Optimizer) -> None:
    optimizer.load_state_dict(load_state(root, "optimizer"))


def save_scheduler(root: Path, scheduler: Any) -> None:
    save_state(root, "scheduler", scheduler.state_dict())


def load_scheduler(root: Path, scheduler: Any) -> None:
    scheduler.load_state_dict(load_state(root, "scheduler"))


def capture_rng() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(torch CPU/CUDA generator states as tensors, Python/numpy states as JSON-ready data)."""
    tensors = {"torch.cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for index, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch.cuda.{index}"] = cuda_state
    python = codec.encode(random.getstate(), {}, "python")
    document: dict[str, Any] = {"python": python, "numpy": None}
    if np is not None:
        state = np.random.get_state(legacy=False)
        state["state"] = {**state["state"], "key": state["state"]["key"].tolist()}
        document["numpy"] = state
    return tensors, document


def save_rng(root: Path) -> None:
    tensors, document = capture_rng()
    write_tensors(root / "rng.safetensors", tensors)
    write_json(root / "rng.json", document)


def load_rng(root: Path) -> None:
    """Restore every RNG the checkpoint holds; CUDA states only for devices present here."""
    tensors = read_tensors(root / "rng.safetensors")
    document = read_json(root / "rng.json")
    torch.set_rng_state(tensors["torch.cpu"])
    cuda_states = sorted((key for key in tensors if key.startswith("torch.cuda.")), key=lambda k: int(k.rsplit(".", 1)[1]))
    if cuda_states and torch.cuda.is_available():
        for key in cuda_states[: torch.cuda.device_count()]:
            torch.cuda.set_rng_state(tensors[key], device=int(key.rsplit(".", 1)[1]))
    random.setstate(codec.decode(document["python"], {}))
    if np is not None and document.get("numpy") is not None:
        state = document["numpy"]
        state["state"]["key"] = np.asarray(state["state"]["key"], dtype=np.uint32)
        np.random.set_state(state)
