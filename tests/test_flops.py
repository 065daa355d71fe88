"""perf/mfu and perf/tokens_per_s_per_gpu (trainer_core/models/flops.py, StepTimer): the FLOPs-per-token formula on a
real model, the peaks table, and what a report says with GPUs and without. The GPU itself cannot exist here: a
Throughput with a named device's numbers stands in for it (tests/test_gpu.py checks a real H100/H200 run)."""

from __future__ import annotations

import time

import pytest

from trainer_core.models.builtin import build_builtin
from trainer_core.models.flops import flops_per_token, peak_flops
from trainer_core.recipes.common import StepTimer, Throughput


@pytest.mark.parametrize(
    ("device", "precision", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989e12),
        ("NVIDIA H100 PCIe", "bf16", 756e12),
        ("NVIDIA H200", "fp16", 989e12),
        ("NVIDIA A100-SXM4-80GB", "bf16", 312e12),
        ("NVIDIA L40S", "bf16", 362e12),  # not L4's
        ("NVIDIA L4", "bf16", 121e12),
        ("NVIDIA H100 80GB HBM3", "fp32", None),  # no MFU we could stand behind
        ("NVIDIA GeForce GTX 1080", "bf16", None),
    ],
)
def test_the_peaks_table(device: str, precision: str, peak: float | None) -> None:
    assert peak_flops(device, precision) == peak


def test_flops_per_token_is_six_n_plus_the_attention_term_counting_a_tied_matrix_once() -> None:
    model, _ = build_builtin("tiny-gpt2")
    config = model.config
    unique = {id(p): p.numel() for p in model.parameters()}
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight  # tied
    expected = 6 * sum(unique.values()) + 12 * config.n_layer * config.n_embd * 32
    assert flops_per_token(model, 32) == expected
    assert flops_per_token(model.transformer.h[0], 32) is None  # a block has no config: no number


def test_a_report_on_gpus_has_tokens_per_gpu_and_mfu_and_on_the_cpu_neither() -> None:
    gpus = Throughput(gpus=4, flops_per_token=1e9, peak_flops=989e12)
    timer = StepTimer(gpus)
    timer.add(40_000)
    time.sleep(0.05)
    report = timer.report()
    assert report["perf/tokens_per_s_per_gpu"] == pytest.approx(report["perf/tokens_per_s"] / 4)
    assert report["perf/mfu"] == pytest.approx(report["perf/tokens_per_s_per_gpu"] * 1e9 / 989e12)
    unknown = StepTimer(Throughput(gpus=2))  # a device not in the table: throughput, no MFU
    unknown.add(100)
    assert "perf/mfu" not in unknown.report()
    cpu = StepTimer()
    cpu.add(100)
    assert set(cpu.report()) == {"perf/step_s", "perf/tokens_per_s"}
