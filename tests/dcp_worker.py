"""Saves a small sharded state with dcp and our safetensors storage layer, then loads it back resharded.

    python -m torch.distributed.run --nproc_per_node 2 tests/dcp_worker.py DIR

Every rank writes its shards of `full_state()` (DTensors split along rows or columns, a replicated
plain tensor, a 0-d step count) to DIR, then loads them into DTensors split the other way and
checks each against the whole tensor; tests/test_dcp_checkpoint.py loads DIR again in one process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from trainer_core.checkpoint.sharded import load_sharded, save_sharded


def full_state() -> dict:
    """The whole tensors (the same on every rank and in the test) and the non-tensor values."""
    generator = torch.Generator().manual_seed(7)
    return {
        "model.embed.weight": torch.randn(10, 6, generator=generator),  # 10 rows: an uneven split over 3+ ranks too
        "model.head.weight": torch.randn(5, 6, generator=generator).to(torch.bfloat16),
        "model.norm.bias": torch.randn(7, generator=generator),
        "optimizer.state.head.step": torch.tensor(12.0),
        "optimizer.param_groups.head.lr": 1e-3,
        "optimizer.param_groups.head.betas": (0.9, 0.999),
        "optimizer.param_groups.head.foreach": None,
    }


def sharded(state: dict, mesh: object, dim: int) -> dict:
    """The 2-d tensors as DTensors split along `dim`, the 1-d one along its only dim, the rest as they are."""
    out = {}
    for key, value in state.items():
        if isinstance(value, torch.Tensor) and value.ndim >= 1:
            out[key] = distribute_tensor(value.clone(), mesh, [Shard(min(dim, value.ndim - 1))])
        else:
            out[key] = value.clone() if isinstance(value, torch.Tensor) else value
    return out


def main(directory: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    save_sharded(directory, sharded(full_state(), mesh, dim=0), is_rank_zero=rank == 0)
    dist.barrier()

    # Loaded into DTensors split along the other dimension: each rank reads slices of both ranks' files.
    template = sharded({k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else 0 for k, v in full_state().items()}, mesh, 1)
    loaded = load_sharded(directory, template)
    for key, expected in full_state().items():
        value = loaded[key]
        if isinstance(expected, torch.Tensor):
            whole = value.full_tensor() if hasattr(value, "full_tensor") else value
            assert whole.dtype == expected.dtype and torch.equal(whole, expected), key
        else:
            assert value == expected, (key, value)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
