"""A recipe's Hugging Face model -> this rank's GPTModel shard in a wrapper the recipe calls like the original.

A causal LM (SFT, DPO, GRPO, a frozen reference) becomes a `MegatronCausalLM`; a sequence classifier (the
reward recipe) a `MegatronScoreModel`, its score head kept whole beside the trunk; a module holding one
causal LM (PPO's actor-critic) a `MegatronComposite`, its other parameters (the value head) kept as the
recipe's. A `Placement` says which shard: the tensor-parallel rank and, under pipeline parallelism, the
stage (its layers; heads on the last). Weights come from the model as it is now, through the
converted-weights cache where the model was loaded from a directory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer_core.backends.base import BackendError
from trainer_core.backends.megatron.causal_lm import MegatronCausalLM
from trainer_core.backends.megatron.heads import MegatronComposite, MegatronScoreModel
from trainer_core.backends.megatron.layout import Layout, to_shard
from trainer_core.backends.megatron.model import build_gpt_model, load_shard
from trainer_core.backends.megatron.pipeline import Stage, stage_weights
from trainer_core.models.megatron.config import Architecture


@dataclass(frozen=True)
class Placement:
    """Which shard of the model this rank builds."""

    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    sequence_parallel: bool
    device: torch.device
    vp_size: int = 1  # virtual stages per pipeline stage

    def stage(self, arch: Architecture) -> Stage | None:
        return Stage.of(arch, self.pp_rank, self.pp_size, self.vp_size) if self.pp_size > 1 else None


def wrap(model: nn.Module, placement: Placement, convert_cached: Callable[[str, nn.Module], Any]) -> Any:
    """The recipe's model with its transformer as this rank's GPTModel shard (see the module docstring).
    `convert_cached(directory, model)`: the cached conversion of a model loaded from a directory, made once."""
    from transformers import PreTrainedModel

    if isinstance(model, PreTrainedModel):
        if model.get_output_embeddings() is not None:
            return convert_causal(model, placement, convert_cached)
        return convert_classifier(model, placement)
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
    converted = convert_causal(model.get_submodule(name), placement, convert_cached)
    prefix = name + "."
    kept = tuple(n for n, _ in model.named_parameters() if not n.startswith(prefix))
    return MegatronComposite(
        model, name, converted, Layout(converted.arch, prefix=prefix, kept=kept, stage=converted.layout.stage)
    )


def convert_causal(model: nn.Module, placement: Placement, convert_cached: Callable[[str, nn.Module], Any]) -> MegatronCausalLM:
    """This rank's MegatronCausalLM for the HF `model` (weights as they are now)."""
    if hasattr(model, "peft_config"):
        raise BackendError("the megatron backend does not train LoRA adapters yet: remove model.lora or use fsdp2/deepspeed.")
    arch = architecture_for(model.config, placement.tp_size, placement.pp_size, placement.vp_size)
    layout = Layout(arch, stage=placement.stage(arch))
    source = getattr(model, "name_or_path", "") or ""
    if source and Path(source).is_dir():
        # A model loaded from a directory: its conversion is cached per weights and TP size.
        weights = stage_weights(convert_cached(source, model).load_shard(placement.tp_rank), layout.stage, arch)
    else:
        weights = to_shard(dict(model.state_dict()), layout, placement.tp_rank, placement.tp_size)
    gpt = _build(arch, placement)
    load_shard(gpt, weights)
    return MegatronCausalLM(gpt.to(placement.device), layout, model)


def convert_classifier(model: nn.Module, placement: Placement) -> MegatronScoreModel:
    """This rank's MegatronScoreModel for an HF sequence classifier (weights as they are now)."""
    if not isinstance(getattr(model, "score", None), nn.Linear):
        what = "it has neither an LM head nor a score head"
        raise BackendError(f"the megatron backend cannot convert {type(model).__name__}: {what}.")
    # Tied: the trunk then needs no output layer of its own (a classifier has no LM head to fill one).
    arch = replace(
        architecture_for(model.config, placement.tp_size, placement.pp_size, placement.vp_size), tie_word_embeddings=True
    )
    kept = tuple(f"score.{n}" for n, _ in model.score.named_parameters())
    layout = Layout(arch, kept=kept, lm_head=False, stage=placement.stage(arch))
    weights = to_shard(dict(model.state_dict()), layout, placement.tp_rank, placement.tp_size)
    gpt = _build(arch, placement)
    load_shard(gpt, {n: t for n, t in weights.items() if n not in layout.kept})
    return MegatronScoreModel(gpt.to(placement.device), layout, model)


def _build(arch: Architecture, placement: Placement) -> Any:
    with torch.random.fork_rng(devices=[]):  # random init (overwritten next) must not move the recipe's RNG
        sizes = {"sequence_parallel": placement.sequence_parallel, "pp_size": placement.pp_size, "vp_size": placement.vp_size}
        return build_gpt_model(arch, placement.tp_size, parallel_output=False, **sizes)


def architecture_for(config: Any, tp_size: int, pp_size: int = 1, vp_size: int = 1) -> Architecture:
    """The Megatron architecture of an HF config, split over `tp_size` ranks and `pp_size` stages of `vp_size` virtual
    stages; BackendError naming
    the backend field when the heads, key/value groups, MLP or layers do not split (the spec cannot know)."""
    from trainer_core.models.errors import ModelError
    from trainer_core.models.megatron import architecture_from_hf

    arch = architecture_from_hf(config)
    try:
        arch.check_tp_size(tp_size)
    except ModelError as exc:
        raise BackendError(f"backend.tensor_parallel {tp_size} does not fit this model: {exc}") from None
    if arch.num_layers % (pp_size * vp_size):
        what = f"backend.pipeline_parallel {pp_size}" + (f" x virtual_pipeline_parallel {vp_size}" if vp_size > 1 else "")
        raise BackendError(f"{what} does not divide this model's {arch.num_layers} layers; pick sizes whose product does.")
    return arch


def local_parameters(wrapped: Any) -> dict[str, nn.Parameter]:
    """This rank's trained parameters by the layout's local names: the GPTModel shard's and the kept heads' (the recipe's
    own), the heads on the last pipeline stage only."""
    return dict(wrapped.gpt.named_parameters()) | heads(wrapped)


def heads(wrapped: Any) -> dict[str, nn.Parameter]:
    """The recipe's parameters kept whole beside the GPTModel (score or value head) on this rank, by the recipe's names."""
    if not wrapped.layout.holds_heads:
        return {}
    kept = dict(wrapped.hf_model.named_parameters())
    return {name: kept[name] for name in wrapped.layout.kept}


def is_wrapper(model: nn.Module) -> bool:
    return isinstance(model, MegatronCausalLM | MegatronScoreModel | MegatronComposite)
