"""DeepSpeed ZeRO (stages 0-3, CPU/NVMe offload, bf16/fp16) behind the Backend interface.

The recipe keeps its own loop: DeepSpeed runs with `managed_gradient_accumulation: false`, so
`backward` only accumulates (the loss already divided by the micro-batch count, as the interface
says) and `step` is the accumulation boundary: it reduces, clips to train.max_grad_norm and updates.
The LR schedule is the recipe's (stepped here, like the torch backend), never DeepSpeed's.

Checkpoints do not use DeepSpeed's own files (they are pickles): `full_state` gathers the fp32
master weights and Adam's moments by parameter name through DeepSpeed's fragment API, so rank zero
writes them as safetensors in the same layout for any stage and any number of processes, and
`load_optimizer_state` scatters them back. Weights are loaded into the plain model before
`deepspeed.initialize`, which partitions them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from rlplane.spec.sections import DeepSpeedBackend as DeepSpeedBackendSpec
from rlplane.spec.sections import TrainSpec
from trainer_core.backends.base import Backend, BackendError, applies_update
from trainer_core.backends.batching import accumulation_steps
from trainer_core.backends.dist import DistEnv, default_device, init_process_group
from trainer_core.backends.torch_backend import seed_rank

ADAM_STATES = ("exp_avg", "exp_avg_sq")


def ds_config(spec: DeepSpeedBackendSpec, train: TrainSpec, world_size: int, micro_batch: int, accumulation: int) -> dict:
    """The DeepSpeed config a spec means, with spec.ds_config merged over it (conflicts are refused by the spec)."""
    zero: dict[str, Any] = {"stage": spec.zero_stage}
    if spec.offload != "none":
        device = {"device": spec.offload, **({"nvme_path": spec.nvme_path} if spec.offload == "nvme" else {})}
        zero["offload_optimizer"] = device
        if spec.zero_stage == 3:
            zero["offload_param"] = dict(device)
    config: dict[str, Any] = {
        "train_batch_size": micro_batch * accumulation * world_size,
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": accumulation,
        "managed_gradient_accumulation": False,
        "zero_optimization": zero,
        # Our AdamW (the recipe's optimizer) is the client optimizer, offloaded or not.
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    # Explicit even when off: DeepSpeed's default is to clip at 1.0.
    config["gradient_clipping"] = train.max_grad_norm if train.max_grad_norm is not None else 0.0
    if spec.precision == "bf16":
        config["bf16"] = {"enabled": True}
    elif spec.precision == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0}  # dynamic loss scaling
    return _merged(config, spec.ds_config or {})


def _merged(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


class DeepSpeedBackend(Backend):
    def __init__(self, spec: DeepSpeedBackendSpec, train: TrainSpec, env: DistEnv | None = None) -> None:
        env = env or DistEnv.from_environ()
        self.spec, self.train = spec, train
        self.rank, self.world_size, self.local_rank = env.rank, env.world_size, env.local_rank
        self.device = default_device(env)
        if spec.precision == "fp16" and self.device.type != "cuda":
            raise BackendError("backend.precision fp16 needs a CUDA GPU: use bf16 or fp32 on CPU.")
        self.accumulation_steps = accumulation_steps(train, env.world_size)
        self._engine: Any = None
        self._scheduler: Any = None
        self._plain_norm: float | None = None
        self._frozen_engines: list[Any] = []  # kept alive: they own the partitioning hooks of frozen models
        seed_rank(train.seed, self.rank)
        self._owns_group = not dist.is_initialized()
        if not env.is_distributed:  # several ranks: DeepSpeed joins them below, through torchrun's store
            init_process_group(env, self.device, one_process_group=True)
        # Without a launcher DeepSpeed would look for MPI; one process is a world of one.
        for name, value in (
            ("RANK", env.rank),
            ("WORLD_SIZE", env.world_size),
            ("LOCAL_RANK", env.local_rank),
            ("MASTER_ADDR", env.master_addr),
            ("MASTER_PORT", env.master_port),
        ):
            os.environ.setdefault(name, str(value))
        import deepspeed

        # DeepSpeed's ZeRO-3 gathers call a torch collective that now warns on every call (hundreds per step).
        warnings.filterwarnings("ignore", message=r".*all_gather_into_tensor.* is deprecated", category=FutureWarning)
        deepspeed.init_distributed(
            dist_backend="nccl" if self.device.type == "cuda" else "gloo", auto_mpi_discovery=False, verbose=False
        )
        self._hf_zero3: Any = None
        if spec.zero_init and spec.zero_stage == 3:
            from transformers.integrations import HfDeepSpeedConfig

            # While this object lives, transformers builds every model (from_pretrained, from_config) inside
            # deepspeed.zero.Init: each layer is partitioned as soon as it exists, and from_pretrained loads
            # the weights layer by layer into the partitions.
            self._hf_zero3 = HfDeepSpeedConfig(self._config())

    @property
    def stage(self) -> int:
        return self.spec.zero_stage

    @property
    def _plain(self) -> bool:
        """No ZeRO and no mixed precision: DeepSpeed steps the client optimizer over the model's own parameters."""
        return self.stage == 0 and self.spec.precision == "fp32"

    def _clip_before_update(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads)
        if not applies_update(norm):
            # ZeRO's optimizers skip a non-finite step themselves; here the update is about to run: without
            # gradients AdamW leaves every parameter and its state as they are.
            optimizer.zero_grad(set_to_none=True)
        elif self.train.max_grad_norm is not None:
            torch.nn.utils.clip_grads_with_norm_(
                [p for group in optimizer.param_groups for p in group["params"]], self.train.max_grad_norm, norm
            )
        self._plain_norm = float(norm)

    def _config(self) -> dict:
        micro = self.train.micro_batch_size or max(1, self.train.batch_size // (self.world_size * self.accumulation_steps))
        return ds_config(self.spec, self.train, self.world_size, micro, self.accumulation_steps)

    @property
    def builds_partitioned(self) -> bool:
        return self._hf_zero3 is not None

    def whole_parameters(self, params: Iterable[nn.Parameter]) -> AbstractContextManager[Any]:
        partitioned = [p for p in params if hasattr(p, "ds_id")]
        if not partitioned:  # below ZeRO-3, or modules built outside zero.Init and not yet prepared
            return contextlib.nullcontext()
        import deepspeed

        # ZeRO-3 keeps a partition per rank (and small parameters whole besides): gather, let the caller
        # change the whole tensors, then partition again from rank zero's copy.
        return deepspeed.zero.GatheredParameters(partitioned, modifier_rank=0)

    def prepare(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None
    ) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
        import deepspeed

        config = self._config()
        if self.builds_partitioned and self.is_rank_zero:
            print(f"model built by zero.Init: {self.describe_placement(model)}", file=sys.stderr, flush=True)
        if self._plain:
            # Stage 0 in fp32 steps our optimizer itself and clips without keeping the norm: measure and
            # clip in a hook that runs after DeepSpeed's reduction, just before the update.
            config["gradient_clipping"] = 0.0
            optimizer.register_step_pre_hook(self._clip_before_update)
        engine, ds_optimizer, _, _ = deepspeed.initialize(model=model.to(self.device), optimizer=optimizer, config=config)
        self._engine, self._scheduler = engine, scheduler
        return engine, ds_optimizer, scheduler

    def backward(self, loss: torch.Tensor, accumulation_steps: int = 1) -> None:
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {accumulation_steps}.")
        self._prepared().backward(loss / accumulation_steps, scale_wrt_gas=False)

    def step(self) -> float:
        engine = self._prepared()
        engine.step()
        norm = self._plain_norm if self._plain_norm is not None else engine.get_global_grad_norm()
        if self._scheduler is not None:
            self._scheduler.step()
        return float(norm if norm is not None else 0.0)

    def no_sync(self, model: nn.Module) -> AbstractContextManager[None]:
        return contextlib.nullcontext()  # unmanaged accumulation: backward never reduces before step()

    def unwrap(self, model: nn.Module) -> nn.Module:
        return getattr(model, "module", model) if model is self._engine else model

    def autocast(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()  # the engine casts the module to its precision

    @property
    def forward_is_collective(self) -> bool:
        return self.stage == 3 and self.world_size > 1

    def prepare_frozen(self, model: nn.Module) -> nn.Module:
        """Below ZeRO-3 every rank holds the policy whole, so a frozen model is a whole copy too (in the
        engine's precision, so a reference starts at KL 0). At ZeRO-3 it is partitioned like the policy
        (and its parameters offloaded when backend.offload says so) by an engine with no optimizer."""
        model = model.eval().requires_grad_(False)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.spec.precision)
        if self.stage != 3:
            model = model.to(self.device)
            return model.to(dtype) if dtype is not None else model
        import deepspeed

        zero: dict[str, Any] = {"stage": 3}
        if self.spec.offload != "none":
            zero["offload_param"] = {
                "device": self.spec.offload,
                **({"nvme_path": self.spec.nvme_path} if self.spec.offload == "nvme" else {}),
            }
        config: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": zero,
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }
        if self.spec.precision == "bf16":
            config["bf16"] = {"enabled": True}
        elif self.spec.precision == "fp16":
            config["fp16"] = {"enabled": True}
        engine, *_ = deepspeed.initialize(model=model.to(self.device), config=config)
        engine.eval()
        self._frozen_engines.append(engine)
        return engine.module  # its forward gathers each layer's partitions (hooks installed by the engine)

    def describe_placement(self, model: nn.Module) -> str:
        params = list(model.parameters())
        if not any(hasattr(p, "ds_tensor") for p in params):
            return super().describe_placement(model)
        # A module built outside zero.Init (PPO's value head) is whole until deepspeed.initialize.
        total = sum(getattr(p, "ds_numel", p.numel()) for p in params)
        local = sum(p.ds_tensor.numel() if hasattr(p, "ds_tensor") else p.numel() for p in params)
        where = f", parameters offloaded to {self.spec.offload}" if self.spec.offload != "none" else ""
        return f"ZeRO-3 partitioned over {self.world_size} ranks ({local:,} of {total:,} parameters on rank {self.rank}{where})"

    def generate(self, model: nn.Module, **kwargs: Any) -> Any:
        # ZeRO-3 gathers each layer's parameters in forward: every rank must run as many forwards.
        if self.stage == 3 and self.world_size > 1:
            kwargs.setdefault("synced_gpus", True)
        with torch.no_grad():
            return self.unwrap(model).generate(**kwargs)

    def full_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None
    ) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any] | None]:
        from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

        module = self.unwrap(model)
        if optimizer is not None and self._base_optimizer().state:
            self._link_fragments()
        weights: dict[str, torch.Tensor] = {}
        moments: dict[str, dict[str, torch.Tensor]] = {}
        for name, param in module.named_parameters():
            full = safe_get_full_fp32_param(param)  # collective under ZeRO-3: every rank, same order
            if full is None:  # no ZeRO and no mixed precision: the parameter is whole here
                full = param.detach()
            weights[name] = full.detach().float().cpu().view(param.ds_shape if hasattr(param, "ds_shape") else param.shape)
            if optimizer is not None and param.requires_grad:
                moments[name] = {key: self._full_moment(param, key, safe_get_full_optimizer_state) for key in ADAM_STATES}
        for name, buffer in module.named_buffers():
            weights[name] = buffer.detach().cpu()
        if not self.is_rank_zero:
            return None, None
        state = None
        if optimizer is not None:
            lrs = [group["lr"] for group in self._base_optimizer().param_groups]
            state = {"format": "by-name", "step": self._adam_step(), "lr": lrs, "moments": moments}
        return _with_tied(module, weights), state

    @property
    def keeps_master_weights(self) -> bool:
        return self.spec.precision != "fp32"

    def load_master_weights(self, weights: dict[str, torch.Tensor]) -> None:
        from deepspeed.utils import safe_set_full_fp32_param

        # DeepSpeed made its fp32 masters from the bf16/fp16 weights, i.e. rounded: put the saved ones back.
        module = self.unwrap(self._prepared())
        for name, param in module.named_parameters():
            if param.requires_grad and name in weights:
                safe_set_full_fp32_param(param, weights[name].to(self.device, torch.float32))

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        from deepspeed.utils import safe_set_full_optimizer_state

        if state.get("format") != "by-name":
            raise BackendError(
                "this checkpoint's optimizer state was written by another backend (by parameter index); "
                "resume it with the backend that wrote it."
            )
        self._init_adam_state(float(state["step"]))
        # The schedule is loaded after this and sets only its own counters: the groups' lr comes from here.
        for group, lr in zip(self._base_optimizer().param_groups, state["lr"], strict=True):
            group["lr"] = lr
        module = self.unwrap(self._prepared())
        for name, param in module.named_parameters():
            if not param.requires_grad or name not in state["moments"]:
                continue
            for key in ADAM_STATES:
                value = state["moments"][name][key].to(self.device)
                if hasattr(param, "ds_id") or hasattr(param, "_hp_mapping"):
                    safe_set_full_optimizer_state(param, value.flatten() if hasattr(param, "ds_id") else value, key)
                else:
                    self._base_optimizer().state[param][key].copy_(value)

    def close(self) -> None:
        self._frozen_engines.clear()
        self._hf_zero3 = None
        super().close()

    # --- helpers ---

    def _prepared(self) -> Any:
        if self._engine is None:
            raise RuntimeError("call backend.prepare(model, optimizer) first.")
        return self._engine

    def _base_optimizer(self) -> torch.optim.Optimizer:
        """The torch optimizer that steps: ZeRO's inner one over flat fp32 partitions, or the client itself."""
        optimizer = self._prepared().optimizer
        return getattr(optimizer, "optimizer", optimizer)

    def _full_moment(self, param: nn.Parameter, key: str, get_full: Any) -> torch.Tensor:
        value = get_full(param, key)
        if value is None:  # no ZeRO: the client optimizer's own per-parameter state
            state = self._base_optimizer().state.get(param, {})
            value = state[key] if key in state else torch.zeros_like(param)
        return value.detach().float().cpu().view(param.ds_shape if hasattr(param, "ds_shape") else param.shape)

    def _adam_step(self) -> float:
        steps = [float(s["step"]) for s in self._base_optimizer().state.values() if "step" in s]
        return max(steps, default=0.0)

    def _init_adam_state(self, step: float) -> None:
        """Adam creates its state at the first step; a resume needs it now, to write the saved moments into."""
        optimizer = self._base_optimizer()
        zero = self._prepared().optimizer
        if hasattr(zero, "fp32_partitioned_groups_flat"):  # ZeRO-3 hands Adam one flat sub-group at a time
            flats = list(zero.fp32_partitioned_groups_flat)
        else:
            flats = [flat for group in optimizer.param_groups for flat in group["params"]]
        groups = {id(p): group for group in optimizer.param_groups for p in group["params"]}
        for flat in flats:
            state = optimizer.state[flat]
            for key in ADAM_STATES:
                state.setdefault(key, torch.zeros_like(flat, memory_format=torch.preserve_format))
            state["step"] = adam_step_tensor(step, flat, groups.get(id(flat), optimizer.defaults))
        self._link_fragments()

    def _link_fragments(self) -> None:
        """ZeRO 1/2 (and bf16) link each parameter's fragment to Adam's state once, at the first step, which
        may be before Adam created that state: link again now that it exists (the fragment API reads it)."""
        zero = self._prepared().optimizer
        if hasattr(zero, "_lazy_init_hp_params_optimizer_state"):
            zero._hp_optimizer_states_linked = False  # it may have linked while the state was still empty
            zero._lazy_init_hp_params_optimizer_state()


def adam_step_tensor(step: float, param: torch.Tensor, group: dict) -> torch.Tensor:
    """Adam's step counter for `param`, where torch keeps it: on the parameter's device for the fused and capturable
    kernels (they read it there; on a GPU a CPU counter stops the first resumed step with "state_steps is on cpu"),
    on the CPU otherwise, as torch.optim.Optimizer.load_state_dict places it."""
    device = param.device if group.get("fused") or group.get("capturable") else torch.device("cpu")
    return torch.tensor(step, dtype=torch.float32, device=device)


def _with_tied(module: nn.Module, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The module's state-dict keys: named_parameters names a tied tensor once (GPT-2's lm_head and wte)."""
    out = {}
    for key, tensor in module.state_dict(keep_vars=True).items():
        if key in weights:
            out[key] = weights[key]
            continue
        same = next((name for name, p in module.named_parameters() if p is tensor), None)
        if same is not None:
            out[key] = weights[same]
    return out
