"""The shapes of the builtin models, torch-free: builtin.py builds their configs from these, and the
spec rules check a model-parallel layout against them at submit (other models are checked when the
trainer has read their config)."""

from __future__ import annotations

from typing import NamedTuple

# Positions of every builtin model: their context length, what an unset model.max_seq_len means for them.
MAX_POSITIONS = 256
# An unset model.max_seq_len is the model's context length, but no more than this: a 128k-position model does
# not get 128k-token training rows by default.
DEFAULT_MAX_SEQ_LEN_CAP = 2048


class Shape(NamedTuple):
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int


BUILTIN_SHAPES: dict[str, Shape] = {
    "tiny-gpt2": Shape(layers=2, hidden=64, heads=4, kv_heads=4, ffn=256),  # GPT-2's MLP is 4 x hidden
    "tiny-llama": Shape(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128),  # grouped-query attention, as in Llama 2/3
}
