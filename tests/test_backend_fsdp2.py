"""FSDP2 (fully_shard) on CPU (gloo) under torchrun: the torch backend's loss curves for SFT (GPT-2, tied
embeddings) and DPO (Llama), in 2 processes and in 1, an exact resume in a fresh set of processes, and an
export that loads with from_pretrained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from tests.training import metrics
from trainer_core.backends import BackendError, make_backend
from trainer_core.backends.fsdp2_backend import repeated_blocks
from trainer_core.launch import free_port
from trainer_core.models import build_tokenizer
from trainer_core.models.builtin import build_builtin
from trainer_core.spec_sections import Fsdp2Backend as Fsdp2BackendSpec
from trainer_core.spec_sections import TrainSpec

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-5  # fp32, same data, same init: only the order of floating-point sums differs
FSDP2 = {"kind": "fsdp2", "precision": "fp32"}
TORCH = {"kind": "torch", "precision": "fp32"}

SFT = {
    "name": "fsdp2-sft",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": {"source": "builtin:arithmetic", "eval_fraction": 0.0},
    "train": {
        "steps": 12,
        "batch_size": 8,
        "micro_batch_size": 2,  # 2 micro-steps per rank: no_sync is exercised
        "lr": 3e-3,
        "log_every": 1,
        "eval_every": None,
        "checkpoint_every": 6,
    },
}
DPO = {
    **SFT,
    "name": "fsdp2-dpo",
    "algorithm": "dpo",
    "model": {"path": "builtin:tiny-llama", "max_seq_len": 32},
    "train": {**SFT["train"], "steps": 8, "lr": 1e-3, "checkpoint_every": None},
}


def start(tmp: Path, spec: dict, backend: dict, name: str, *args: str, processes: int = 2) -> tuple[Path, subprocess.Popen]:
    """`torchrun --nproc_per_node N -m trainer_core run SPEC --out OUT ARGS`, started; (OUT, the process)."""
    out = tmp / name
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({**spec, "backend": {**backend, "processes": processes}}))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
    command += ["--master_port", str(free_port()), "-m", "trainer_core", "run", str(path), "--out", str(out), *args]
    log = (tmp / f"{name}.log").open("w")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return out, subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def finish(out: Path, process: subprocess.Popen) -> Path:
    assert process.wait(timeout=600) == 0, (out.parent / f"{out.name}.log").read_text()[-6000:]
    return out


def launch(tmp: Path, spec: dict, backend: dict, name: str, *args: str, processes: int = 2) -> Path:
    return finish(*start(tmp, spec, backend, name, *args, processes=processes))


def max_diff(a: dict[int, float], b: dict[int, float]) -> float:
    assert sorted(a) == sorted(b) and a, (sorted(a), sorted(b))
    return max(abs(a[step] - b[step]) for step in a)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each run once for the module, side by side: start-up (imports) is most of a run's 25-45 s. The resumes
    start from fsdp2-sft's step-6 checkpoint as soon as it is done."""
    tmp = tmp_path_factory.mktemp("runs")
    one = {**SFT, "train": {**SFT["train"], "checkpoint_every": None}}
    started = {
        "fsdp2-sft": start(tmp, SFT, FSDP2, "fsdp2-sft"),
        "torch-sft": start(tmp, SFT, TORCH, "torch-sft"),
        "torch-dpo": start(tmp, DPO, TORCH, "torch-dpo"),
        "fsdp2-dpo": start(tmp, DPO, FSDP2, "fsdp2-dpo"),
        "torch-sft-1": start(tmp, one, TORCH, "torch-sft-1", processes=1),
        "fsdp2-sft-1": start(tmp, one, FSDP2, "fsdp2-sft-1", processes=1),
    }
    done = {"fsdp2-sft": finish(*started.pop("fsdp2-sft"))}
    checkpoint = str(done["fsdp2-sft"] / "checkpoints" / "step-000006")
    started["resumed"] = start(tmp, SFT, FSDP2, "resumed", "--resume", checkpoint)
    started["resumed-1"] = start(tmp, SFT, FSDP2, "resumed-1", "--resume", checkpoint, processes=1)
    return done | {name: finish(*run) for name, run in started.items()}


def test_sft_loss_curve_matches_the_torch_backend(runs: dict[str, Path]) -> None:
    assert max_diff(metrics(runs["fsdp2-sft"], "train/loss"), metrics(runs["torch-sft"], "train/loss")) < TOLERANCE
    # The pre-clip norm, reduced over the shards (clipping at 1.0 is on: these norms are 3-5).
    assert max_diff(metrics(runs["fsdp2-sft"], "train/grad_norm"), metrics(runs["torch-sft"], "train/grad_norm")) < 1e-4
    assert metrics(runs["fsdp2-sft"], "train/lr") == metrics(runs["torch-sft"], "train/lr")


