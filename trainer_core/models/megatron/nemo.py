"""An un-tarred NeMo checkpoint directory as a model source: `model.path: /path/to/extracted_nemo_dir`.

NeMo 1.x saves a Megatron GPT model (`mcore_gpt: true`) as

    model_config.yaml                         the model section of its training config
    model_weights.ckpt                        the state dict (tensor and pipeline parallel 1), or
    mp_rank_00/model_weights.ckpt, ...        one per tensor-parallel rank, or
    tp_rank_00_pp_rank_000/model_weights.ckpt one per tensor- and pipeline-parallel rank

(a `.nemo` file is that directory as a tar: `tar -xf model.nemo -C dir`). The weight files are
torch.save pickles: they are read with `torch.load(weights_only=True)`, which restores tensors
and plain containers only (plus io.BytesIO, which Transformer Engine's per-layer `_extra_state`
holds) and refuses any other object. The newer distributed format (a `model_weights/` directory
of torch_dist shards, whose index is a pickle) is refused with the fix.

The weights are megatron-core's, with Transformer Engine's names for the norms fused into the next
linear layer (`linear_qkv.layer_norm_weight`: the layer's input norm); they map onto the local
layer spec's names, the TP/PP shards are joined, and the result converts to a Hugging Face GPT-2
(learned positions, LayerNorm, GELU, biases, tied embeddings) or Llama (RoPE, RMSNorm, SwiGLU,
no biases) model through the same conversion the megatron backend uses. What fits neither is
refused naming the setting. `nemo_as_hf_directory` writes that model once, with a tokenizer found
beside the checkpoint, to the converted-weights cache, and every backend loads it from there.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PretrainedConfig

from trainer_core.models.errors import ModelError
from trainer_core.models.megatron.cache import cache_root
from trainer_core.models.megatron.config import Architecture
from trainer_core.models.megatron.convert import StateDict, megatron_to_hf
from trainer_core.models.megatron.sharding import unshard

NEMO_CONFIG = "model_config.yaml"
WEIGHTS = "model_weights.ckpt"
_NEMO_ACTIVATIONS = {"swiglu": "swiglu", "fast-swiglu": "swiglu", "gelu": "gelu"}
# Transformer Engine fuses each norm into the linear layer after it; the local spec keeps them apart.
_TE_NAMES = {
    ".self_attention.linear_qkv.layer_norm_weight": ".input_layernorm.weight",
    ".self_attention.linear_qkv.layer_norm_bias": ".input_layernorm.bias",
    ".mlp.linear_fc1.layer_norm_weight": ".pre_mlp_layernorm.weight",
    ".mlp.linear_fc1.layer_norm_bias": ".pre_mlp_layernorm.bias",
}
_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")


def is_nemo_directory(path: Path) -> bool:
    return (Path(path) / NEMO_CONFIG).is_file()


def read_nemo_config(directory: Path) -> dict[str, Any]:
    """model_config.yaml (its `model:` section where the file holds a whole training config)."""
    config = yaml.safe_load((Path(directory) / NEMO_CONFIG).read_text())
    if not isinstance(config, dict):
        raise ModelError(f"{Path(directory) / NEMO_CONFIG} is not a NeMo model config (a YAML mapping).")
    return config.get("model", config) if "num_layers" not in config else config


def nemo_architecture(config: dict[str, Any], vocab_rows: int) -> Architecture:
    """The model a NeMo GPT config describes, as GPT-2 or Llama; ModelError naming what neither has."""

    def unsupported(setting: str, why: str) -> ModelError:
        fix = "export the model to Hugging Face with NeMo first"
        return ModelError(f"NeMo checkpoint: {setting} is not supported ({why}); {fix}.")

    if not config.get("mcore_gpt", False):
        raise unsupported("mcore_gpt: false", "the legacy Megatron layout; only megatron-core (mcore_gpt: true) models convert")
    for key, expected in (("transformer_block_type", "pre_ln"), ("rotary_percentage", 1.0), ("headscale", False)):
        if config.get(key, expected) != expected:
            raise unsupported(f"{key}: {config[key]}", f"only {expected} converts")
    activation = _NEMO_ACTIVATIONS.get(str(config.get("activation", "gelu")))
    if activation is None:
        raise unsupported(f"activation: {config['activation']}", f"one of {sorted(_NEMO_ACTIVATIONS)} converts")
    if activation == "gelu" and config.get("openai_gelu", False):
        activation = "gelu_tanh"
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    normalization = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}.get(str(config.get("normalization", "layernorm")))
    if normalization is None:
        raise unsupported(f"normalization: {config['normalization']}", "layernorm or rmsnorm converts")
    position = str(config.get("position_embedding_type", "learned_absolute"))
    bias = bool(config.get("bias", True))
    tied = bool(config.get("share_embeddings_and_output_weights", True))
    gpt2 = (position, normalization, bias, tied) == ("learned_absolute", "LayerNorm", True, True) and activation != "swiglu"
    llama = (position, normalization, bias) == ("rope", "RMSNorm", False) and activation == "swiglu"
    if not (gpt2 or llama):
        raise unsupported(
            f"position_embedding_type {position}, normalization {normalization}, bias {bias}, activation {activation}, "
            f"share_embeddings_and_output_weights {tied}",
            "GPT-2 (learned_absolute, layernorm, bias, gelu, tied) or Llama (rope, rmsnorm, no bias, swiglu) convert",
        )
    head_dim = int(config.get("kv_channels") or hidden // heads)
    if gpt2 and head_dim * heads != hidden:
        raise unsupported(f"kv_channels: {head_dim}", "GPT-2 needs hidden_size / num_attention_heads")
    return Architecture(
        family="gpt2" if gpt2 else "llama",
        num_layers=int(config["num_layers"]),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=int(config.get("num_query_groups") or heads),
        head_dim=head_dim,
        ffn_hidden_size=int(config.get("ffn_hidden_size") or 4 * hidden),
        vocab_size=vocab_rows,  # NeMo's padded table, all of it: the model's softmax runs over every row
        max_position_embeddings=int(config.get("max_position_embeddings") or config["encoder_seq_length"]),
        normalization=normalization,  # type: ignore[arg-type]
        norm_eps=float(config.get("layernorm_epsilon", 1e-5)),
        activation=activation,  # type: ignore[arg-type]
        add_bias_linear=bias,
        position_embedding_type="learned_absolute" if gpt2 else "rope",
        rotary_base=float(config.get("rotary_base", 10000.0)),
        tie_word_embeddings=tied,
        vocab_divisor=int(config.get("make_vocab_size_divisible_by", 128)),
    )


def read_nemo_weights(directory: Path, config: dict[str, Any]) -> tuple[Architecture, StateDict]:
    """The checkpoint's architecture and its weights in the megatron backend's TP=1 layout (local-spec names)."""
    directory = Path(directory)
    if (directory / "model_weights").is_dir():
        raise ModelError(
            f"{directory}/model_weights is NeMo's distributed (torch_dist) format, whose index is a pickle that rlplane "
            "does not load; save the model with NeMo as model_weights.ckpt (dist_ckpt_format off) or export it to Hugging Face."
        )
    tp, pp = int(config.get("tensor_model_parallel_size", 1)), int(config.get("pipeline_model_parallel_size", 1))
    stages = [[_load(directory / _rank_dir(t, p, tp, pp) / WEIGHTS) for t in range(tp)] for p in range(pp)]
    vocab_rows = sum(shard["embedding.word_embeddings.weight"].shape[0] for shard in stages[0])
    arch = nemo_architecture(config, vocab_rows)
    if arch.num_layers % pp:
        raise ModelError(f"NeMo checkpoint: {arch.num_layers} layers do not split over {pp} pipeline stages.")
    weights: StateDict = {}
    for stage, shards in enumerate(stages):
        for name, tensor in unshard(shards, arch).items():
            if name == "output_layer.weight" and arch.tie_word_embeddings:
                continue  # a later stage's copy of the tied embedding
            weights[_global_layer(name, stage * arch.num_layers // pp)] = tensor
    return arch, weights


def nemo_to_hf(directory: Path) -> tuple[torch.nn.Module, Architecture]:
    """The Hugging Face causal LM (GPT-2 or Llama) a NeMo checkpoint directory holds."""
    config = read_nemo_config(directory)
    arch, weights = read_nemo_weights(directory, config)
    with torch.random.fork_rng(devices=[]):  # the random initial weights are all replaced; the caller's RNG stays
        model = (GPT2LMHeadModel if arch.family == "gpt2" else LlamaForCausalLM)(hf_config_for(arch))
    try:
        missing, unexpected = model.load_state_dict(megatron_to_hf(weights, arch), strict=False)
    except RuntimeError as exc:  # shapes that contradict model_config.yaml
        raise ModelError(
            f"NeMo checkpoint {directory} does not fit its model_config.yaml: {' '.join(str(exc).split())[:400]}"
        ) from None
    if missing or unexpected:
        fit = f"missing {missing[:3]}, unexpected {unexpected[:3]}"
        raise ModelError(f"NeMo checkpoint {directory} does not fit its model_config.yaml: {fit}.")
    return model.eval(), arch


def hf_config_for(arch: Architecture) -> PretrainedConfig:
    if arch.family == "gpt2":
        return GPT2Config(
            vocab_size=arch.vocab_size,
            n_positions=arch.max_position_embeddings,
            n_embd=arch.hidden_size,
            n_layer=arch.num_layers,
            n_head=arch.num_attention_heads,
            n_inner=arch.ffn_hidden_size,
            activation_function="gelu_new" if arch.activation == "gelu_tanh" else "gelu",
            layer_norm_epsilon=arch.norm_eps,
        )
    return LlamaConfig(
        vocab_size=arch.vocab_size,
        hidden_size=arch.hidden_size,
        intermediate_size=arch.ffn_hidden_size,
        num_hidden_layers=arch.num_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_query_groups,
        head_dim=arch.head_dim,
        max_position_embeddings=arch.max_position_embeddings,
        rms_norm_eps=arch.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": arch.rotary_base},
        tie_word_embeddings=arch.tie_word_embeddings,
    )


def nemo_as_hf_directory(directory: Path) -> Path:
    """A Hugging Face directory (model and tokenizer) of the NeMo checkpoint, converted once into the cache."""
    directory = Path(directory).resolve()
    target = cache_root() / "nemo" / f"{directory.name}-{_fingerprint(directory)}"
    if (target / "config.json").is_file():
        return target
    tokenizer = _tokenizer(directory)
    model, _ = nemo_to_hf(directory)
    for token in ("pad", "bos", "eos"):
        setattr(model.config, f"{token}_token_id", getattr(tokenizer, f"{token}_token_id", None))
    staging = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / "nemo_source.json").write_text(json.dumps({"source": str(directory)}))
    try:
        staging.rename(target)
    except OSError:  # another process converted it first
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _tokenizer(directory: Path) -> Any:
    """A Hugging Face tokenizer saved in the checkpoint directory (or its tokenizer/), else the one its config names."""
    for candidate in (directory / "tokenizer", directory):
        if (candidate / "tokenizer_config.json").is_file() or (candidate / "tokenizer.json").is_file():
            return AutoTokenizer.from_pretrained(str(candidate))
    named = read_nemo_config(directory).get("tokenizer") or {}
    if named.get("library") == "huggingface" and named.get("type"):
        return AutoTokenizer.from_pretrained(str(named["type"]))
    raise ModelError(
        f"NeMo checkpoint {directory} has no Hugging Face tokenizer: save one into {directory / 'tokenizer'} "
        "(tokenizer.save_pretrained), or name it in model_config.yaml as tokenizer: {library: huggingface, type: <id or dir>}."
    )


def _rank_dir(tp_rank: int, pp_rank: int, tp: int, pp: int) -> str:
    """Where NeMo puts a rank's weights (nemo.utils.model_utils.inject_model_parallel_rank's layout)."""
    if pp > 1:
        return f"tp_rank_{tp_rank:02d}_pp_rank_{pp_rank:03d}"
    return f"mp_rank_{tp_rank:02d}" if tp > 1 else "."


def _load(path: Path) -> StateDict:
    """One rank's weights, local-spec names, without the `model.` prefix and Transformer Engine's extra state."""
    if not path.is_file():
        raise ModelError(f"NeMo checkpoint: {path} is missing (its model_config.yaml's parallel sizes say it should be there).")
    with torch.serialization.safe_globals([io.BytesIO]):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # an object weights_only refuses: not loaded, named
            reason = " ".join(str(exc).split())[:300]
            what = "objects other than tensors, which rlplane does not load"
            raise ModelError(f"NeMo checkpoint {path} holds {what}: {reason}") from None
    state = state.get("state_dict", state)
    out = {}
    for name, tensor in state.items():
        if name.endswith("_extra_state") or not isinstance(tensor, torch.Tensor):
            continue
        name = name.removeprefix("model.")
        for te, local in _TE_NAMES.items():
            if name.endswith(te):
                name = name[: -len(te)] + local
        out[name] = tensor
    return out


def _global_layer(name: str, offset: int) -> str:
    match = _LAYER.match(name)
    return name if match is None or offset == 0 else f"decoder.layers.{int(match.group(1)) + offset}.{name[match.end() :]}"


def _fingerprint(directory: Path) -> str:
    """sha256 over the config and each weight file's name, size and modification time (not its bytes: they may be large)."""
    digest = hashlib.sha256()
    for path in sorted([directory / NEMO_CONFIG, *directory.rglob(WEIGHTS)]):
        stat = path.stat()
        digest.update(f"{path.relative_to(directory)}|{stat.st_size}|{stat.st_mtime_ns}|".encode())
    return digest.hexdigest()[:16]
