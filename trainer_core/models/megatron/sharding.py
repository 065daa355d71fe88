"""Megatron TP=1 weights <-> the shards each tensor-parallel rank of a GPTModel holds.

Megatron-Core's tensor parallelism (Shoeybi et al. 2019), per weight:
- column-parallel (output rows split): linear_qkv, linear_fc1, the embedding and output_layer
  (vocabulary rows); their biases split the same way;
- row-parallel (input columns split): linear_proj, linear_fc2; their biases are whole on every rank
  (added once after the all-reduce);
- everything else (norms, learned positions) is replicated.
Two layouts need more than a plain split: SwiGLU's fc1 holds [gate shard; up shard] on each rank,
and the vocabulary is padded with zero rows to `Architecture.padded_vocab_size(tp_size)` first.
"""

from __future__ import annotations

import torch

from trainer_core.models.errors import ModelError
from trainer_core.models.megatron.config import Architecture
from trainer_core.models.megatron.convert import StateDict

_VOCAB = ("embedding.word_embeddings.weight", "output_layer.weight")
_COLUMN = ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias", "mlp.linear_fc1.weight", "mlp.linear_fc1.bias")
_ROW = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight")


def _kind(name: str, arch: Architecture) -> str:
    if name in _VOCAB:
        return "vocab"
    if name.endswith(("mlp.linear_fc1.weight", "mlp.linear_fc1.bias")) and arch.gated_linear_unit:
        return "glu"
    if name.endswith(_COLUMN):
        return "column"
    if name.endswith(_ROW):
        return "row"
    return "replicated"


def shard(state_dict: StateDict, arch: Architecture, tp_rank: int, tp_size: int) -> StateDict:
    """The weights TP rank `tp_rank` of `tp_size` holds, as contiguous new tensors."""
    arch.check_tp_size(tp_size)
    if not 0 <= tp_rank < tp_size:
        raise ModelError(f"tp_rank {tp_rank} is outside 0..{tp_size - 1}.")
    out = {}
    for name, tensor in state_dict.items():
        kind = _kind(name, arch)
        if kind == "vocab":
            part = _pad_rows(tensor, arch.padded_vocab_size(tp_size)).chunk(tp_size, dim=0)[tp_rank]
        elif kind == "glu":
            gate, up = tensor.chunk(2, dim=0)
            part = torch.cat([gate.chunk(tp_size, dim=0)[tp_rank], up.chunk(tp_size, dim=0)[tp_rank]], dim=0)
        elif kind == "column":
            part = tensor.chunk(tp_size, dim=0)[tp_rank]
        elif kind == "row":
            part = tensor.chunk(tp_size, dim=1)[tp_rank]
        else:
            part = tensor
        out[name] = part.detach().clone().contiguous()
    return out


def unshard(shards: list[StateDict], arch: Architecture) -> StateDict:
    """Inverse of `shard`: every rank's weights (in rank order) -> the TP=1 weights, vocab unpadded.

    Replicated weights are taken from rank 0: Megatron keeps them equal across TP ranks (their
    gradients are all-reduced), so the other copies carry no extra information.
    """
    tp_size = len(shards)
    if tp_size == 0 or any(s.keys() != shards[0].keys() for s in shards):
        raise ModelError("the tensor-parallel shards do not hold the same weight names; are they from one checkpoint?")
    out = {}
    for name in shards[0]:
        parts = [s[name] for s in shards]
        kind = _kind(name, arch)
        if kind == "vocab":
            full = torch.cat(parts, dim=0)[: arch.vocab_size]
        elif kind == "glu":
            halves = [p.chunk(2, dim=0) for p in parts]
            full = torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
        elif kind == "column":
            full = torch.cat(parts, dim=0)
        elif kind == "row":
            full = torch.cat(parts, dim=1)
        else:
            full = parts[0]
        out[name] = full.detach().clone().contiguous()
    return out


def _pad_rows(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    # Zero rows give logits of exactly 0 past vocab_size. Those still enter a softmax over the
    # padded vocabulary, so HF-equal losses need the logits cut (or masked) at vocab_size.
    if tensor.shape[0] > rows:
        raise ModelError(f"vocabulary of {tensor.shape[0]} rows exceeds the padded size {rows}.")
    padding = tensor.new_zeros(rows - tensor.shape[0], *tensor.shape[1:])
    return torch.cat([tensor, padding], dim=0)
