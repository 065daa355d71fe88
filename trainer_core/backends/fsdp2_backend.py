"""PyTorch FSDP2 (`fully_shard`): parameters, gradients and optimizer state sharded per transformer block.

`prepare` shards each repeated block, then the root, over a 1-D mesh of all ranks; the parameters
become DTensors in place, so the recipe's optimizer is pointed at them (same groups, same settings)
and its schedule stays valid. Mixed precision is FSDP2's policy (bf16/fp16 compute, fp32 gradient
reduction and fp32 sharded masters), so `autocast` does nothing.

Checkpoints are sharded: `save_sharded_state` has every rank write its own shards of the model's and
the optimizer's state (torch.distributed.checkpoint's sharded state dict, optimizer keyed by
parameter name) through our safetensors + JSON storage layer, and `load_sharded_state` reads them
back after `prepare` for any number of processes. `full_state` still gathers the whole model, for
the checkpoint's Hugging Face model/ and the final export; `load_optimizer_state` scatters a
gathered optimizer state (a checkpoint written before sharded ones) back into the shards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    get_state_dict,
    set_optimizer_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.distributed.tensor import DTensor

from rlplane.spec.sections import Fsdp2Backend as Fsdp2BackendSpec
from rlplane.spec.sections import TrainSpec
from trainer_core.backends.base import Backend, BackendError, applies_update, share_tied
from trainer_core.backends.batching import accumulation_steps
from trainer_core.backends.dist import DistEnv, default_device, init_process_group
from trainer_core.backends.torch_backend import seed_rank
from trainer_core.checkpoint.sharded import load_sharded, save_sharded, saved_keys
from trainer_core.models.speed import repeated_blocks

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
# The optimizer's state flattened to one key per value (`state.<param>.exp_avg`, `param_groups.<param>.lr`):
# tensors and plain values can then be stored apart, and keys name parameters, not indices.
_SHARDED = StateDictOptions(flatten_optimizer_state_dict=True)
_MODEL, _OPTIMIZER = "model.", "optimizer."


def unfuse_for_sharded_scaler(optimizer: torch.optim.Optimizer) -> None:
    """Step `optimizer` with the foreach kernel and let ShardedGradScaler skip overflowing steps itself.

    The sharded scaler's found-inf flag is a 1-element tensor, which fused Adam subtracts in place from its 0-dim
    step counters: "output with shape [] doesn't match the broadcast shape [1]" (torch 2.11 on an H200, and on the
    CPU; should torch fix it, tests/test_backend_fsdp2.py says so and this can go). In place, so a scheduler built on
    the optimizer stays valid."""
    for group in [optimizer.defaults, *optimizer.param_groups]:
        if group.get("fused"):
            group["fused"], group["foreach"] = None, True
    # The scaler hands its scale and flag to an optimizer that says it takes them (a fused one does).
    optimizer._step_supports_amp_scaling = False


class Fsdp2Backend(Backend):
    sharded_kind = "fsdp2"

    def __init__(self, spec: Fsdp2BackendSpec, train: TrainSpec, env: DistEnv | None = None) -> None:
        env = env or DistEnv.from_environ()
        self.spec, self.train = spec, train
        self.rank, self.world_size, self.local_rank = env.rank, env.world_size, env.local_rank
        self.device = default_device(env)
        if spec.precision == "fp16" and self.device.type != "cuda":
            raise BackendError("backend.precision fp16 needs a CUDA GPU (no fp16 loss scaling on CPU): use bf16 or fp32 on CPU.")
        self.accumulation_steps = accumulation_steps(train, env.world_size)  # checks the batch splits evenly
        self._model: nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._scheduler: Any = None
        seed_rank(train.seed, self.rank)
        # fully_shard needs a process group even for one process.
        self._owns_group = init_process_group(env, self.device, one_process_group=True)
        # fp16 overflows without loss scaling; a rank's shard alone cannot tell, so this scaler agrees over ranks.
        self._scaler = ShardedGradScaler(enabled=spec.precision == "fp16")

    def prepare(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None
    ) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
        if optimizer.state:
            raise RuntimeError("backend.prepare needs a fresh optimizer: FSDP2 replaces the parameters it holds state for.")
        model = model.to(self.device)
        names = {id(param): name for name, param in model.named_parameters()}
        # Each group's parameters by name: sharding swaps every parameter for a DTensor.
        group_names = []
        for index, group in enumerate(optimizer.param_groups):
            missing = [tuple(p.shape) for p in group["params"] if id(p) not in names]
            if missing:
                raise BackendError(f"optimizer group {index} holds parameters of shapes {missing[:3]} that are not the model's.")
            group_names.append([names[id(p)] for p in group["params"]])
        self._shard(model)
        sharded = dict(model.named_parameters())
        # In place, so the scheduler built on this optimizer (and its groups' initial_lr) stays valid.
        for group, params in zip(optimizer.param_groups, group_names, strict=True):
            group["params"] = [sharded[name] for name in params]
        if self._scaler.is_enabled():
            unfuse_for_sharded_scaler(optimizer)
        self._model, self._optimizer, self._scheduler = model, optimizer, scheduler
        return model, optimizer, scheduler

    def _shard(self, model: nn.Module) -> None:
        mesh = init_device_mesh(self.device.type, (self.world_size,))
        dtype = DTYPES[self.spec.precision]
        options: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": self.spec.reshard_after_forward}
        if dtype is not None:
            options["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        if self.spec.cpu_offload and self.device.type != "cpu":  # on CPU the shards live in CPU memory already
            options["offload_policy"] = CPUOffloadPolicy()
        for block in repeated_blocks(model):
            fully_shard(block, **options)
        fully_shard(model, **options)

    def backward(self, loss: torch.Tensor, accumulation_steps: int = 1) -> None:
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {accumulation_steps}.")
        self._scaler.scale(loss / accumulation_steps).backward()

    def step(self) -> float:
        model, optimizer = self._prepared()
        self._scaler.unscale_(optimizer)  # clip the true gradients, not the fp16-scaled ones
        params = [p for p in model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])  # a reduction over the shards
        if self.train.max_grad_norm is not None:
            torch.nn.utils.clip_grads_with_norm_(params, self.train.max_grad_norm, norm)
        norm = float(norm.full_tensor() if isinstance(norm, DTensor) else norm)
        if applies_update(norm) or self._scaler.is_enabled():  # fp16's scaler skips an overflow itself
            self._scaler.step(optimizer)
        self._scaler.update()
        if self._scheduler is not None:
            self._scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return norm

    def no_sync(self, model: nn.Module) -> AbstractContextManager[None]:
        return _gradient_sync_off(model) if isinstance(model, FSDPModule) else contextlib.nullcontext()

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model  # fully_shard changes the module in place; there is no wrapper

    def autocast(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()  # the mixed precision policy casts parameters at each all-gather

    @property
    def forward_is_collective(self) -> bool:
        return self.world_size > 1

    def prepare_frozen(self, model: nn.Module) -> nn.Module:
        """A frozen model is sharded per block like the policy (no optimizer, never gathered for a checkpoint)."""
        model = model.to(self.device).eval().requires_grad_(False)
        self._shard(model)
        return model

    def describe_placement(self, model: nn.Module) -> str:
        params = list(model.parameters())
        total = sum(p.numel() for p in params)
        local = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in params)
        return f"FSDP2-sharded over {self.world_size} ranks ({local:,} of {total:,} parameters on rank {self.rank})"

    def generate(self, model: nn.Module, **kwargs: Any) -> Any:
        # Every forward all-gathers each block: all ranks must run as many forwards, finished or not.
        if self.world_size > 1:
            kwargs.setdefault("synced_gpus", True)
        root = self._model
        with torch.no_grad():
            if root is None or model is root or not isinstance(root, FSDPModule):
                return model.generate(**kwargs)
            # A part of the prepared model generates (PPO's policy inside its actor-critic). Only the root's
            # forward would gather the root's own parameters (embeddings, LM head) and settle which FSDP
            # state is the root, so both are done here by hand.
            root._get_fsdp_state()._lazy_init()
            root.unshard()
            try:
                return model.generate(**kwargs)
            finally:
                root.reshard()

    def full_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None
    ) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any] | None]:
        # Collectives on every rank; with cpu_offload only rank zero keeps the gathered tensors.
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(model, options=options)
        state = None if optimizer is None else get_optimizer_state_dict(model, optimizer, options=options)
        if not self.is_rank_zero:
            return None, None
        return share_tied(model, weights), state

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        model, _ = self._prepared()
        keys = list(state.get("state", {})) + [p for group in state.get("param_groups", []) for p in group.get("params", [])]
        if not all(isinstance(key, str) for key in keys):
            raise BackendError(
                "this checkpoint's optimizer state is keyed by parameter index, not name (another backend wrote it); "
                "resume it with the backend that wrote it."
            )
        # Every rank read the same full state from disk: each keeps its own shard of it.
        set_optimizer_state_dict(model, optimizer, optim_state_dict=state, options=StateDictOptions(full_state_dict=True))

    def save_sharded_state(self, directory: Path, optimizer: torch.optim.Optimizer) -> None:
        save_sharded(directory, self._sharded_state(optimizer), is_rank_zero=self.is_rank_zero)

    def load_sharded_state(self, directory: Path, optimizer: torch.optim.Optimizer) -> None:
        model, _ = self._prepared()
        # This run's own sharded state is the template: dcp reads into its shards the slices they need.
        template = self._sharded_state(optimizer)
        stateless = _stateless_parameters(model, optimizer, template.keys(), saved_keys(directory))
        left_out = {key: template.pop(key) for name, param in stateless.items() for key in _state_keys(name, optimizer, param)}
        state = load_sharded(directory, template) | left_out
        model_state = {key.removeprefix(_MODEL): value for key, value in state.items() if key.startswith(_MODEL)}
        optimizer_state = {key.removeprefix(_OPTIMIZER): value for key, value in state.items() if key.startswith(_OPTIMIZER)}
        set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state, options=_SHARDED)
        for param in stateless.values():
            optimizer.state.pop(param, None)  # as in the run that saved: no state until its first gradient

    def _sharded_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The prepared model's and `optimizer`'s state as one flat dict of this rank's DTensor shards and plain values."""
        model, _ = self._prepared()
        model_state, optimizer_state = get_state_dict(model, optimizer, options=_SHARDED)
        return {_MODEL + key: value for key, value in model_state.items()} | {
            _OPTIMIZER + key: value for key, value in optimizer_state.items()
        }

    def _prepared(self) -> tuple[nn.Module, torch.optim.Optimizer]:
        if self._model is None or self._optimizer is None:
            raise RuntimeError("call backend.prepare(model, optimizer) first.")
        return self._model, self._optimizer


def _state_keys(name: str, optimizer: torch.optim.Optimizer, param: nn.Parameter) -> list[str]:
    """The flat state-dict keys of `param`'s optimizer state (`optimizer.state.<name>.exp_avg`, ...)."""
    return [f"{_OPTIMIZER}state.{name}.{key}" for key in optimizer.state.get(param, {})]


def _stateless_parameters(
    model: nn.Module, optimizer: torch.optim.Optimizer, template: Iterable[str], saved: set[str]
) -> dict[str, nn.Parameter]:
    """Parameters that had no optimizer state when the checkpoint was saved (no gradient yet: unused so far).
    torch's state-dict API gives every parameter state (a step with zero gradients) before a load, so
    theirs is left out of the load and dropped after it."""
    keys = set(template)
    found = {}
    for name, param in model.named_parameters():
        own = [key for key in _state_keys(name, optimizer, param) if key in keys]
        if own and not any(key in saved for key in own):
            found[name] = param
    return found


@contextlib.contextmanager
def _gradient_sync_off(model: FSDPModule) -> Iterator[None]:
    """Accumulate unsharded gradients locally; the next backward outside reduce-scatters the sum."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
