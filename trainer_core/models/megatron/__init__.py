"""HF <-> Megatron weight conversion for backend.kind megatron, as part of loading a model: an HF
architecture as Megatron's (config.py), weights both ways (convert.py) split by tensor-parallel rank
(sharding.py) into a per-rank cache (cache.py), an HF export of the shards (export.py), and un-tarred NeMo
checkpoints read as HF directories (nemo.py). Torch and transformers only: the backend that runs the
shards (megatron-core) is trainer_core/backends/megatron.

    arch = architecture_from_hf(model.config)                   # config.py
    converted = convert_to_cache(path, model, tp_size)          # cache.py: per-rank safetensors
    gpt = build_gpt_model(converted.arch, tp_size)              # trainer_core/backends/megatron/model.py
    load_shard(gpt, converted.load_shard(tp_rank))
    export_hf(gather_tp_shards(model_shard(gpt)), converted, out)  # export.py, on one rank
"""

from trainer_core.models.megatron.cache import (
    CHECKPOINT_DIR_ENV,
    ConvertedCheckpoint,
    cache_root,
    convert_to_cache,
    open_converted,
)
from trainer_core.models.megatron.config import Architecture, architecture_from_hf
from trainer_core.models.megatron.convert import hf_to_megatron, megatron_to_hf
from trainer_core.models.megatron.export import export_hf, hf_state_dict
from trainer_core.models.megatron.sharding import shard, unshard

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
