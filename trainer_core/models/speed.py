"""The spec's speed switches on a loaded Hugging Face model: Liger's fused kernels (`model.kernels`) and
torch.compile of each decoder block (`model.compile`). Both change the model in place and leave its weights, state
dict and saved form as they were."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from trainer_core.models.errors import ModelError

LIGER_PIN = "liger-kernel==0.8.5"  # the version measured on a GPU (docs/backends.md, "On a GPU")


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks: the children of the first ModuleList holding more than one module of one class
    (GPT-2's transformer.h, Llama's model.layers); [] for a model without one."""
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > 1 and len({type(child) for child in module}) == 1:
            return list(module)
    return []


def apply_kernels(model: nn.Module, kernels: str) -> None:
    """Swap the model's RMSNorm, SwiGLU MLP and rotary embedding for Liger's Triton kernels (kernels: liger).

    The cross-entropy stays ours: the recipes' losses read per-token log-probabilities from the logits, which
    Liger's fused linear cross-entropy never materialises."""
    if kernels == "none":
        return
    try:
        from liger_kernel.transformers import monkey_patch
    except ImportError as exc:
        raise ModelError(
            f"model.kernels: liger needs the liger-kernel package on the worker ({type(exc).__name__}: {exc}); "
            f"pip install {LIGER_PIN}, or set model.kernels: none"
        ) from exc
    if not torch.cuda.is_available():
        raise ModelError(
            "model.kernels: liger runs Triton kernels on a CUDA GPU and this process has none; set model.kernels: none"
        )
    model_type = getattr(model.config, "model_type", None)
    if model_type not in monkey_patch.MODEL_TYPE_TO_APPLY_LIGER_FN:
        covered = ", ".join(sorted(monkey_patch.MODEL_TYPE_TO_APPLY_LIGER_FN))
        raise ModelError(
            f"model.kernels: liger has no kernels for model_type {model_type!r} (it covers {covered}); set model.kernels: none"
        )
    # Unknown options are dropped per architecture (Gemma's MLP is GeGLU, not SwiGLU), as transformers' Trainer does.
    monkey_patch._apply_liger_kernel_to_instance(
        model=model, rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=False
    )


class CompiledForTraining:
    """A block's forward, compiled for passes that record gradients and eager otherwise: generation calls the blocks
    with a growing KV cache and a new length every token, which would recompile at every call. torch.compile of the
    bound forward (not of the module's __call__) keeps hooks such as FSDP2's all-gathers outside the graph, and the
    blocks, alike in code and shapes, share the graph compiled for the first."""

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.eager = forward
        self.compiled = torch.compile(forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return (self.compiled if torch.is_grad_enabled() else self.eager)(*args, **kwargs)


def compile_blocks(model: nn.Module) -> int:
    """Compile each decoder block's forward for training (model.compile); how many blocks."""
    blocks = repeated_blocks(model)
    if not blocks:
        raise ModelError(
            f"model.compile: found no repeated decoder blocks in {type(model).__name__} to compile; set model.compile: false"
        )
    # A forward with use_cache fills a KV cache even in training, and a block's graph would then be guarded on its own
    # layer of that cache: one compilation per block (past torch.compile's limit of 8, the rest eager). Training reads
    # no cache; generate() asks for one itself (its generation config's use_cache).
    if getattr(model, "config", None) is not None and hasattr(model.config, "use_cache"):
        model.config.use_cache = False
    for block in blocks:
        if not isinstance(block.forward, CompiledForTraining):
            block.forward = CompiledForTraining(block.forward)
    return len(blocks)
