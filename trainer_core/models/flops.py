"""Model FLOPs utilisation (perf/mfu): a model's training FLOPs per token against its GPUs' peak.

FLOPs per token of a dense decoder, forward and backward: 6 N + 12 L d T (Kaplan et al. 2020, "Scaling Laws for
Neural Language Models", section 2.1; Chowdhery et al. 2022, PaLM, appendix B): N its parameters (a tied output
matrix counted once), L its layers, d its hidden size and T the training context (model.max_seq_len: the attention
term is an upper bound for shorter sequences). The peaks are the vendors' dense (no sparsity) bf16/fp16 tensor-core
rates. A device not in the table, a CPU, an fp32 run or a model without a Hugging Face config has no MFU reported:
a number we could not stand behind is not shown.
"""

from __future__ import annotations

from typing import Any

from torch import nn

# (a part of torch.cuda.get_device_name(), dense bf16 FLOP/s); the first that matches, so longer names first
PEAK_BF16 = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM ("NVIDIA H100 80GB HBM3")
    ("H200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
)


def peak_flops(device_name: str, precision: str) -> float | None:
    """The device's dense peak at the run's precision; None where it is not known here."""
    if precision not in ("bf16", "fp16"):
        return None
    return next((peak for part, peak in PEAK_BF16 if part in device_name), None)


def flops_per_token(model: nn.Module, seq_len: int) -> float | None:
    """6 N + 12 L d T for a model with a Hugging Face config (a backend's wrapper unwrapped by the caller)."""
    config: Any = getattr(model, "config", None)
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    if not layers or not hidden:
        return None
    seen: set[int] = set()
    params = 0
    for parameter in model.parameters():
        if id(parameter) not in seen:  # a tied matrix once
            seen.add(id(parameter))
            params += int(getattr(parameter, "ds_numel", 0) or parameter.numel())  # ZeRO-3 keeps the full count aside
    return 6.0 * params + 12.0 * layers * hidden * seq_len
