"""The shape of a Megatron-Core GPTModel that computes what a Hugging Face causal LM computes.

`Architecture` is plain data (it is stored as JSON beside converted weights); `architecture_from_hf`
reads it off a GPT-2 or Llama config. Building the TransformerConfig and the model from it is
trainer_core/backends/megatron/model.py's job, so this module and the weight conversion need no megatron.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from transformers import PretrainedConfig

from trainer_core.models.errors import ModelError

Family = Literal["gpt2", "llama"]
# gelu_tanh: GPT-2's "gelu_new"; swiglu: silu(gate) * up, Llama's MLP.
Activation = Literal["gelu", "gelu_tanh", "swiglu"]

# Megatron pads the vocabulary so every tensor-parallel shard of the embedding has the same
# size, a multiple of this (Megatron-LM's --make-vocab-size-divisible-by default).
DEFAULT_VOCAB_DIVISOR = 128
_GPT2_ACTIVATIONS: dict[str, Activation] = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}


@dataclass(frozen=True)
class Architecture:
    """Everything the conversion and the model builder need; the same for every TP size."""

    family: Family
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int  # key/value heads; < num_attention_heads is grouped-query attention
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int  # the tokenizer's; Megatron's tables are padded past it (padded_vocab_size)
    max_position_embeddings: int
    normalization: Literal["LayerNorm", "RMSNorm"]
    norm_eps: float
    activation: Activation
    add_bias_linear: bool
    position_embedding_type: Literal["learned_absolute", "rope"]
    rotary_base: float
    tie_word_embeddings: bool
    vocab_divisor: int = DEFAULT_VOCAB_DIVISOR

    @property
    def gated_linear_unit(self) -> bool:
        return self.activation == "swiglu"

    def padded_vocab_size(self, tp_size: int) -> int:
        multiple = self.vocab_divisor * tp_size
        return -(-self.vocab_size // multiple) * multiple

    def check_tp_size(self, tp_size: int) -> None:
        """ModelError unless heads, key/value groups and the MLP split evenly over `tp_size` ranks."""
        for name in ("num_attention_heads", "num_query_groups", "ffn_hidden_size"):
            if tp_size < 1 or getattr(self, name) % tp_size:
                raise ModelError(
                    f"tensor_parallel_size {tp_size} does not divide {name}={getattr(self, name)} of this model; "
                    "pick a tensor parallel size that divides the attention heads, key/value heads and MLP width."
                )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Architecture:
        return cls(**data)


def architecture_from_hf(config: PretrainedConfig, vocab_divisor: int = DEFAULT_VOCAB_DIVISOR) -> Architecture:
    """The Megatron architecture of a GPT-2 or Llama config; ModelError for anything else."""
    if config.model_type == "gpt2":
        return _gpt2(config, vocab_divisor)
    if config.model_type == "llama":
        return _llama(config, vocab_divisor)
    raise ModelError(
        f"the megatron backend converts GPT-2 and Llama models, not model_type {config.model_type!r}; "
        "use backend.kind torch, fsdp2 or deepspeed for this model."
    )


def _gpt2(config: PretrainedConfig, vocab_divisor: int) -> Architecture:
    activation = _GPT2_ACTIVATIONS.get(config.activation_function)
    if activation is None:
        raise ModelError(
            f"GPT-2 activation_function {config.activation_function!r} is not supported: use one of {sorted(_GPT2_ACTIVATIONS)}."
        )
    if config.scale_attn_by_inverse_layer_idx or config.reorder_and_upcast_attn:
        raise ModelError(
            "GPT-2 configs with scale_attn_by_inverse_layer_idx or reorder_and_upcast_attn have no Megatron equivalent."
        )
    return Architecture(
        family="gpt2",
        num_layers=config.n_layer,
        hidden_size=config.n_embd,
        num_attention_heads=config.n_head,
        num_query_groups=config.n_head,
        head_dim=config.n_embd // config.n_head,
        ffn_hidden_size=config.n_inner or 4 * config.n_embd,
        vocab_size=config.vocab_size,
        max_position_embeddings=config.n_positions,
        normalization="LayerNorm",
        norm_eps=config.layer_norm_epsilon,
        activation=activation,
        add_bias_linear=True,
        position_embedding_type="learned_absolute",
        rotary_base=10000.0,  # unused with learned positions
        tie_word_embeddings=True,  # GPT2LMHeadModel always ties lm_head to wte
        vocab_divisor=vocab_divisor,
    )


def _llama(config: PretrainedConfig, vocab_divisor: int) -> Architecture:
    if config.hidden_act != "silu":
        raise ModelError(
            f"Llama hidden_act {config.hidden_act!r} is not supported: the megatron backend converts silu (SwiGLU) MLPs."
        )
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        raise ModelError("Llama configs with attention_bias or mlp_bias are not supported by the megatron conversion yet.")
    rope = getattr(config, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type", "default")
    if rope_type != "default":
        raise ModelError(
            f"Llama rope_type {rope_type!r} (rope scaling) is not supported by the megatron conversion yet; "
            "only the default rotary embedding is."
        )
    heads = config.num_attention_heads
    return Architecture(
        family="llama",
        num_layers=config.num_hidden_layers,
        hidden_size=config.hidden_size,
        num_attention_heads=heads,
        num_query_groups=config.num_key_value_heads or heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
        ffn_hidden_size=config.intermediate_size,
        vocab_size=config.vocab_size,
        max_position_embeddings=config.max_position_embeddings,
        normalization="RMSNorm",
        norm_eps=config.rms_norm_eps,
        activation="swiglu",
        add_bias_linear=False,
        position_embedding_type="rope",
        rotary_base=float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))),
        tie_word_embeddings=bool(config.tie_word_embeddings),
        vocab_divisor=vocab_divisor,
    )
