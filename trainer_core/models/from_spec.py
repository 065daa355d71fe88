"""The spec's `model` section -> a ready model: load, then fused kernels, compiled blocks and gradient checkpointing,
then LoRA."""

from __future__ import annotations

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rlplane.spec.sections import ModelSpec
from rlplane.spec.shapes import DEFAULT_MAX_SEQ_LEN_CAP
from trainer_core.models.builtin import ModelKind
from trainer_core.models.errors import ModelError
from trainer_core.models.loading import RunResolver, load_model
from trainer_core.models.lora import apply_lora
from trainer_core.models.speed import apply_kernels, compile_blocks


def max_positions(model: PreTrainedModel) -> int | None:
    config = model.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def context_length(spec: ModelSpec, model: PreTrainedModel) -> int:
    """model.max_seq_len, or when it is unset the model's own context length, at most DEFAULT_MAX_SEQ_LEN_CAP."""
    if spec.max_seq_len is not None:
        return spec.max_seq_len
    return min(max_positions(model) or DEFAULT_MAX_SEQ_LEN_CAP, DEFAULT_MAX_SEQ_LEN_CAP)


def load_from_spec(
    spec: ModelSpec, kind: ModelKind = "causal", *, resolver: RunResolver | None = None, seed: int = 0
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Everything `model:` asks for; the result may be a PeftModel when `lora` is set."""
    model, tokenizer = load_model(
        spec.path,
        kind,
        resolver=resolver,
        dtype=spec.dtype,
        revision=spec.revision,
        trust_remote_code=spec.trust_remote_code,
        seed=seed,
    )
    limit = max_positions(model)
    if limit is not None and spec.max_seq_len is not None and spec.max_seq_len > limit:
        raise ModelError(
            f"model.max_seq_len is {spec.max_seq_len} but {spec.path!r} has only {limit} positions; "
            f"set model.max_seq_len to {limit} or less."
        )
    apply_kernels(model, spec.kernels)
    if spec.compile:
        compile_blocks(model)
    if spec.gradient_checkpointing:
        # transformers 5.23 renamed gradient_checkpointing_enable (now a deprecated alias). Non-reentrant
        # checkpointing needs no input gradients, so it also works under a frozen LoRA base.
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    if spec.lora is not None:
        model = apply_lora(model, spec.lora)
    return model, tokenizer
