"""Megatron sequence parallelism (`backend.sequence_parallel`) with megatron-core's local layers.

Under sequence parallelism the tensor-parallel ranks split the activations that TP leaves whole
(the norms and residual stream, between the TP regions) along the sequence: each rank keeps
seq / tp positions, megatron's linear layers all-gather them on the way into a TP region and
reduce-scatter on the way out. What that needs beyond megatron's own layers:

- norms that work on a slice of the sequence. megatron-core's local spec builds torch's
  LayerNorm/RMSNorm through WrappedTorchNorm, which refuses sequence parallelism (only Transformer
  Engine's and apex's norms mark their weights for it). `SequenceParallelNorm` is torch's norm with
  its weights marked `sequence_parallel`, as megatron's own are: each rank's gradient then covers
  only its positions, and `allreduce_sequence_parallel_grads` sums them over the TP group before
  the step (megatron's finalize_model_grads does the same; row-parallel biases are marked by
  megatron itself);
- a sequence length that the TP size divides: `pad_sequence` pads a batch on the right with
  masked positions (causal attention: no real token attends to them) and the caller cuts them off.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
from megatron.core.transformer.transformer_config import TransformerConfig
from torch import nn


class SequenceParallelNorm:
    """torch's LayerNorm or RMSNorm as megatron builds a norm (`config, hidden_size, eps`), its weights marked
    `sequence_parallel` when the config says so."""

    def __new__(cls, config: TransformerConfig, hidden_size: int, eps: float = 1e-5, **unused: object) -> nn.Module:
        norms = {"LayerNorm": nn.LayerNorm, "RMSNorm": nn.RMSNorm}
        if config.normalization not in norms:
            raise ValueError(f"sequence parallelism supports LayerNorm and RMSNorm, not {config.normalization}")
        norm = norms[config.normalization](hidden_size, eps=eps)
        for param in norm.parameters():
            param.sequence_parallel = config.sequence_parallel  # type: ignore[attr-defined]
        return norm


def layer_spec(normalization: str, num_layers: int, sequence_parallel: bool) -> ModuleSpec | TransformerBlockSubmodules:
    """megatron-core's local GPT layer spec; with sequence parallelism, every norm (the final one too) a
    SequenceParallelNorm."""
    spec = get_gpt_layer_local_spec(normalization=normalization)
    if not sequence_parallel:
        return spec
    norms = {"input_layernorm": SequenceParallelNorm, "pre_mlp_layernorm": SequenceParallelNorm}
    layer = dataclasses.replace(spec, submodules=dataclasses.replace(spec.submodules, **norms))
    return TransformerBlockSubmodules(layer_specs=[layer] * num_layers, layer_norm=SequenceParallelNorm)


def pad_sequence(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None, tp_size: int
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The batch padded on the right to a multiple of `tp_size` positions: pad id 0, masked, positions counted on."""
    length = input_ids.shape[-1]
    extra = -length % tp_size
    if extra == 0:
        return input_ids, attention_mask, position_ids
    batch = input_ids.shape[0]
    input_ids = torch.cat([input_ids, input_ids.new_zeros(batch, extra)], dim=-1)
    if attention_mask is None:
        attention_mask = torch.ones(batch, length, dtype=torch.long, device=input_ids.device)
    attention_mask = torch.cat([attention_mask, attention_mask.new_zeros(batch, extra)], dim=-1)
    if position_ids is not None:
        following = position_ids[:, -1:] + torch.arange(1, extra + 1, device=position_ids.device)
        position_ids = torch.cat([position_ids, following], dim=-1)
    return input_ids, attention_mask, position_ids


def allreduce_sequence_parallel_grads(params: list[nn.Parameter], group: dist.ProcessGroup) -> None:
    """Sum over the TP group the gradients of weights marked `sequence_parallel` (each rank saw its positions only)."""
    for param in params:
        if getattr(param, "sequence_parallel", False) and param.grad is not None:
            dist.all_reduce(param.grad, group=group)
