"""Hugging Face GPT-2 / Llama weights <-> Megatron-Core GPTModel weights in the TP=1 layout.

The TP=1 layout is what an unsharded GPTModel holds, with the vocabulary left unpadded; splitting
it over tensor-parallel ranks (and padding the vocabulary) is trainer_core/models/megatron/sharding.py's
job. What differs from Hugging Face:

- attention: one fused `linear_qkv` whose rows are grouped per key/value head as
  [q heads of group 0, k_0, v_0, q heads of group 1, k_1, v_1, ...] (megatron's
  SelfAttention.get_query_key_value_tensors splits it that way); GPT-2 stores [all q; all k; all v].
- SwiGLU: one `linear_fc1` = [gate; up] (megatron's glu chunks fc1's output in two).
- GPT-2's Conv1D stores weights as [in, out]; torch.nn.Linear and Megatron as [out, in].
- tied embeddings (GPT-2, tied Llama): Megatron has no output_layer weight, it reuses the embedding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from trainer_core.models.errors import ModelError
from trainer_core.models.megatron.config import Architecture

StateDict = dict[str, torch.Tensor]

# Buffers some transformers versions keep in the state dict; they hold no weights.
_IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")

_GPT2_LAYER_RENAMES = {
    "ln_1": "input_layernorm",
    "ln_2": "pre_mlp_layernorm",
}
# Conv1D in GPT-2, Linear in Megatron: transposed, biases as they are.
_GPT2_LINEARS = (("attn.c_proj", "self_attention.linear_proj"), ("mlp.c_fc", "mlp.linear_fc1"), ("mlp.c_proj", "mlp.linear_fc2"))
_LLAMA_LAYER_RENAMES = {
    "input_layernorm.weight": "input_layernorm.weight",
    "post_attention_layernorm.weight": "pre_mlp_layernorm.weight",
    "self_attn.o_proj.weight": "self_attention.linear_proj.weight",
    "mlp.down_proj.weight": "mlp.linear_fc2.weight",
}


def hf_to_megatron(state_dict: StateDict, arch: Architecture) -> StateDict:
    """Hugging Face weights -> Megatron TP=1 weights (new tensors; the input is left as it was)."""
    source = {k: v for k, v in state_dict.items() if not k.endswith(_IGNORED_SUFFIXES)}
    convert: Callable[[StateDict, Architecture], StateDict] = _gpt2_to_megatron if arch.family == "gpt2" else _llama_to_megatron
    return {name: tensor.detach().clone().contiguous() for name, tensor in convert(source, arch).items()}


def megatron_to_hf(state_dict: StateDict, arch: Architecture) -> StateDict:
    """Megatron TP=1 weights -> Hugging Face weights, tied lm_head included (as from_pretrained gives)."""
    source = dict(state_dict)
    convert: Callable[[StateDict, Architecture], StateDict] = _megatron_to_gpt2 if arch.family == "gpt2" else _megatron_to_llama
    return {name: tensor.detach().clone().contiguous() for name, tensor in convert(source, arch).items()}


def _take(source: StateDict, name: str) -> torch.Tensor:
    """Remove and return `name`; what is left over at the end is reported as unexpected."""
    if name not in source:
        raise ModelError(
            f"weight {name!r} is missing from the checkpoint; is it a complete model of the configured architecture?"
        )
    return source.pop(name)


def _expect_empty(source: StateDict, what: str) -> None:
    if source:
        names = ", ".join(sorted(source)[:8])
        raise ModelError(
            f"{len(source)} weights of the {what} have no Megatron counterpart ({names}); the conversion would drop them."
        )


# --- attention layouts ----------------------------------------------------------------------


def _group_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, arch: Architecture) -> torch.Tensor:
    """Separate q/k/v rows (weights [rows, in] or biases [rows]) -> megatron's per-group layout."""
    groups, per_group = arch.num_query_groups, arch.num_attention_heads // arch.num_query_groups
    tail = q.shape[1:]
    q = q.reshape(groups, per_group * arch.head_dim, *tail)
    k = k.reshape(groups, arch.head_dim, *tail)
    v = v.reshape(groups, arch.head_dim, *tail)
    return torch.cat([q, k, v], dim=1).reshape(-1, *tail)


