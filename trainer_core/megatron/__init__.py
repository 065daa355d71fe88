"""Megatron-Core for the megatron backend: HF <-> Megatron weight conversion, its cache, HF export.

The modules here need torch and transformers only; trainer_core.megatron.model (building and
running a GPTModel), causal_lm (the GPTModel shard behind the HF causal LM's call), trunk (its final
hidden states), heads (a score or value head beside the shard), layout (the recipe's names <-> the
shards') and optim_state (a torch optimizer's state over the shards <-> over the HF parameters) also
import megatron-core,
and are imported on their own (by trainer_core/backends/megatron_backend.py).

    arch = architecture_from_hf(model.config)                   # config.py
    converted = convert_to_cache(path, model, tp_size)          # cache.py: per-rank safetensors
    gpt = build_gpt_model(converted.arch, tp_size)              # model.py
    load_shard(gpt, converted.load_shard(tp_rank))
    export_hf(gather_tp_shards(model_shard(gpt)), converted, out)  # export.py, on one rank
"""

from trainer_core.megatron.cache import CHECKPOINT_DIR_ENV, ConvertedCheckpoint, cache_root, convert_to_cache, open_converted
from trainer_core.megatron.config import Architecture, architecture_from_hf
from trainer_core.megatron.convert import hf_to_megatron, megatron_to_hf
from trainer_core.megatron.export import export_hf, hf_state_dict
from trainer_core.megatron.sharding import shard, unshard

__all__ = [
    "CHECKPOINT_DIR_ENV",
    "Architecture",
    "ConvertedCheckpoint",
    "architecture_from_hf",
    "cache_root",
    "convert_to_cache",
    "export_hf",
    "hf_state_dict",
    "hf_to_megatron",
    "megatron_to_hf",
    "open_converted",
    "shard",
    "unshard",
]
