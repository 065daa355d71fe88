"""The model section's speed switches on CPU: model.compile's compiled blocks train as the eager model does and leave
generation eager; model.kernels: liger refuses, naming the fix, where it cannot run. Liger's kernels themselves, and
both switches' speed, need a GPU: tests/test_gpu.py and bench/gpu.py."""

from __future__ import annotations

import copy

import pytest
import torch
from torch._dynamo.utils import counters

from rlplane.spec.sections import ModelSpec
from trainer_core.models import ModelError, build_builtin, load_from_spec
from trainer_core.models.speed import CompiledForTraining, apply_kernels, compile_blocks


def test_compiled_blocks_train_as_the_eager_model_does_and_generate_eagerly() -> None:
    """One forward and backward of tiny-llama through compiled blocks: the eager model's loss and gradients (fp32,
    within 1e-6). The blocks share one compiled graph, and generation (no gradients) compiles nothing."""
    torch._dynamo.reset()
    counters.clear()
    eager, _ = build_builtin("tiny-llama", "causal", seed=0)
    compiled = copy.deepcopy(eager)
    assert compile_blocks(compiled) == eager.config.num_hidden_layers == 2
    ids = torch.randint(0, eager.config.vocab_size, (4, 24), generator=torch.Generator().manual_seed(0))
    for model in (eager, compiled):
        model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss.backward()
    for (name, a), b in zip(eager.named_parameters(), compiled.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6, rtol=0), name
    graphs = counters["stats"]["unique_graphs"]
    assert graphs == 1, f"{graphs} graphs for {compile_blocks.__name__}'s blocks: each block compiled its own"
    with torch.no_grad():
        answer = compiled.generate(ids[:1, :6], max_new_tokens=5, do_sample=False)
    with torch.no_grad():
        assert torch.equal(answer, eager.generate(ids[:1, :6], max_new_tokens=5, do_sample=False))
    assert counters["stats"]["unique_graphs"] == graphs


def test_the_model_section_compiles_the_blocks_it_loads() -> None:
    model, _ = load_from_spec(ModelSpec(path="builtin:tiny-gpt2", compile=True))
    assert all(isinstance(block.forward, CompiledForTraining) for block in model.transformer.h)
    plain, _ = load_from_spec(ModelSpec(path="builtin:tiny-gpt2"))
    assert not any(isinstance(block.forward, CompiledForTraining) for block in plain.transformer.h)


def test_a_model_without_repeated_blocks_is_refused_naming_the_switch() -> None:
    with pytest.raises(ModelError, match="model.compile: found no repeated decoder blocks .* set model.compile: false"):
        compile_blocks(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_liger_kernels_are_refused_with_the_fix_where_they_cannot_run() -> None:
    """Here (no liger-kernel package, or no CUDA GPU) the trainer stops before training, naming model.kernels."""
    model, _ = build_builtin("tiny-llama", "causal", seed=0)
    with pytest.raises(ModelError, match=r"model\.kernels: liger .*set model\.kernels: none"):
        apply_kernels(model, "liger")
    apply_kernels(model, "none")  # the default changes nothing