def _split_qkv(qkv: torch.Tensor, arch: Architecture) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of `_group_qkv`."""
    groups, per_group = arch.num_query_groups, arch.num_attention_heads // arch.num_query_groups
    tail = qkv.shape[1:]
    grouped = qkv.reshape(groups, (per_group + 2) * arch.head_dim, *tail)
    q, k, v = torch.split(grouped, [per_group * arch.head_dim, arch.head_dim, arch.head_dim], dim=1)
    return q.reshape(-1, *tail), k.reshape(-1, *tail), v.reshape(-1, *tail)


# --- GPT-2 ----------------------------------------------------------------------------------


def _gpt2_to_megatron(source: StateDict, arch: Architecture) -> StateDict:
    out = {
        "embedding.word_embeddings.weight": _take(source, "transformer.wte.weight"),
        "embedding.position_embeddings.weight": _take(source, "transformer.wpe.weight"),
        "decoder.final_layernorm.weight": _take(source, "transformer.ln_f.weight"),
        "decoder.final_layernorm.bias": _take(source, "transformer.ln_f.bias"),
    }
    source.pop("lm_head.weight", None)  # tied to wte
    for i in range(arch.num_layers):
        hf, mg = f"transformer.h.{i}.", f"decoder.layers.{i}."
        for hf_norm, mg_norm in _GPT2_LAYER_RENAMES.items():
            for param in ("weight", "bias"):
                out[f"{mg}{mg_norm}.{param}"] = _take(source, f"{hf}{hf_norm}.{param}")
        # Conv1D [in, out] -> Linear [out, in]; c_attn's out dimension is [all q; all k; all v].
        q, k, v = _take(source, f"{hf}attn.c_attn.weight").t().chunk(3, dim=0)
        out[f"{mg}self_attention.linear_qkv.weight"] = _group_qkv(q, k, v, arch)
        q, k, v = _take(source, f"{hf}attn.c_attn.bias").chunk(3, dim=0)
        out[f"{mg}self_attention.linear_qkv.bias"] = _group_qkv(q, k, v, arch)
        for hf_linear, mg_linear in _GPT2_LINEARS:
            out[f"{mg}{mg_linear}.weight"] = _take(source, f"{hf}{hf_linear}.weight").t()
            out[f"{mg}{mg_linear}.bias"] = _take(source, f"{hf}{hf_linear}.bias")
    _expect_empty(source, "GPT-2 checkpoint")
    return out


def _megatron_to_gpt2(source: StateDict, arch: Architecture) -> StateDict:
    wte = _take(source, "embedding.word_embeddings.weight")
    out = {
        "transformer.wte.weight": wte,
        "transformer.wpe.weight": _take(source, "embedding.position_embeddings.weight"),
        "transformer.ln_f.weight": _take(source, "decoder.final_layernorm.weight"),
        "transformer.ln_f.bias": _take(source, "decoder.final_layernorm.bias"),
        "lm_head.weight": wte,
    }
    for i in range(arch.num_layers):
        hf, mg = f"transformer.h.{i}.", f"decoder.layers.{i}."
        for hf_norm, mg_norm in _GPT2_LAYER_RENAMES.items():
            for param in ("weight", "bias"):
                out[f"{hf}{hf_norm}.{param}"] = _take(source, f"{mg}{mg_norm}.{param}")
        q, k, v = _split_qkv(_take(source, f"{mg}self_attention.linear_qkv.weight"), arch)
        out[f"{hf}attn.c_attn.weight"] = torch.cat([q, k, v], dim=0).t()
        q, k, v = _split_qkv(_take(source, f"{mg}self_attention.linear_qkv.bias"), arch)
        out[f"{hf}attn.c_attn.bias"] = torch.cat([q, k, v], dim=0)
        for hf_linear, mg_linear in _GPT2_LINEARS:
            out[f"{hf}{hf_linear}.weight"] = _take(source, f"{mg}{mg_linear}.weight").t()
            out[f"{hf}{hf_linear}.bias"] = _take(source, f"{mg}{mg_linear}.bias")
    _expect_empty(source, "Megatron checkpoint")
    return out


# --- Llama ----------------------------------------------------------------------------------


def _llama_to_megatron(source: StateDict, arch: Architecture) -> StateDict:
    out = {
        "embedding.word_embeddings.weight": _take(source, "model.embed_tokens.weight"),
        "decoder.final_layernorm.weight": _take(source, "model.norm.weight"),
    }
    if arch.tie_word_embeddings:
        source.pop("lm_head.weight", None)
    else:
        out["output_layer.weight"] = _take(source, "lm_head.weight")
    for i in range(arch.num_layers):
        hf, mg = f"model.layers.{i}.", f"decoder.layers.{i}."
        for hf_name, mg_name in _LLAMA_LAYER_RENAMES.items():
            out[mg + mg_name] = _take(source, hf + hf_name)
        q, k, v = (_take(source, f"{hf}self_attn.{p}_proj.weight") for p in "qkv")
        out[f"{mg}self_attention.linear_qkv.weight"] = _group_qkv(q, k, v, arch)
        gate, up = _take(source, f"{hf}mlp.gate_proj.weight"), _take(source, f"{hf}mlp.up_proj.weight")
        out[f"{mg}mlp.linear_fc1.weight"] = torch.cat([gate, up], dim=0)
    _expect_empty(source, "Llama checkpoint")
    return out


def _megatron_to_llama(source: StateDict, arch: Architecture) -> StateDict:
    embed = _take(source, "embedding.word_embeddings.weight")
    out = {
        "model.embed_tokens.weight": embed,
        "model.norm.weight": _take(source, "decoder.final_layernorm.weight"),
        "lm_head.weight": embed if arch.tie_word_embeddings else _take(source, "output_layer.weight"),
    }
    for i in range(arch.num_layers):
        hf, mg = f"model.layers.{i}.", f"decoder.layers.{i}."
        for hf_name, mg_name in _LLAMA_LAYER_RENAMES.items():
            out[hf + hf_name] = _take(source, mg + mg_name)
        q, k, v = _split_qkv(_take(source, f"{mg}self_attention.linear_qkv.weight"), arch)
        out[f"{hf}self_attn.q_proj.weight"], out[f"{hf}self_attn.k_proj.weight"], out[f"{hf}self_attn.v_proj.weight"] = q, k, v
        gate, up = _take(source, f"{mg}mlp.linear_fc1.weight").chunk(2, dim=0)
        out[f"{hf}mlp.gate_proj.weight"], out[f"{hf}mlp.up_proj.weight"] = gate, up
    _expect_empty(source, "Megatron checkpoint")
    return out
