"""Megatron-Core tensor parallelism behind the Backend interface: each rank trains its GPTModel shard.

`prepare` converts the recipe's Hugging Face model to this TP rank's GPTModel shard
(trainer_core.megatron: through the converted-weights cache when the model was loaded from a
directory, else from its in-memory weights), wraps it so the recipes call it like the HF model
(trainer_core/megatron/causal_lm.py: `.logits` over the real vocabulary, gathered over TP; a sequence
classifier or PPO's actor-critic keeps its head whole on every rank beside the shard, reading its
final hidden states: trainer_core/megatron/heads.py) and points the recipe's optimizer at the shards
in place (same class, groups and settings; the scheduler built on it stays valid). Data parallelism
is over the ranks outside a TP group: both TP ranks of a replica read the same batch (`data_rank`,
`data_world_size`), gradients are averaged over the data-parallel group in `step`, and `all_reduce`
reduces over that group (a replica's TP ranks hold the same metrics).

The training step is torch's: megatron's own DistributedOptimizer and pipeline schedules allocate
CUDA tensors, so a CPU run cannot use them; pipeline and context parallelism need them and are
refused here. Sequence parallelism runs (trainer_core/megatron/sequence_parallel.py): the norms'
gradients, each rank's positions only, are summed over the TP group before the step. On GPU bf16 is
torch autocast over fp32 shards (never run here: no GPU). `generate` (GRPO, PPO) samples from the
shards with megatron-core's KV cache (trainer_core/megatron/generate.py); a TP group's ranks are
seeded alike so they sample the same rollouts.

Checkpoints are sharded (`sharded_kind`): every rank writes its shards of the GPTModel, the kept
heads and Adam's state into the checkpoint's megatron/ through megatron's dist_checkpointing with
strategies of ours (safetensors + JSON, never a pickle: trainer_core/megatron/dist_checkpoint.py), and
a resume reads them after `prepare`, resharded to this run's tensor- and data-parallel sizes. Only the
weights are still gathered (`full_state` without the optimizer), for the checkpoint's Hugging Face
model/. A gathered checkpoint (the torch backend's, or megatron's own before sharded ones) still
resumes: its HF weights load before `prepare` and `load_optimizer_state` converts Adam's state over
the HF parameters to this rank's shards (trainer_core/megatron/optim_state.py).
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainer_core.backends.base import Backend, BackendError, ReduceOp
from trainer_core.backends.batching import accumulation_steps
from trainer_core.backends.dist import DistEnv, default_device, init_process_group
from trainer_core.backends.torch_backend import seed_rank
from trainer_core.spec_sections import MegatronBackend as MegatronBackendSpec
from trainer_core.spec_sections import TrainSpec

# transformers' generate() defaults for the sampling settings (GenerationConfig._get_default_generation_params).
SAMPLING_DEFAULTS = {"temperature": 1.0, "top_k": 50, "top_p": 1.0}


class MegatronBackend(Backend):
    sharded_kind = "megatron"

    def __init__(self, spec: MegatronBackendSpec, train: TrainSpec, env: DistEnv | None = None) -> None:
        env = env or DistEnv.from_environ()
        self.spec, self.train = spec, train
        self.rank, self.world_size, self.local_rank = env.rank, env.world_size, env.local_rank
        self.device = default_device(env)
        self._check_layout(spec, env.world_size)
        self.tp_size = spec.tensor_parallel
        self._dp_size = env.world_size // spec.tensor_parallel
        self.accumulation_steps = accumulation_steps(train, self._dp_size)  # checks the batch splits evenly
        self._owns_group = init_process_group(env, self.device)
        if not dist.is_initialized():
            # megatron's parallel state needs a process group even for one process: a world of one.
            backend = "nccl" if self.device.type == "cuda" else "gloo"
            dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
            self._owns_group = True
        from megatron.core import parallel_state

        from trainer_core.megatron.model import init_model_parallel

        with torch.random.fork_rng(devices=[]):  # megatron seeds torch; the recipe seeds its own RNG just below
            init_model_parallel(self.tp_size, seed=train.seed)
        self._ps = parallel_state
        self.tp_rank = parallel_state.get_tensor_model_parallel_rank()
        # Seeded per data-parallel rank: a TP group must sample the same rollouts, since its ranks run one model.
        seed_rank(train.seed, self.data_rank)
        self._model: Any = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._scheduler: Any = None
        self._hf_groups: list[list[str]] = []

    def _check_layout(self, spec: MegatronBackendSpec, world_size: int) -> None:
        unsupported = {"pipeline_parallel": spec.pipeline_parallel > 1, "context_parallel": spec.context_parallel > 1}
        named = [name for name, on in unsupported.items() if on]
        if named:
            raise BackendError(
                f"backend.{named[0]} is not implemented by the megatron backend yet (it needs megatron's own schedules); "
                "use tensor_parallel (and sequence_parallel), with pipeline_parallel: 1 and context_parallel: 1."
            )
        if world_size % spec.tensor_parallel:
            raise BackendError(
                f"backend.tensor_parallel {spec.tensor_parallel} does not divide the {world_size} processes; "
                "pick a tensor_parallel that divides them."
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
        if op not in ("mean", "sum"):
            raise ValueError(f"all_reduce op must be 'mean' or 'sum', got {op!r}.")
        result = tensor.detach().to(self.device, copy=True)
        if self._dp_size == 1:
            return result
        dist.all_reduce(result, op=dist.ReduceOp.SUM, group=self._ps.get_data_parallel_group())
        return result / self._dp_size if op == "mean" else result

    # --- the model ---

    def prepare(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None
    ) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
        from trainer_core.megatron.optim_state import megatron_groups

        if optimizer.state:
            raise RuntimeError("backend.prepare needs a fresh optimizer: the megatron backend replaces its parameters.")
        wrapped = self._wrap(model)
        self._hf_groups, groups = megatron_groups(
            model, optimizer, local_parameters(wrapped), wrapped.layout, self.tp_rank, self.tp_size
        )
        # In place, so the scheduler built on this optimizer (and its groups' initial_lr) stays valid.
        for group, params in zip(optimizer.param_groups, groups, strict=True):
            group["params"] = params
        self._model, self._optimizer, self._scheduler = wrapped, optimizer, scheduler
        return wrapped, optimizer, scheduler

    def _wrap(self, model: nn.Module) -> Any:
        """The recipe's model with its transformer as this rank's GPTModel shard: a causal LM (SFT, DPO, GRPO), a
        sequence classifier (reward: its score head kept whole) or a module holding one causal LM (PPO's actor-critic:
        its value head kept whole)."""
        from transformers import PreTrainedModel

        if isinstance(model, PreTrainedModel):
            return self._convert(model) if model.get_output_embeddings() is not None else self._convert_classifier(model)
        from trainer_core.megatron.heads import MegatronComposite
        from trainer_core.megatron.layout import Layout

        # The outermost HF models inside (a PPO critic is one: the trunk of another model).
        every = [name for name, child in model.named_modules() if name and isinstance(child, PreTrainedModel)]
        inner = [name for name in every if not any(name.startswith(f"{outer}.") for outer in every)]
        causal = [name for name in inner if model.get_submodule(name).get_output_embeddings() is not None]
        if len(inner) != 1 or len(causal) != 1 or "." in causal[0]:
            raise BackendError(
                f"the megatron backend converts one causal LM inside {type(model).__name__}, found {inner}: "
                "a separate critic (ppo.critic) is not supported on megatron yet; remove ppo.critic or use fsdp2/deepspeed."
            )
        name = causal[0]
        converted = self._convert(model.get_submodule(name))
        prefix = name + "."
        kept = tuple(n for n, _ in model.named_parameters() if not n.startswith(prefix))
        return MegatronComposite(model, name, converted, Layout(converted.arch, prefix=prefix, kept=kept))

    def _convert_classifier(self, model: nn.Module) -> Any:
        """This rank's MegatronScoreModel for an HF sequence classifier (weights as they are now)."""
        from dataclasses import replace

        from trainer_core.megatron.heads import MegatronScoreModel
        from trainer_core.megatron.layout import Layout
        from trainer_core.megatron.model import build_gpt_model, load_shard
        from trainer_core.megatron.optim_state import to_shard

        if not isinstance(getattr(model, "score", None), nn.Linear):
            raise BackendError(
                f"the megatron backend cannot convert {type(model).__name__}: it has neither an LM head nor a score head."
            )
        # Tied: the trunk then needs no output layer of its own (a classifier has no LM head to fill one).
        arch = replace(architecture_for(model.config, self.tp_size), tie_word_embeddings=True)
        layout = Layout(arch, kept=tuple(f"score.{n}" for n, _ in model.score.named_parameters()), lm_head=False)
        weights = to_shard(dict(model.state_dict()), layout, self.tp_rank, self.tp_size)
        with torch.random.fork_rng(devices=[]):  # random init (overwritten next) must not move the recipe's RNG
            gpt = build_gpt_model(arch, self.tp_size, parallel_output=False, sequence_parallel=self.spec.sequence_parallel)
        load_shard(gpt, {n: t for n, t in weights.items() if n not in layout.kept})
        return MegatronScoreModel(gpt.to(self.device), layout, model)

    def _convert(self, model: nn.Module) -> Any:
        """This rank's MegatronCausalLM for the HF `model` (weights as they are now)."""
        from trainer_core.megatron import convert_to_cache
        from trainer_core.megatron.causal_lm import MegatronCausalLM
        from trainer_core.megatron.layout import Layout
        from trainer_core.megatron.model import build_gpt_model, load_shard
        from trainer_core.megatron.optim_state import to_shard

        if hasattr(model, "peft_config"):
            raise BackendError("the megatron backend does not train LoRA adapters yet: remove model.lora or use fsdp2/deepspeed.")
        arch = architecture_for(model.config, self.tp_size)
        source = getattr(model, "name_or_path", "") or ""
        if source and _is_directory(source):
            # A model loaded from a directory: its conversion is cached per weights and TP size (rank zero writes it).
            if self.is_rank_zero:
                convert_to_cache(source, model, self.tp_size)
            self.barrier()
            weights = convert_to_cache(source, model, self.tp_size).load_shard(self.tp_rank)
        else:
            weights = to_shard(dict(model.state_dict()), Layout(arch), self.tp_rank, self.tp_size)
        with torch.random.fork_rng(devices=[]):  # random init (overwritten next) must not move the recipe's RNG
            gpt = build_gpt_model(arch, self.tp_size, parallel_output=False, sequence_parallel=self.spec.sequence_parallel)
        load_shard(gpt, weights)
        return MegatronCausalLM(gpt.to(self.device), arch, model)

    def prepare_frozen(self, model: nn.Module) -> nn.Module:
        """A frozen causal LM (a reference) is TP-sharded like the policy; other models (a reward model's
        classifier) stay whole on each rank."""
        model = model.eval().requires_grad_(False)
        if model.get_output_embeddings() is None:
            return super().prepare_frozen(model)
        return self._convert(model).eval().requires_grad_(False)

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The recipe's model (HF config, save_pretrained); its transformer's weights are stale: `full_state` has the
        trained ones. Forward passes go through the prepared model."""
        return model.hf_model if _is_wrapper(model) else model

    def describe_placement(self, model: nn.Module) -> str:
        local = sum(p.numel() for p in model.parameters())
        return (
            f"megatron TP {self.tp_size} x DP {self._dp_size} ({local:,} parameters on rank {self.rank}, TP rank {self.tp_rank})"
        )

    def generate(self, model: nn.Module, **kwargs: Any) -> Any:
        """Sampled from the policy's GPTModel shards with megatron-core's KV cache (trainer_core/megatron/generate.py):
        no rank gathers the model. A TP group's ranks, seeded alike, draw the same tokens."""
        from trainer_core.megatron.causal_lm import MegatronCausalLM
        from trainer_core.megatron.generate import generate

        wrapped, _ = self._prepared()
        causal = next((m for m in wrapped.modules() if isinstance(m, MegatronCausalLM) and m.hf_model is model), None)
        if causal is None:
            raise BackendError("the megatron backend generates from the prepared policy only (backend.unwrap(model)).")
        # Unset here, a setting comes from the model's generation config, else transformers' own default, as in its generate().
        configured = model.generation_config
        for key, default in SAMPLING_DEFAULTS.items():
            if kwargs.get(key) is None:
                kwargs[key] = default if getattr(configured, key, None) is None else getattr(configured, key)
        return generate(causal.gpt, causal.arch.vocab_size, **kwargs)

    # --- the training step ---

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
            from trainer_core.megatron.sequence_parallel import allreduce_sequence_parallel_grads

            allreduce_sequence_parallel_grads(params, self._ps.get_tensor_model_parallel_group())
        if self._dp_size > 1:
            group = self._ps.get_data_parallel_group()
            for param in params:
                dist.all_reduce(param.grad, group=group)
                param.grad /= self._dp_size
        norm = self._global_norm(params)
        if self.train.max_grad_norm is not None:
            torch.nn.utils.clip_grads_with_norm_(params, self.train.max_grad_norm, norm)
        optimizer.step()
        if self._scheduler is not None:
            self._scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def _global_norm(self, params: list[nn.Parameter]) -> torch.Tensor:
        """The whole model's gradient norm: TP-split shards' squares summed over the TP group, replicated
        weights (norms, row-parallel biases: equal on every TP rank) counted once."""
        split = torch.zeros((), dtype=torch.float32, device=self.device)
        replicated = torch.zeros((), dtype=torch.float32, device=self.device)
        for param in params:
            square = param.grad.detach().float().pow(2).sum()
            if getattr(param, "tensor_model_parallel", False):
                split += square
            else:
                replicated += square
        if self.tp_size > 1:
            dist.all_reduce(split, group=self._ps.get_tensor_model_parallel_group())
        return (split + replicated).sqrt()

    # --- checkpoints ---

    def full_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None
    ) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any] | None]:
        from trainer_core.megatron.model import model_shard
        from trainer_core.megatron.optim_state import gather_hf_state, to_hf

        wrapped, _ = self._prepared()
        shard = model_shard(wrapped.gpt) | {
            name: p.detach().clone() for name, p in local_parameters(wrapped).items() if name in wrapped.layout.kept
        }
        weights = to_hf({name: tensor.cpu() for name, tensor in shard.items()}, wrapped.layout)  # collectives over TP, every rank
        state = (
            None if optimizer is None else gather_hf_state(local_parameters(wrapped), optimizer, self._hf_groups, wrapped.layout)
        )
        if not self.is_rank_zero:
            return None, None
        return weights, state

    def save_sharded_state(self, directory: Path, optimizer: torch.optim.Optimizer) -> None:
        """Every rank writes its shards of the GPTModel, the kept heads and Adam's state (megatron's dist_checkpointing)."""
        from trainer_core.megatron.dist_checkpoint import save_distributed

        wrapped, _ = self._prepared()
        save_distributed(directory, wrapped.gpt, optimizer, {}, heads=_heads(wrapped))

    def load_sharded_state(self, directory: Path, optimizer: torch.optim.Optimizer) -> None:
        """Resharded to this run's tensor-parallel and data-parallel sizes by dist_checkpointing."""
        from trainer_core.megatron.dist_checkpoint import load_distributed

        wrapped, _ = self._prepared()
        load_distributed(directory, wrapped.gpt, optimizer, heads=_heads(wrapped))

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """A gathered checkpoint's (the torch backend's, or megatron's before sharded ones) Adam state over the HF
        parameters, converted to this rank's shards."""
        from trainer_core.megatron.optim_state import scatter_hf_state

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


