"""FSDP2 (fully_shard) on CPU (gloo), ranks forked with torchrun's environment: the torch backend's loss curves
for SFT (GPT-2, tied embeddings), DPO and SPIN (Llama), in 2 processes and in 1, sharded checkpoints (each rank's
shards through torch.distributed.checkpoint, safetensors and JSON) that resume exactly in a fresh set of
processes and in one process, and an export that loads with from_pretrained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from rlplane.spec.sections import Fsdp2Backend as Fsdp2BackendSpec
from rlplane.spec.sections import TrainSpec
from tests.harness.launch import finish, max_diff, start
from tests.harness.specs import SHARDED_SFT, packed
from tests.harness.training import assert_export_matches, metrics
from trainer_core.backends import BackendError, make_backend
from trainer_core.backends.fsdp2_backend import unfuse_for_sharded_scaler
from trainer_core.checkpoint import CheckpointError, load_checkpoint, verify
from trainer_core.models import build_tokenizer
from trainer_core.models.builtin import build_builtin
from trainer_core.models.speed import repeated_blocks

TOLERANCE = 1e-5  # fp32, same data, same init: only the order of floating-point sums differs
FSDP2 = {"kind": "fsdp2", "precision": "fp32"}
TORCH = {"kind": "torch", "precision": "fp32"}

SFT = {**SHARDED_SFT, "name": "fsdp2-sft"}
DPO = {
    **SFT,
    "name": "fsdp2-dpo",
    "algorithm": "dpo",
    "model": {"path": "builtin:tiny-llama", "max_seq_len": 32},
    "train": {**SFT["train"], "steps": 8, "lr": 1e-3, "checkpoint_every": None},
}
# SPIN: each rank answers its half of a round's prompts (collective forwards over the shards) and scores them.
SPIN = {
    **DPO,
    "name": "fsdp2-spin",
    "algorithm": "spin",
    "spin": {"iterations": 2, "prompts_per_iteration": 16, "beta": 0.5, "gen": {"max_new_tokens": 4}, "samples_to_log": 1},
}


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
        "torch-spin": start(tmp, SPIN, TORCH, "torch-spin"),
        "fsdp2-spin": start(tmp, SPIN, FSDP2, "fsdp2-spin"),
        "torch-sft-1": start(tmp, one, TORCH, "torch-sft-1", processes=1),
        "fsdp2-sft-1": start(tmp, one, FSDP2, "fsdp2-sft-1", processes=1),
        "fsdp2-sft-packed": start(tmp, packed(SFT), FSDP2, "fsdp2-sft-packed"),
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


def test_padding_free_token_budget_micro_batches_follow_the_padded_curve(runs: dict[str, Path]) -> None:
    """FSDP2 with train.padding_free and train.micro_batch_tokens: the torch backend's padded curve."""
    assert max_diff(metrics(runs["fsdp2-sft-packed"], "train/loss"), metrics(runs["torch-sft"], "train/loss")) < TOLERANCE
    assert max_diff(metrics(runs["fsdp2-sft-packed"], "train/grad_norm"), metrics(runs["torch-sft"], "train/grad_norm")) < 1e-4


def test_one_process_gives_the_curve_of_two(runs: dict[str, Path]) -> None:
    """train.batch_size is the global batch: 1 process and 2 train the same curve, on either backend (the SFT
    loss is weighted by the global batch's tokens). FSDP2 in a world of one still shards, over a mesh of one."""
    assert max_diff(metrics(runs["fsdp2-sft-1"], "train/loss"), metrics(runs["torch-sft-1"], "train/loss")) < TOLERANCE
    assert max_diff(metrics(runs["torch-sft-1"], "train/loss"), metrics(runs["torch-sft"], "train/loss")) < TOLERANCE
    assert max_diff(metrics(runs["fsdp2-sft-1"], "train/loss"), metrics(runs["fsdp2-sft"], "train/loss")) < TOLERANCE


def test_dpo_loss_curve_matches_the_torch_backend(runs: dict[str, Path]) -> None:
    assert max_diff(metrics(runs["fsdp2-dpo"], "train/loss"), metrics(runs["torch-dpo"], "train/loss")) < TOLERANCE
    assert max_diff(metrics(runs["fsdp2-dpo"], "rewards/margin"), metrics(runs["torch-dpo"], "rewards/margin")) < 1e-4


def test_spin_matches_the_torch_backend(runs: dict[str, Path]) -> None:
    """Two data ranks answer a round's prompts as the torch backend's two do (the same draws), over the shards."""
    spin, torch_run = runs["fsdp2-spin"], runs["torch-spin"]
    assert metrics(spin, "spin/answers_equal") == metrics(torch_run, "spin/answers_equal")
    assert sorted(metrics(spin, "spin/iteration")) == list(range(1, 9))
    assert max_diff(metrics(spin, "train/loss"), metrics(torch_run, "train/loss")) < TOLERANCE
    assert max_diff(metrics(spin, "rewards/margin"), metrics(torch_run, "rewards/margin")) < 1e-4
    assert metrics(spin, "rewards/margin")[8] > 0  # the data's answers pulled ahead of the model's


