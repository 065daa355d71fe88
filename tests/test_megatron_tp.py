"""Converted weights run in Megatron-Core: a TP=2 GPTModel (2 gloo processes, CPU) built from the
converted tiny GPT-2 and tiny Llama gives the HF model's logits and gradients, and exporting its
weights back to HF after the forward gives the original weights bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from trainer_core.launch import free_port
from trainer_core.models import build_builtin

ROOT = Path(__file__).resolve().parents[1]
TP = 2
NAMES = ("tiny-gpt2", "tiny-llama")  # tests/megatron_tp_worker.py runs these (imported, it would load megatron here)
# fp32 on CPU: the same maths summed in another order (TP all-reduce, fused qkv, torch norms)
# measured 2.4e-7 on these models; 1e-5 leaves room for that and none for a misplaced head or shard.
LOGITS_TOLERANCE = 1e-5
GRAD_TOLERANCE = 1e-5  # measured about 4e-7 of the largest gradient


@pytest.fixture(scope="module")
def tp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One torchrun of tests/megatron_tp_worker.py for both models; its output directory."""
    out = tmp_path_factory.mktemp("megatron-tp")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(TP), "--master_port", str(free_port())]
    # CPU even on a GPU node: the comparison is the CPU path's (gloo, the CPU shim).
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [*command, "tests/megatron_tp_worker.py", str(out)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return out


@pytest.mark.parametrize("name", NAMES)
def test_tp2_logits_match_the_hf_model(tp_run: Path, name: str) -> None:
    for rank in range(TP):
        result = json.loads((tp_run / f"rank{rank}.json").read_text())[name]
        assert result["padded_vocab"] == 600 and result["logits_shape"] == [3, 16, 512]
        assert result["max_abs_diff"] < LOGITS_TOLERANCE, (rank, result)


@pytest.mark.parametrize("name", NAMES)
def test_tp2_gradients_match_the_hf_model(tp_run: Path, name: str) -> None:
    """The same next-token loss backpropagated: every GPTModel gradient, gathered over TP and mapped
    to HF names by the weight conversion, is the HF model's (relative to the largest gradient)."""
    for rank in range(TP):
        result = json.loads((tp_run / f"rank{rank}.json").read_text())[name]
        assert result["grad_max_rel_diff"] < GRAD_TOLERANCE, (rank, result)


@pytest.mark.parametrize("name", NAMES)
def test_export_after_forward_equals_the_original_weights(tp_run: Path, name: str) -> None:
    original = build_builtin(name)[0].state_dict()
    exported = AutoModelForCausalLM.from_pretrained(tp_run / f"export-{name}").state_dict()
    assert sorted(exported) == sorted(original)
    assert [k for k in original if not torch.equal(exported[k], original[k])] == []
