"""Megatron shards of every TP rank -> a Hugging Face directory that from_pretrained loads.

The directory is what save_pretrained writes: config.json, model.safetensors (split with an index
past 5 GB) and the tokenizer when the converted checkpoint kept one. The model is never built, so
exporting a large model needs only its weights in memory once.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from huggingface_hub import save_torch_state_dict

from trainer_core.models.megatron.cache import ConvertedCheckpoint
from trainer_core.models.megatron.convert import StateDict, megatron_to_hf
from trainer_core.models.megatron.sharding import unshard


def hf_state_dict(shards: list[StateDict], checkpoint: ConvertedCheckpoint) -> StateDict:
    """Every rank's GPTModel weights (rank order) -> the Hugging Face state dict, lm_head included."""
    if len(shards) != checkpoint.tp_size:
        raise ValueError(
            f"got {len(shards)} shards for a checkpoint converted for {checkpoint.tp_size} TP ranks; pass one per rank."
        )
    return megatron_to_hf(unshard(shards, checkpoint.arch), checkpoint.arch)


def export_hf(shards: list[StateDict], checkpoint: ConvertedCheckpoint, out: Path) -> Path:
    """Write `shards` (trained or not) as a Hugging Face model directory at `out`; returns `out`.

    The config and tokenizer are the ones `checkpoint` was converted from (training changes
    weights, not shapes or vocabulary).
    """
    weights = hf_state_dict(shards, checkpoint)
    if checkpoint.arch.tie_word_embeddings:
        del weights["lm_head.weight"]  # from_pretrained ties it back to the input embedding
    out.mkdir(parents=True, exist_ok=True)
    for item in checkpoint.hf_dir.iterdir():  # config.json and the tokenizer's files
        if item.is_file():
            shutil.copy2(item, out / item.name)
    save_torch_state_dict(weights, out, metadata={"format": "pt"})
    return out