def test_resume_continues_the_same_curve(runs: dict[str, Path]) -> None:
    """The straight run's step-6 checkpoint (each rank's shards of the weights and name-keyed Adam state, loaded
    with dcp after prepare), resumed by a new set of processes: steps 7-12 and the final weights are the
    straight run's, bit for bit."""
    straight, resumed = runs["fsdp2-sft"], runs["resumed"]
    assert sorted(metrics(resumed, "train/loss")) == list(range(7, 13))
    for key in ("train/loss", "train/lr", "train/grad_norm"):
        assert metrics(resumed, key) == {s: v for s, v in metrics(straight, key).items() if s > 6}, key
    a = load_file(str(straight / "final" / "model.safetensors"))
    b = load_file(str(resumed / "final" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_two_process_checkpoint_resumes_in_one(runs: dict[str, Path]) -> None:
    """The sharded checkpoint does not tie a resume to the process count: one process reads both ranks' shards
    (dcp reshards) and goes on along the two-process curve."""
    straight, resumed = metrics(runs["fsdp2-sft"], "train/loss"), metrics(runs["resumed-1"], "train/loss")
    assert sorted(resumed) == list(range(7, 13))
    assert max_diff(resumed, {s: v for s, v in straight.items() if s > 6}) < TOLERANCE
    assert metrics(runs["resumed-1"], "train/lr") == {s: v for s, v in metrics(runs["fsdp2-sft"], "train/lr").items() if s > 6}


def test_checkpoint_is_sharded_safetensors_and_json(runs: dict[str, Path]) -> None:
    """Each rank wrote its own half of the weights and of Adam's moments (keyed by parameter name) to dcp/; the
    index and the optimizer's settings are JSON, no file of the checkpoint is a pickle, and its manifest
    covers the shards. No gathered optimizer state is written."""
    checkpoint = runs["fsdp2-sft"] / "checkpoints" / "step-000012"
    assert verify(checkpoint) and not (checkpoint / "optimizer.json").exists()
    manifest = json.loads((checkpoint / "manifest.json").read_text())["files"]
    assert {"dcp/__0_0.safetensors", "dcp/__1_0.safetensors", "dcp/metadata.json", "dcp/values.json"} <= manifest.keys()
    for path in checkpoint.rglob("*"):
        assert path.is_dir() or not path.read_bytes().startswith(b"\x80"), path  # pickle's first byte
    moments = json.loads((checkpoint / "dcp" / "metadata.json").read_text())["entries"][
        "optimizer.state.transformer.wte.weight.exp_avg"
    ]
    vocab = len(build_tokenizer())
    assert moments["size"] == [vocab, 64] and [c["offsets"] for c in moments["chunks"]] == [[0, 0], [-(-vocab // 2), 0]]
    with safe_open(str(checkpoint / "dcp" / "__1_0.safetensors"), framework="pt") as rank1:
        assert rank1.get_slice(f"optimizer.state.transformer.wte.weight.exp_avg@{-(-vocab // 2)},0").get_shape() == [
            vocab // 2,
            64,
        ]
    settings = json.loads((checkpoint / "dcp" / "values.json").read_text())
    assert settings["optimizer.param_groups.transformer.wte.weight.initial_lr"] == SFT["train"]["lr"]


def test_only_fsdp2_resumes_the_optimizer_of_a_sharded_checkpoint(runs: dict[str, Path]) -> None:
    """The gathered model/ still loads anywhere (run:<id>@<step> readers); the sharded optimizer state names the fix."""
    checkpoint = runs["fsdp2-sft"] / "checkpoints" / "step-000012"
    model, _ = build_builtin("tiny-gpt2")
    load_checkpoint(checkpoint, model=model, restore_rng=False)
    with pytest.raises(CheckpointError, match="resume it with backend.kind: fsdp2"):
        load_checkpoint(checkpoint, model=model, optimizer=torch.optim.AdamW(model.parameters()), restore_rng=False)


def test_export_loads_with_from_pretrained(runs: dict[str, Path]) -> None:
    """The export gathers every shard (GPT-2's tied lm_head and wte included) and gives the torch backend's logits."""
    assert_export_matches(runs["fsdp2-sft"] / "final", runs["torch-sft"] / "final")
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


def test_fp16_loss_scaling_steps_the_optimizer_the_recipes_make() -> None:
    """fp16 on FSDP2: the recipes' fused AdamW cannot take the sharded scaler's 1-element found-inf flag (found on
    an H200; the CPU shows the same error), so the backend unfuses it. Scaled steps on the CPU: the fused one fails
    as on the GPU, the unfused ones train."""
    import torch.distributed as dist
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    def scaled_steps(unfused: bool, steps: int) -> torch.Tensor:
        weight = torch.nn.Parameter(torch.ones(4, 4))
        optimizer = torch.optim.AdamW([weight], lr=0.1, fused=True)
        if unfused:
            unfuse_for_sharded_scaler(optimizer)
        scaler = ShardedGradScaler("cpu", enabled=True)
        for _ in range(steps):
            scaler.scale((weight * weight).sum()).backward()
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
        return weight.detach()

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError, match="broadcast shape"):
            scaled_steps(unfused=False, steps=1)
        assert float(scaled_steps(unfused=True, steps=2).max()) < 1.0  # both steps moved the weights toward 0
    finally:
        dist.destroy_process_group()
