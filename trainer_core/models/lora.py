"""LoRA adapters (PEFT) from the spec's `model.lora` section."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from transformers import PreTrainedModel

from trainer_core.models.errors import ModelError

if TYPE_CHECKING:
    from peft import PeftModel

ALL_LINEAR = "all-linear"
# Attention projections per architecture (config.model_type) when the spec names no modules.
DEFAULT_TARGET_MODULES: dict[str, list[str]] = {
    "gpt2": ["c_attn"],
    "llama": ["q_proj", "v_proj"],
    "mistral": ["q_proj", "v_proj"],
    "qwen2": ["q_proj", "v_proj"],
}
# GPT-2 keeps its projections in Conv1D, whose weight is stored transposed.
_FAN_IN_FAN_OUT = {"gpt2"}


class LoraSettings(Protocol):
    """The fields of rlplane.spec.sections.LoraSpec that LoRA needs."""

    r: int
    alpha: float
    dropout: float
    target_modules: list[str]


def is_score_model(model: PreTrainedModel) -> bool:
    return type(model).__name__.endswith("ForSequenceClassification")


def target_modules_for(model: PreTrainedModel, requested: Sequence[str]) -> str | list[str]:
    """The spec's modules; "all-linear" as PEFT's shorthand; empty: the architecture's default."""
    if list(requested) == [ALL_LINEAR]:
        return ALL_LINEAR  # PEFT expands the bare string (not a list) to every linear layer but the head
    if requested:
        return list(requested)
    return DEFAULT_TARGET_MODULES.get(model.config.model_type, ALL_LINEAR)


def apply_lora(model: PreTrainedModel, lora_spec: LoraSettings) -> PeftModel:
    """Wrap `model` with LoRA adapters; only the adapters (and a score head) stay trainable."""
    # Imported here: peft costs every trainer process a fifth of a second, and most runs train no adapter.
    from peft import LoraConfig, TaskType, get_peft_model

    score = is_score_model(model)
    config = LoraConfig(
        r=lora_spec.r,
        lora_alpha=lora_spec.alpha,
        lora_dropout=lora_spec.dropout,
        target_modules=target_modules_for(model, lora_spec.target_modules),
        fan_in_fan_out=model.config.model_type in _FAN_IN_FAN_OUT,
        task_type=TaskType.SEQ_CLS if score else TaskType.CAUSAL_LM,
        # A reward model's or critic's head is new: it must train in full, and is saved with the adapters.
        modules_to_save=["score"] if score else None,
    )
    try:
        with warnings.catch_warnings():
            # peft 0.21 still reads the alias transformers 5.23 deprecated; nothing for our callers to fix.
            warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
            return get_peft_model(model, config)
    except ValueError as exc:
        raise ModelError(
            f"cannot apply LoRA to {type(model).__name__}: {str(exc).rstrip('. ')}; set model.lora.target_modules to module "
            f'names of this model (e.g. {DEFAULT_TARGET_MODULES["llama"]}) or ["all-linear"].'
        ) from exc
