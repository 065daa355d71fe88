"""Plain PyTorch: one process on CPU or one GPU, DistributedDataParallel across ranks."""

from __future__ import annotations

import contextlib
import random
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from rlplane.spec.sections import TorchBackend as TorchBackendSpec
from rlplane.spec.sections import TrainSpec
from trainer_core.backends.base import Backend, BackendError, applies_update
from trainer_core.backends.batching import accumulation_steps
from trainer_core.backends.dist import DistEnv, default_device, init_process_group


def seed_rank(seed: int, rank: int) -> None:
    """Seed python and torch with train.seed + rank, so ranks sample different rollouts.

    Weight init and data order use train.seed itself (the same on every rank), and DDP broadcasts
    rank zero's weights anyway.
    """
    random.seed(seed + rank)
    torch.manual_seed(seed + rank)  # seeds every CUDA device too


class TorchBackend(Backend):
    def __init__(self, spec: TorchBackendSpec, train: TrainSpec, env: DistEnv | None = None) -> None:
        env = env or DistEnv.from_environ()
        self.spec, self.train = spec, train
        self.rank, self.world_size, self.local_rank = env.rank, env.world_size, env.local_rank
        self.device = default_device(env)
        if env.is_distributed and not spec.ddp:
            raise BackendError(f"backend.ddp is false but WORLD_SIZE={env.world_size}: set backend.ddp: true or run one process.")
        if spec.precision == "fp16" and self.device.type != "cuda":
            raise BackendError(
                "backend.precision fp16 needs a CUDA GPU (CPU autocast has no fp16 loss scaling): use bf16 or fp32 on CPU."
            )
        self.accumulation_steps = accumulation_steps(train, env.world_size)  # checks the batch splits evenly
        self._dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[spec.precision]
        # fp16 overflows without loss scaling; bf16 has fp32's range and needs none.
        self._scaler = torch.amp.GradScaler("cuda", enabled=spec.precision == "fp16")
        self._model: nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._scheduler: Any = None
        seed_rank(train.seed, self.rank)
        self._owns_group = init_process_group(env, self.device)

    def prepare(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None
    ) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
        model = model.to(self.device)  # in place: the optimizer's parameters stay the model's
        if self.world_size > 1:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            model = DistributedDataParallel(model, device_ids=device_ids)
        self._model, self._optimizer, self._scheduler = model, optimizer, scheduler
        return model, optimizer, scheduler

    def backward(self, loss: torch.Tensor, accumulation_steps: int = 1) -> None:
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {accumulation_steps}.")
        self._scaler.scale(loss / accumulation_steps).backward()

    def step(self) -> float:
        model, optimizer = self._prepared()
        self._scaler.unscale_(optimizer)  # clip the true gradients, not the fp16-scaled ones
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads)
        if self.train.max_grad_norm is not None:
            torch.nn.utils.clip_grads_with_norm_(model.parameters(), self.train.max_grad_norm, norm)
        if applies_update(norm) or self._scaler.is_enabled():  # fp16's scaler skips an overflow itself
            self._scaler.step(optimizer)
        self._scaler.update()
        if self._scheduler is not None:
            self._scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def no_sync(self, model: nn.Module) -> AbstractContextManager[None]:
        return model.no_sync() if isinstance(model, DistributedDataParallel) else contextlib.nullcontext()

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, DistributedDataParallel) else model

    def autocast(self) -> AbstractContextManager[Any]:
        if self._dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self._dtype)

    def _prepared(self) -> tuple[nn.Module, torch.optim.Optimizer]:
        if self._model is None or self._optimizer is None:
            raise RuntimeError("call backend.prepare(model, optimizer) before backend.step().")
        return self._model, self._optimizer