def architecture_for(config: Any, tp_size: int) -> Any:
    """The Megatron architecture of an HF config, split over `tp_size` ranks; BackendError naming
    backend.tensor_parallel when the heads, key/value groups or MLP do not split (the spec cannot know)."""
    from trainer_core.megatron import architecture_from_hf
    from trainer_core.models.errors import ModelError

    arch = architecture_from_hf(config)
    try:
        arch.check_tp_size(tp_size)
    except ModelError as exc:
        raise BackendError(f"backend.tensor_parallel {tp_size} does not fit this model: {exc}") from None
    return arch


def local_parameters(wrapped: Any) -> dict[str, nn.Parameter]:
    """This rank's trained parameters by the layout's local names: the GPTModel shard's and the kept heads' (the recipe's own)."""
    kept = dict(wrapped.hf_model.named_parameters())
    return dict(wrapped.gpt.named_parameters()) | {name: kept[name] for name in wrapped.layout.kept}


def _heads(wrapped: Any) -> dict[str, nn.Parameter]:
    """The recipe's parameters kept whole on every rank beside the GPTModel (score or value head), by the recipe's names."""
    return {name: param for name, param in local_parameters(wrapped).items() if name in wrapped.layout.kept}


def _is_wrapper(model: nn.Module) -> bool:
    from trainer_core.megatron.causal_lm import MegatronCausalLM
    from trainer_core.megatron.heads import MegatronComposite, MegatronScoreModel

    return isinstance(model, MegatronCausalLM | MegatronScoreModel | MegatronComposite)


def _is_directory(source: str) -> bool:
    return Path(source).is_dir()
