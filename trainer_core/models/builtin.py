"""Tiny CPU models built from a config with seeded random weights: `builtin:<name>`.

They train in seconds on a laptop and exist for tests, examples and smoke runs. Vocabulary and
pad/bos/eos ids come from the builtin tokenizer, so model and tokenizer always agree.

Both have 4 attention heads of width 16 and no dropout (as Llama): measured on builtin:arithmetic,
2 heads of width 32 or GPT-2's default dropout of 0.1 leave held-out sums mostly wrong after 1,000
SFT steps, while this shape answers over 90% of them greedily at the same speed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Literal

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    GPT2Config,
    LlamaConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from rlplane.spec.shapes import BUILTIN_SHAPES, MAX_POSITIONS
from trainer_core.models.errors import ModelError
from trainer_core.models.tokenizer import build_tokenizer

ModelKind = Literal["causal", "score"]


def _special_ids(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    return {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }


def _tiny_gpt2(tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
    shape = BUILTIN_SHAPES["tiny-gpt2"]
    no_dropout = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "summary_first_dropout": 0.0}
    return GPT2Config(
        n_layer=shape.layers,
        n_head=shape.heads,
        n_embd=shape.hidden,  # n_inner left unset: GPT-2's MLP is 4 x n_embd (shape.ffn)
        n_positions=MAX_POSITIONS,
        **no_dropout,
        **_special_ids(tokenizer),
    )


def _tiny_llama(tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
    shape = BUILTIN_SHAPES["tiny-llama"]
    return LlamaConfig(
        num_hidden_layers=shape.layers,
        hidden_size=shape.hidden,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        intermediate_size=shape.ffn,
        max_position_embeddings=MAX_POSITIONS,
        **_special_ids(tokenizer),
    )


BUILTIN_MODELS: dict[str, Callable[[PreTrainedTokenizerBase], PretrainedConfig]] = {
    "tiny-gpt2": _tiny_gpt2,
    "tiny-llama": _tiny_llama,
}


def builtin_names() -> list[str]:
    return sorted(BUILTIN_MODELS)


def score_config(config: PretrainedConfig, pad_token_id: int | None) -> PretrainedConfig:
    """A copy of `config` for a one-output sequence-classification head (reward model, critic), or one output per
    attribute where the config is an attribute model's (models/attributes.py names them in `rlplane_attributes`).

    transformers 5 rejects `num_labels=` as a from_config/from_pretrained keyword, so it is set on
    a copy. The pad id lets the head find each row's last real token in a padded batch.
    """
    config = copy.deepcopy(config)
    config.num_labels = len(getattr(config, "rlplane_attributes", None) or ()) or 1
    if getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = pad_token_id
    return config


def model_from_config(config: PretrainedConfig, kind: ModelKind, pad_token_id: int | None, seed: int) -> PreTrainedModel:
    """Random weights drawn from `seed` without touching the caller's global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if kind == "score":
            return AutoModelForSequenceClassification.from_config(score_config(config, pad_token_id))
        return AutoModelForCausalLM.from_config(config)


def build_builtin(name: str, kind: ModelKind = "causal", seed: int = 0) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """`builtin:<name>` -> (model, tokenizer); the same name, kind and seed give identical weights."""
    if name not in BUILTIN_MODELS:
        raise ModelError(
            f"unknown builtin model {name!r}: the builtin models are {', '.join(builtin_names())}; "
            "write model.path as builtin:<name>, e.g. builtin:tiny-gpt2."
        )
    if kind not in ("causal", "score"):
        raise ModelError(f"unknown model kind {kind!r}: use 'causal' (a language model) or 'score' (reward model, critic).")
    tokenizer = build_tokenizer()
    config = BUILTIN_MODELS[name](tokenizer)
    model = model_from_config(config, kind, tokenizer.pad_token_id, seed)
    return model.eval(), tokenizer  # eval mode, like from_pretrained; recipes call .train()