def test_one_process_gives_the_curve_of_two(runs: dict[str, Path]) -> None:
    """train.batch_size is the global batch: 1 process and 2 train the same curve, on either backend (the SFT
    loss is weighted by the global batch's tokens). FSDP2 in a world of one still shards, over a mesh of one."""
    assert max_diff(metrics(runs["fsdp2-sft-1"], "train/loss"), metrics(runs["torch-sft-1"], "train/loss")) < TOLERANCE
    assert max_diff(metrics(runs["torch-sft-1"], "train/loss"), metrics(runs["torch-sft"], "train/loss")) < TOLERANCE
    assert max_diff(metrics(runs["fsdp2-sft-1"], "train/loss"), metrics(runs["fsdp2-sft"], "train/loss")) < TOLERANCE


def test_dpo_loss_curve_matches_the_torch_backend(runs: dict[str, Path]) -> None:
    assert max_diff(metrics(runs["fsdp2-dpo"], "train/loss"), metrics(runs["torch-dpo"], "train/loss")) < TOLERANCE
    assert max_diff(metrics(runs["fsdp2-dpo"], "rewards/margin"), metrics(runs["torch-dpo"], "rewards/margin")) < 1e-4


def test_resume_continues_the_same_curve(runs: dict[str, Path]) -> None:
    """The straight run's step-6 checkpoint (gathered weights and name-keyed Adam state), resumed by a new set
    of processes: steps 7-12 and the final weights are the straight run's, bit for bit."""
    straight, resumed = runs["fsdp2-sft"], runs["resumed"]
    assert sorted(metrics(resumed, "train/loss")) == list(range(7, 13))
    for key in ("train/loss", "train/lr", "train/grad_norm"):
        assert metrics(resumed, key) == {s: v for s, v in metrics(straight, key).items() if s > 6}, key
    a = load_file(str(straight / "final" / "model.safetensors"))
    b = load_file(str(resumed / "final" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_two_process_checkpoint_resumes_in_one(runs: dict[str, Path]) -> None:
    """The checkpoint does not depend on the process count: one process resumes it where two left off and
    goes on along the two-process curve."""
    straight, resumed = metrics(runs["fsdp2-sft"], "train/loss"), metrics(runs["resumed-1"], "train/loss")
    assert sorted(resumed) == list(range(7, 13))
    assert max_diff(resumed, {s: v for s, v in straight.items() if s > 6}) < TOLERANCE
    assert metrics(runs["resumed-1"], "train/lr") == {s: v for s, v in metrics(runs["fsdp2-sft"], "train/lr").items() if s > 6}


def test_checkpoint_optimizer_state_is_keyed_by_name(runs: dict[str, Path]) -> None:
    """Adam's moments under parameter names, whole (not one rank's shard): any process count can load them."""
    state = json.loads((runs["fsdp2-sft"] / "checkpoints" / "step-000012" / "optimizer.json").read_text())
    moments = load_file(str(runs["fsdp2-sft"] / "checkpoints" / "step-000012" / "optimizer.safetensors"))
    assert "transformer.h.0.attn.c_attn.weight" in state["state"]
    assert moments["state.transformer.wte.weight.exp_avg"].shape == (len(build_tokenizer()), 64)


def test_export_loads_with_from_pretrained(runs: dict[str, Path]) -> None:
    """The export gathers every shard (GPT-2's tied lm_head and wte included) and gives the torch backend's logits."""
    ours = AutoModelForCausalLM.from_pretrained(str(runs["fsdp2-sft"] / "final")).eval()
    reference = AutoModelForCausalLM.from_pretrained(str(runs["torch-sft"] / "final")).eval()
    ids = torch.tensor([[5, 17, 3, 9, 11, 2, 8]])
    with torch.no_grad():
        assert torch.allclose(ours(ids).logits, reference(ids).logits, atol=1e-4)
    assert ours.lm_head.weight.data_ptr() == ours.transformer.wte.weight.data_ptr()  # still tied
    exported = load_file(str(runs["fsdp2-sft"] / "final" / "model.safetensors"))
    saved = load_file(str(runs["fsdp2-sft"] / "checkpoints" / "step-000012" / "model" / "model.safetensors"))
    assert exported.keys() == saved.keys() and all(torch.equal(exported[k], saved[k]) for k in saved)


@pytest.mark.parametrize(("name", "where"), [("tiny-gpt2", "transformer.h"), ("tiny-llama", "model.layers")])
def test_the_repeated_blocks_are_found(name: str, where: str) -> None:
    model, _ = build_builtin(name)
    assert repeated_blocks(model) == list(model.get_submodule(where))


def test_fp16_on_cpu_is_refused() -> None:
    spec = Fsdp2BackendSpec(precision="fp16")
    with pytest.raises(BackendError, match="bf16 or fp32"):
        make_backend(spec, TrainSpec(steps=1, batch_size=8))
