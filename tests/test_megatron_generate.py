"""Sampling from a GPTModel shard with megatron-core's KV cache (trainer_core/backends/megatron/generate.py), in this
process (TP 1): with the same RNG it returns exactly what Hugging Face's generate() returns for the model
it was converted from: left-padded prompts, greedy and sampled (temperature, top-k, top-p), rows that
finish early at an eos id or a stop string and continue with padding, and an early end when every row
has finished. The tensor-parallel runs (GRPO, PPO) are tests/test_backend_megatron*.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from rlplane.spec.sections import MegatronBackend as MegatronBackendSpec
from rlplane.spec.sections import TrainSpec
from trainer_core.backends import make_backend
from trainer_core.backends.dist import DistEnv
from trainer_core.backends.megatron.generate import generate
from trainer_core.models.builtin import build_builtin
from trainer_core.recipes.common import make_optimizer

SAMPLING = {
    "greedy": {"do_sample": False},
    "sampled": {"do_sample": True},  # HF's generation config's own top_k (50) applies on both sides
    "temperature-top-k-top-p": {"do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.9},
}


@pytest.fixture(scope="module")
def backend() -> Iterator:
    backend = make_backend(MegatronBackendSpec(kind="megatron", precision="fp32"), TrainSpec(steps=1, batch_size=2), DistEnv())
    yield backend
    backend.close()


def prompts(pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = [[30, 31, 32, 33, 34, 35], [40, 41], [50, 51, 52, 53]]
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    return ids, (ids != pad).long()


def both(backend, hf: torch.nn.Module, seed: int, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
    """(the backend's sample from the prepared shards, HF's from `hf`), each from the same RNG state."""
    torch.manual_seed(seed)
    with torch.no_grad():
        expected = hf.generate(**kwargs)
    torch.manual_seed(seed)
    return backend.generate(hf, **kwargs), expected


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2"])
@pytest.mark.parametrize("sampling", sorted(SAMPLING))
def test_the_shard_samples_what_the_hf_model_samples(backend, name: str, sampling: str) -> None:
    hf, tokenizer = build_builtin(name)
    backend.prepare(hf, make_optimizer(hf, TrainSpec(steps=1, batch_size=2)))
    ids, mask = prompts(tokenizer.pad_token_id)
    common = {"input_ids": ids, "attention_mask": mask, "max_new_tokens": 12, "pad_token_id": tokenizer.pad_token_id}
    ours, expected = both(backend, hf, 7, eos_token_id=None, **common, **SAMPLING[sampling])
    assert ours.shape == (3, 6 + 12) and torch.equal(ours, expected)
    # An eos id the first row reaches early: it finishes there and continues with padding, the others go on.
    eos = int(expected[0, 6 + 2])
    ours, expected = both(backend, hf, 7, eos_token_id=eos, **common, **SAMPLING[sampling])
    assert torch.equal(ours, expected)
    assert (ours[0, 6 + 3 :] == tokenizer.pad_token_id).all()


def test_stop_strings_and_an_early_end(backend) -> None:
    """Every row ends at its stop string (or eos), and generation ends before max_new_tokens as HF's does."""
    hf, tokenizer = build_builtin("tiny-llama")
    backend.prepare(hf, make_optimizer(hf, TrainSpec(steps=1, batch_size=2)))
    ids, mask = prompts(tokenizer.pad_token_id)
    common = {"input_ids": ids, "attention_mask": mask, "pad_token_id": tokenizer.pad_token_id, "do_sample": False}
    with torch.no_grad():
        free = hf.generate(max_new_tokens=12, eos_token_id=tokenizer.eos_token_id, **common)
    # Each row's third generated token, as text, is a stop string: every row stops there or earlier.
    stops = sorted({tokenizer.decode(free[row, 6 + 2 : 6 + 3]) for row in range(3)} - {""})
    options = {"stop_strings": stops, "tokenizer": tokenizer, "eos_token_id": tokenizer.eos_token_id, "max_new_tokens": 12}
    ours, expected = both(backend, hf, 0, **common, **options)
    assert torch.equal(ours, expected)
    assert ours.shape[1] < 6 + 12  # ended early: every row had finished


def test_unknown_options_are_refused(backend) -> None:
    hf, tokenizer = build_builtin("tiny-llama")
    model, _, _ = backend.prepare(hf, make_optimizer(hf, TrainSpec(steps=1, batch_size=2)))
    ids, mask = prompts(tokenizer.pad_token_id)
    with pytest.raises(TypeError, match=r"does not support \['num_beams'\]"):
        generate(model.gpt, 512, ids, attention_mask=mask, max_new_tokens=2, pad_token_id=0, num_beams=2)
