"""Megatron-Core tensor, sequence and pipeline parallelism behind the Backend interface: each rank trains its
GPTModel shard.

`prepare` converts the recipe's Hugging Face model to this rank's GPTModel shard (its TP slice of
its pipeline stage's layers: trainer_core/backends/megatron/wrap.py, through the converted-weights cache when
the model was loaded from a directory), wrapped so the recipes call it like the HF model
(trainer_core/backends/megatron/causal_lm.py: `.logits` over the real vocabulary, gathered over TP; a sequence
classifier or PPO's actor-critic keeps its head whole beside the shard, reading its final hidden
states: trainer_core/backends/megatron/heads.py), and points the recipe's optimizer at the shards in place
(same class, groups and settings; the scheduler built on it stays valid). Data parallelism is over
the ranks outside a TP x PP group: they read the same batch (`data_rank`, `data_world_size`),
gradients are averaged over the data-parallel group in `step`, and `all_reduce` reduces over it.

Pipeline parallelism (trainer_core/backends/megatron/pipeline.py): `forward_backward` runs a step's
micro-batches through megatron-core's own 1F1B schedule; a forward pass outside training runs the
schedule forward-only, every stage getting the last stage's output; a tied embedding's two copies
(first and last stage) take the sum of their gradients. On CPU the schedules run through the shim in
cpu_shim.py. Virtual stages (`virtual_pipeline_parallel`): each rank holds that many chunks of layers
(trainer_core/backends/megatron/virtual_stages.py) and training runs megatron's interleaved schedule.

The optimizer step is torch's: megatron's own DistributedOptimizer needs CUDA (and apex or Transformer
Engine), so a CPU run cannot use it; context parallelism needs Transformer Engine's attention and is
refused. Sequence parallelism (trainer_core/backends/megatron/sequence_parallel.py): the norms' gradients,
each rank's positions only, are summed over the TP group before the step. On GPU bf16 is torch
autocast over fp32 shards (never run here: no GPU). `generate` samples from the shards with
megatron-core's KV cache (trainer_core/backends/megatron/generate.py); a TP group's ranks are seeded alike so
they sample the same rollouts.

Checkpoints are sharded (`sharded_kind`): every rank writes its shards of the GPTModel, the kept
heads and Adam's state into the checkpoint's megatron/ through megatron's dist_checkpointing with
strategies of ours (safetensors + JSON, never a pickle: trainer_core/backends/megatron/dist_checkpoint.py), and
a resume reads them after `prepare`, resharded to this run's tensor-, pipeline- and data-parallel
sizes. Only the weights are still gathered (`full_state` without the optimizer), for the
checkpoint's Hugging Face model/. A gathered checkpoint (the torch backend's, or megatron's own
before sharded ones) still resumes: its HF weights load before `prepare` and `load_optimizer_state`
converts Adam's state over the HF parameters to this rank's shards (trainer_core/backends/megatron/optim_state.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from rlplane.spec.sections import MegatronBackend as MegatronBackendSpec
from rlplane.spec.sections import TrainSpec
from trainer_core.backends.base import Backend, BackendError, MicroStep, ReduceOp, applies_update, reduced, share_tied
from trainer_core.backends.batching import accumulation_steps
from trainer_core.backends.dist import DistEnv, default_device, init_process_group
from trainer_core.backends.torch_backend import seed_rank

# transformers' generate() defaults for the sampling settings (GenerationConfig._get_default_generation_params).
SAMPLING_DEFAULTS = {"temperature": 1.0, "top_k": 50, "top_p": 1.0}


class MegatronBackend(Backend):
    sharded_kind = "megatron"
    rollout_engine = "megatron"  # its policy is megatron-core shards: rollout/engines.py decodes from them

    def __init__(self, spec: MegatronBackendSpec, train: TrainSpec, env: DistEnv | None = None) -> None:
        env = env or DistEnv.from_environ()
        self.spec, self.train = spec, train
        self.rank, self.world_size, self.local_rank = env.rank, env.world_size, env.local_rank
        self.device = default_device(env)
        self._check_layout(spec, env.world_size)
        self.tp_size, self.pp_size, self.vp_size = spec.tensor_parallel, spec.pipeline_parallel, spec.virtual_pipeline_parallel
        self._dp_size = env.world_size // (spec.tensor_parallel * spec.pipeline_parallel)
        self.accumulation_steps = accumulation_steps(train, self._dp_size)  # checks the batch splits evenly
        self._owns_group = init_process_group(env, self.device)
        if not dist.is_initialized():
            # megatron's parallel state needs a process group even for one process: a world of one.
            backend = "nccl" if self.device.type == "cuda" else "gloo"
            dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
            self._owns_group = True
        from megatron.core import parallel_state

        from trainer_core.backends.megatron.model import init_model_parallel

        with torch.random.fork_rng(devices=[]):  # megatron seeds torch; the recipe seeds its own RNG just below
            init_model_parallel(self.tp_size, seed=train.seed, pp_size=self.pp_size, vp_size=self.vp_size)
        self._ps = parallel_state
        self.tp_rank = parallel_state.get_tensor_model_parallel_rank()
        self.pp_rank = parallel_state.get_pipeline_model_parallel_rank()
        # Seeded per data-parallel rank: a TP group must sample the same rollouts, since its ranks run one model.
        seed_rank(train.seed, self.data_rank)
        self._model: Any = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._scheduler: Any = None
        self._hf_groups: list[list[str]] = []

    def _check_layout(self, spec: MegatronBackendSpec, world_size: int) -> None:
        if spec.context_parallel > 1:
            raise BackendError(
                "backend.context_parallel is not implemented by the megatron backend yet (megatron-core's context "
                "parallelism needs Transformer Engine's attention); set context_parallel: 1."
            )
        if spec.virtual_pipeline_parallel > 1 and spec.pipeline_parallel < 3:
            raise BackendError(
                "backend.virtual_pipeline_parallel needs pipeline_parallel >= 3 (with fewer stages megatron-core's "
                "interleaved schedule mismatches the activation shapes it exchanges); raise pipeline_parallel or set "
                "virtual_pipeline_parallel: 1."
            )
        if world_size % (spec.tensor_parallel * spec.pipeline_parallel):
            raise BackendError(
                f"backend.tensor_parallel * pipeline_parallel = {spec.tensor_parallel * spec.pipeline_parallel} does not "
                f"divide the {world_size} processes; pick sizes whose product divides them."
            )
        if spec.precision == "fp16" or (spec.precision == "bf16" and self.device.type != "cuda"):
            raise BackendError(
                f"backend.precision {spec.precision} is not available to the megatron backend here: it runs fp32 on CPU "
                "and fp32 or bf16 on GPU; set backend.precision: fp32 (or bf16 with GPUs)."
            )

    # --- data parallelism ---

    @property
    def data_rank(self) -> int:
        return self._ps.get_data_parallel_rank()

    @property
    def data_world_size(self) -> int:
        return self._dp_size

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        """Reduced over the data-parallel group: the TP ranks of one replica hold the same values (gathered logits)."""
        group = self._ps.get_data_parallel_group() if self._dp_size > 1 else None
        return reduced(tensor, op, self.device, self._dp_size, group)

    # --- the model ---

    def prepare(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None
    ) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
        from trainer_core.backends.megatron.optim_state import megatron_groups
        from trainer_core.backends.megatron.wrap import local_parameters, wrap

        if optimizer.state:
            raise RuntimeError("backend.prepare needs a fresh optimizer: the megatron backend replaces its parameters.")
        wrapped = wrap(model, self._placement, self._convert_cached)
        self._hf_groups, groups = megatron_groups(
            model, optimizer, local_parameters(wrapped), wrapped.layout, self.tp_rank, self.tp_size
        )
        # In place, so the scheduler built on this optimizer (and its groups' initial_lr) stays valid.
        for group, params in zip(optimizer.param_groups, groups, strict=True):
            group["params"] = params
        self._model, self._optimizer, self._scheduler = wrapped, optimizer, scheduler
        return wrapped, optimizer, scheduler

    @property
    def _placement(self) -> Any:
        from trainer_core.backends.megatron.wrap import Placement

        sizes = (self.tp_rank, self.tp_size, self.pp_rank, self.pp_size)
        return Placement(*sizes, self.spec.sequence_parallel, self.device, self.vp_size)

    def _convert_cached(self, source: str, model: nn.Module) -> Any:
        """The converted-weights cache's entry for a model loaded from `source` (rank zero writes it once)."""
        from trainer_core.models.megatron import convert_to_cache

        if self.is_rank_zero:
            convert_to_cache(source, model, self.tp_size)
        self.barrier()
        return convert_to_cache(source, model, self.tp_size)

    def prepare_frozen(self, model: nn.Module) -> nn.Module:
        """A frozen causal LM (a reference) is sharded like the policy; other models (a reward model's
        classifier) stay whole on each rank."""
        from trainer_core.backends.megatron.wrap import convert_causal

        model = model.eval().requires_grad_(False)
        if model.get_output_embeddings() is None:
            return super().prepare_frozen(model)
        return convert_causal(model, self._placement, self._convert_cached).eval().requires_grad_(False)

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The recipe's model (HF config, save_pretrained); its transformer's weights are stale: `full_state` has the
        trained ones. Forward passes go through the prepared model."""
        from trainer_core.backends.megatron.wrap import is_wrapper

        return model.hf_model if is_wrapper(model) else model

    def describe_placement(self, model: nn.Module) -> str:
        local = sum(p.numel() for p in model.parameters())
        pipeline = f" x PP {self.pp_size}" if self.pp_size > 1 else ""
        pipeline += f" (virtual {self.vp_size})" if self.vp_size > 1 else ""
        where = f"TP rank {self.tp_rank}" + (f", stage {self.pp_rank}" if self.pp_size > 1 else "")
        return f"megatron TP {self.tp_size}{pipeline} x DP {self._dp_size} ({local:,} parameters on rank {self.rank}, {where})"

    def generate(self, model: nn.Module, **kwargs: Any) -> Any:
        """Sampled from the policy's GPTModel shards with megatron-core's KV cache (trainer_core/backends/megatron/generate.py):
        no rank gathers the model. A TP group's ranks, seeded alike, draw the same tokens."""
        from trainer_core.backends.megatron.causal_lm import MegatronCausalLM
        from trainer_core.backends.megatron.generate import generate

        wrapped, _ = self._prepared()
        causal = next((m for m in wrapped.modules() if isinstance(m, MegatronCausalLM) and m.hf_model is model), None)
        if causal is None:
            raise BackendError("the megatron backend generates from the prepared policy only (backend.unwrap(model)).")
        # Unset here, a setting comes from the model's generation config, else transformers' own default, as in its generate().
        configured = model.generation_config
        for key, default in SAMPLING_DEFAULTS.items():
            if kwargs.get(key) is None:
                kwargs[key] = default if getattr(configured, key, None) is None else getattr(configured, key)
        if self.pp_size > 1:
            from functools import partial

            from trainer_core.backends.megatron.pipeline import inference_step

            kwargs["step"] = partial(inference_step, causal)
        return generate(causal.gpt, causal.arch.vocab_size, **kwargs)

    # --- the training step ---

    def forward_backward(self, model: nn.Module, steps: Sequence[MicroStep]) -> torch.Tensor:
        """Under pipeline parallelism megatron-core's 1F1B schedule runs the micro-batches over the stages; the
        recipe's sums, made on the last stage, reach every stage. Without it, the base class's loop."""
        if self.pp_size == 1:
            return super().forward_backward(model, steps)
        from trainer_core.backends.megatron.pipeline import broadcast_tensor, run_schedule

        wrapped, _ = self._prepared()
        with self.autocast():
            results = run_schedule(wrapped, steps, forward_only=False, stage_forward=wrapped.stage_forward)
        sums = torch.stack([result["sums"] for result in results]).sum(0) if results else None
        return broadcast_tensor(sums, self.pp_size - 1, self.device)

    def from_loss_stage(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.pp_size == 1:
            return tensor
        from trainer_core.backends.megatron.pipeline import broadcast_tensor

        last = self.pp_size - 1
        return broadcast_tensor(tensor if self.pp_rank == last else None, last, self.device)

    def backward(self, loss: torch.Tensor, accumulation_steps: int = 1) -> None:
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {accumulation_steps}.")
        (loss / accumulation_steps).backward()

    def no_sync(self, model: nn.Module) -> AbstractContextManager[None]:
        return contextlib.nullcontext()  # gradients are averaged over data parallel once, in step()

    def autocast(self) -> AbstractContextManager[Any]:
        if self.spec.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self) -> float:
        model, optimizer = self._prepared()
        params = [p for p in model.parameters() if p.grad is not None]
        if self.spec.sequence_parallel:
            from trainer_core.backends.megatron.sequence_parallel import allreduce_sequence_parallel_grads

            allreduce_sequence_parallel_grads(params, self._ps.get_tensor_model_parallel_group())
        if self.pp_size > 1:
            self._sum_tied_embedding_grads(model)
            params = [p for p in model.parameters() if p.grad is not None]
        if self._dp_size > 1:
            group = self._ps.get_data_parallel_group()
            for param in params:
                dist.all_reduce(param.grad, group=group)
                param.grad /= self._dp_size
        norm = self._global_norm(params)
        if self.train.max_grad_norm is not None:
            torch.nn.utils.clip_grads_with_norm_(params, self.train.max_grad_norm, norm)
        if applies_update(norm):
            optimizer.step()
        if self._scheduler is not None:
            self._scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def _sum_tied_embedding_grads(self, model: Any) -> None:
        """Tied embeddings under pipeline parallelism: the first stage's embedding and the last stage's copy (its
        output layer) take the sum of both gradients, so they stay equal (megatron's embedding group)."""
        from trainer_core.backends.megatron.virtual_stages import chunks_of

        gpt = model.gpt
        if not (gpt.share_embeddings_and_output_weights and self._ps.is_rank_in_embedding_group(ignore_virtual=True)):
            return
        # The embedding is the first stage's first chunk's, the copy the last stage's last chunk's.
        chunks = chunks_of(gpt)
        chunk = chunks[0] if self._ps.is_pipeline_first_stage(ignore_virtual=True) else chunks[-1]
        weight = chunk.shared_embedding_or_output_weight()
        if weight.grad is None:
            weight.grad = torch.zeros_like(weight)
        dist.all_reduce(weight.grad, group=self._ps.get_embedding_group())

    def _global_norm(self, params: list[nn.Parameter]) -> torch.Tensor:
        """The whole model's gradient norm: TP-split shards' squares summed over the TP group, replicated
        weights (norms, row-parallel biases: equal on every TP rank) counted once, each pipeline stage's
        summed over the pipeline (the last stage's copy of a tied embedding not counted again)."""
        split = torch.zeros((), dtype=torch.float32, device=self.device)
        replicated = torch.zeros((), dtype=torch.float32, device=self.device)
        for param in params:
            if getattr(param, "shared", False):
                continue
            square = param.grad.detach().float().pow(2).sum()
            if getattr(param, "tensor_model_parallel", False):
                split += square
            else:
                replicated += square
        if self.tp_size > 1:
            dist.all_reduce(split, group=self._ps.get_tensor_model_parallel_group())
        total = split + replicated
        if self.pp_size > 1:
            dist.all_reduce(total, group=self._ps.get_pipeline_model_parallel_group())
        return total.sqrt()

    # --- checkpoints ---

    def full_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None
    ) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any] | None]:
        from trainer_core.backends.megatron.model import model_shard
        from trainer_core.backends.megatron.optim_state import gather_hf_state, to_hf
        from trainer_core.backends.megatron.wrap import heads, local_parameters

        wrapped, _ = self._prepared()
        shard = model_shard(wrapped.gpt) | {name: p.detach().clone() for name, p in heads(wrapped).items()}
        # Collectives over TP and the pipeline, every rank.
        weights = to_hf({name: tensor.cpu() for name, tensor in shard.items()}, wrapped.layout, self.device)
        state = (
            None if optimizer is None else gather_hf_state(local_parameters(wrapped), optimizer, self._hf_groups, wrapped.layout)
        )
        if not self.is_rank_zero:
            return None, None
        return share_tied(wrapped.hf_model, weights), state

    def save_sharded_state(self, directory: Path, optimizer: torch.optim.Optimizer) -> None:
        """Every rank writes its shards of the GPTModel, the kept heads and Adam's state (megatron's dist_checkpointing)."""
        from trainer_core.backends.megatron.dist_checkpoint import save_distributed
        from trainer_core.backends.megatron.wrap import heads

        wrapped, _ = self._prepared()
        save_distributed(directory, wrapped.gpt, optimizer, {}, heads=heads(wrapped))

    def load_sharded_state(self, directory: Path, optimizer: torch.optim.Optimizer) -> None:
        """Resharded to this run's tensor-parallel and data-parallel sizes by dist_checkpointing."""
        from trainer_core.backends.megatron.dist_checkpoint import load_distributed
        from trainer_core.backends.megatron.wrap import heads

        wrapped, _ = self._prepared()
        load_distributed(directory, wrapped.gpt, optimizer, heads=heads(wrapped), holds_heads=wrapped.layout.holds_heads)

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """A gathered checkpoint's (the torch backend's, or megatron's before sharded ones) Adam state over the HF
        parameters, converted to this rank's shards."""
        from trainer_core.backends.megatron.optim_state import scatter_hf_state
        from trainer_core.backends.megatron.wrap import local_parameters

        wrapped, _ = self._prepared()
        local = scatter_hf_state(
            optimizer,
            state,
            local_parameters(wrapped),
            wrapped.hf_model,
            self._hf_groups,
            wrapped.layout,
            self.tp_rank,
            self.tp_size,
        )
        optimizer.load_state_dict(local)

    def close(self) -> None:
        if self._ps.model_parallel_is_initialized():
            self._ps.destroy_model_parallel()
        super().close()

    def _prepared(self) -> tuple[Any, torch.optim.Optimizer]:
        if self._model is None or self._optimizer is None:
            raise RuntimeError("call backend.prepare(model, optimizer) first.")
        return self._model, self._optimizer
