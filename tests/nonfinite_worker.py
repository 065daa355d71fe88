"""A step whose gradient is NaN, on each backend named, in one process: the update must not be applied.

    python tests/nonfinite_worker.py OUT.json torch deepspeed:0 deepspeed:2:bf16 deepspeed:3 fsdp2 megatron

For each backend: one finite step (so the optimizer has state), then a step whose loss is NaN, then another
finite step. OUT.json maps each name to {"norm": the NaN step's reported norm, "weights_kept": bool,
"optimizer_kept": bool, "then_trains": bool (the finite step after it changes the weights)}.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import torch

from rlplane.spec import parse_spec
from tests.ddp_worker import fixed_batch
from trainer_core.backends import Backend, DistEnv, make_backend
from trainer_core.losses import sft_loss
from trainer_core.models import build_builtin
from trainer_core.recipes.common import make_optimizer


def backend_spec(name: str) -> dict[str, Any]:
    kind, *rest = name.split(":")
    spec: dict[str, Any] = {"kind": kind, "precision": "bf16" if "bf16" in rest else "fp32"}
    if kind == "deepspeed":
        spec["zero_stage"] = int(rest[0])
    return spec


def flat(state: Any) -> torch.Tensor:
    """Every tensor and number in a (nested) state, in a fixed order, as one float64 vector."""
    if isinstance(state, torch.Tensor):
        tensor = state.full_tensor() if hasattr(state, "full_tensor") else state
        return tensor.detach().double().flatten().cpu()
    if isinstance(state, dict):
        parts = [flat(state[key]) for key in sorted(state, key=str)]
    elif isinstance(state, list | tuple):
        parts = [flat(item) for item in state]
    elif isinstance(state, int | float) and not isinstance(state, bool):
        return torch.tensor([float(state)], dtype=torch.float64)
    else:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def snapshot(backend: Backend, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[torch.Tensor, torch.Tensor]:
    weights, state = backend.full_state(model, optimizer)
    if weights is None:  # a replica backend: the live objects are whole
        weights, state = backend.unwrap(model).state_dict(), optimizer.state_dict()["state"]
    return flat(weights).clone(), flat({k: v for k, v in state.items() if k != "param_groups"}).clone()


def check(name: str) -> dict[str, Any]:
    spec = parse_spec(
        {
            "name": "nan-step",
            "algorithm": "sft",
            "model": {"path": "builtin:tiny-gpt2"},
            "data": {"source": "builtin:arithmetic"},
            "backend": backend_spec(name),
            "train": {"steps": 3, "batch_size": 2, "lr": 1e-2},
        }
    )
    # Not closed: the first backend's process group serves them all (DeepSpeed keeps its groups in globals).
    backend = make_backend(spec.backend, spec.train, DistEnv())
    model, _ = build_builtin("tiny-gpt2", kind="causal", seed=0)
    model, optimizer, _ = backend.prepare(model, make_optimizer(model, spec.train))
    ids = fixed_batch(backend.unwrap(model).config.vocab_size, 2).to(backend.device)

    def step(scale: float) -> float:
        with backend.autocast():
            loss_sum, tokens = sft_loss(model(input_ids=ids).logits, ids, reduction="sum")
        loss = loss_sum / tokens * scale
        backend.backward(loss)
        return backend.step()

    step(1.0)
    before = snapshot(backend, model, optimizer)
    norm = step(math.nan)
    after = snapshot(backend, model, optimizer)
    step(1.0)
    later = snapshot(backend, model, optimizer)
    return {
        "norm": norm if math.isfinite(norm) else str(norm),
        "weights_kept": bool(torch.equal(before[0], after[0])),
        "optimizer_kept": bool(torch.equal(before[1], after[1])),
        "then_trains": not torch.equal(after[0], later[0]),
    }


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.write_text(json.dumps({name: check(name) for name in sys.argv[2:]}))
    torch.distributed.destroy_process_group()
