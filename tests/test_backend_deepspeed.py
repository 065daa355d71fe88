"""DeepSpeed ZeRO on CPU (gloo), 2 rank processes (forked with torchrun's environment): the same loss
curve as the torch backend for SFT and DPO at every stage, exact resume, an export that loads with
from_pretrained, and a run through DeepSpeed's own launcher. DeepSpeed's compiled ops are built before
the suite (tests/harness/deepspeed_ops.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlplane.spec import parse_spec
from tests.harness.launch import ROOT, after, checkpoint, launch, max_diff, trainer_env
from tests.harness.specs import SHARDED_SFT, packed
from tests.harness.training import assert_export_matches, metrics
from trainer_core.backends.deepspeed_backend import adam_step_tensor
from trainer_core.models import build_builtin
from worker.launcher import split_rank, trainer_command

TOLERANCE = 1e-5  # fp32, same data, same init: only the order of floating-point sums differs

SFT = {**SHARDED_SFT, "name": "ds-sft"}
DPO = {**SFT, "name": "ds-dpo", "algorithm": "dpo", "train": {**SFT["train"], "lr": 1e-3}}
BF16_ZERO2 = {"kind": "deepspeed", "precision": "bf16", "zero_stage": 2}
# SPIN: each rank answers its half of a round's prompts and scores both sides, forwards gathered over the ZeRO-3 shards.
SPIN = {
    **DPO,
    "name": "ds-spin",
    "algorithm": "spin",
    "train": {**DPO["train"], "steps": 8, "checkpoint_every": None},
    "spin": {"iterations": 2, "prompts_per_iteration": 16, "beta": 0.5, "gen": {"max_new_tokens": 4}, "samples_to_log": 1},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each run once for the module, all from builtin:tiny-gpt2's weights saved to a directory (so that a model
    built by zero.Init from the same files has a plain ZeRO-3 run to follow): the torch backend's SFT and DPO,
    SFT at each ZeRO setting, and DPO on ZeRO-3."""
    tmp = tmp_path_factory.mktemp("runs")
    model, tokenizer = build_builtin("tiny-gpt2")
    model.save_pretrained(tmp / "start")
    tokenizer.save_pretrained(tmp / "start")
    sft, dpo = ({**spec, "model": {**spec["model"], "path": str(tmp / "start")}} for spec in (SFT, DPO))
    torch_backend = {"kind": "torch", "precision": "fp32"}
    out = {"torch-sft": launch(tmp, sft, torch_backend, "torch-sft"), "torch-dpo": launch(tmp, dpo, torch_backend, "torch-dpo")}
    for name, zero in ZERO.items():
        nvme = {"nvme_path": str(tmp / f"{name}-swap")} if zero.get("offload") == "nvme" else {}
        out[name] = launch(tmp, sft, {"kind": "deepspeed", "precision": "fp32", **zero, **nvme}, name)
    out["zero3-dpo"] = launch(tmp, dpo, {"kind": "deepspeed", "precision": "fp32", "zero_stage": 3}, "zero3-dpo")
    out["torch-spin"] = launch(tmp, SPIN, torch_backend, "torch-spin")
    out["zero3-spin"] = launch(tmp, SPIN, {"kind": "deepspeed", "precision": "fp32", "zero_stage": 3}, "zero3-spin")
    out["zero3-packed"] = launch(tmp, packed(sft), {"kind": "deepspeed", "precision": "fp32", "zero_stage": 3}, "zero3-packed")
    return {**out, "start": tmp / "start"}


ZERO = {
    "zero0": {"zero_stage": 0},
    "zero2": {"zero_stage": 2},
    "zero3": {"zero_stage": 3},
    "zero3-offload": {"zero_stage": 3, "offload": "cpu"},
    # ZeRO-Infinity through DeepSpeed's async_io op (compiled against libaio, which .ci/run installs);
    # the "NVMe" is a directory on this machine's disk
    "zero3-nvme": {"zero_stage": 3, "offload": "nvme"},
}


@pytest.mark.parametrize("name", list(ZERO))
def test_sft_loss_curve_matches_the_torch_backend(runs: dict[str, Path], name: str) -> None:
    assert max_diff(metrics(runs[name], "train/loss"), metrics(runs["torch-sft"], "train/loss")) < TOLERANCE
    # The pre-clip norm (clipping at 1.0 is on: these norms are 3-7).
    assert max_diff(metrics(runs[name], "train/grad_norm"), metrics(runs["torch-sft"], "train/grad_norm")) < 1e-3


def test_padding_free_token_budget_micro_batches_follow_the_padded_curve(runs: dict[str, Path]) -> None:
    """ZeRO-3 with train.padding_free and train.micro_batch_tokens: the torch backend's padded curve (the SFT loss
    weighs every token of the global batch alike, so neither the packing nor the split changes a step)."""
    assert max_diff(metrics(runs["zero3-packed"], "train/loss"), metrics(runs["torch-sft"], "train/loss")) < TOLERANCE
    assert max_diff(metrics(runs["zero3-packed"], "train/grad_norm"), metrics(runs["torch-sft"], "train/grad_norm")) < 1e-3


def test_nvme_offload_swaps_through_the_given_directory(runs: dict[str, Path]) -> None:
    swap = runs["zero3-nvme"].parent / "zero3-nvme-swap" / "zero_stage_3"
    assert {p.relative_to(swap).as_posix() for p in swap.glob("*/rank*")} >= {"optimizer/rank0", "optimizer/rank1"}


def test_dpo_loss_curve_matches_the_torch_backend(runs: dict[str, Path]) -> None:
    out = runs["zero3-dpo"]
    assert max_diff(metrics(out, "train/loss"), metrics(runs["torch-dpo"], "train/loss")) < TOLERANCE
    assert max_diff(metrics(out, "rewards/margin"), metrics(runs["torch-dpo"], "rewards/margin")) < 1e-4


def test_spin_matches_the_torch_backend(runs: dict[str, Path]) -> None:
    """Two ranks answer each round's prompts from the ZeRO-3 shards (synced generation) as the torch backend's two do
    (the same draws), and the curve follows (measured within 1.2e-7)."""
    spin, torch_run = runs["zero3-spin"], runs["torch-spin"]
    assert metrics(spin, "spin/answers_equal") == metrics(torch_run, "spin/answers_equal")
    assert sorted(metrics(spin, "spin/iteration")) == list(range(1, 9))
    assert max_diff(metrics(spin, "train/loss"), metrics(torch_run, "train/loss")) < TOLERANCE
    assert max_diff(metrics(spin, "rewards/margin"), metrics(torch_run, "rewards/margin")) < 1e-4


@pytest.mark.parametrize("name", ["zero2", "zero3"])
def test_resume_continues_the_same_curve(tmp_path: Path, runs: dict[str, Path], name: str) -> None:
    """The straight run's step-6 checkpoint, a new set of processes, --resume: steps 7-12 have the losses and
    schedule of the straight run's."""
    backend = {"kind": "deepspeed", "precision": "fp32", **ZERO[name]}
    out = launch(tmp_path, SFT, backend, "resumed", "--resume", checkpoint(runs[name], 6))
    assert metrics(out, "train/loss") == after(metrics(runs[name], "train/loss"), 6)
    assert metrics(out, "train/lr") == after(metrics(runs[name], "train/lr"), 6)


def test_zero_init_builds_the_model_partitioned_and_trains_the_same_curve(tmp_path: Path, runs: dict[str, Path]) -> None:
    """backend.zero_init: from_pretrained (of the module's saved start) builds the model inside
    deepspeed.zero.Init, so no rank holds it whole; SFT then follows plain ZeRO-3's curve from the same
    weights, a resume (weights loaded through gathered parameters) is exact, and DPO, whose
    reference is loaded again from the spec instead of copied, follows plain ZeRO-3's too."""
    start = {**SFT["model"], "path": str(runs["start"])}
    zero_init = {"kind": "deepspeed", "precision": "fp32", "zero_stage": 3, "zero_init": True}
    sft = {**SFT, "model": start}
    built = launch(tmp_path, sft, zero_init, "built")
    assert "model built by zero.Init: ZeRO-3 partitioned over 2 ranks" in (tmp_path / "built.log").read_text()
    assert max_diff(metrics(built, "train/loss"), metrics(runs["zero3"], "train/loss")) < TOLERANCE

    resumed = launch(tmp_path, sft, zero_init, "resumed", "--resume", checkpoint(built, 6))
    assert metrics(resumed, "train/loss") == after(metrics(built, "train/loss"), 6)

    built_dpo = launch(tmp_path, {**DPO, "model": start}, zero_init, "built-dpo")
    assert "reference model: ZeRO-3 partitioned over 2 ranks" in (tmp_path / "built-dpo.log").read_text()
    assert max_diff(metrics(built_dpo, "train/loss"), metrics(runs["zero3-dpo"], "train/loss")) < TOLERANCE


@pytest.fixture(scope="module")
def launcher_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], str]:
    """bf16 ZeRO-2 in 2 processes started as the worker starts backend.kind deepspeed: DeepSpeed's own launcher;
    (OUT, the command, its output)."""
    tmp = tmp_path_factory.mktemp("launcher")
    spec = {**SFT, "backend": {**BF16_ZERO2, "processes": 2}}
    path = tmp / "spec.json"
    path.write_text(json.dumps(spec))
    command = trainer_command(sys.executable, parse_spec(spec), path, tmp / "out", resume=None)
    result = subprocess.run(command, cwd=ROOT, env=trainer_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return tmp / "out", command, result.stdout + result.stderr


@pytest.mark.parametrize("stage", [2, 3])
def test_bf16_resume_continues_the_same_curve(tmp_path: Path, request: pytest.FixtureRequest, stage: int) -> None:
    """bf16: the checkpoint keeps the fp32 masters (model/) and Adam's moments; DeepSpeed builds its
    masters from the bf16-cast weights, so the saved ones are written back after initialize (without
    that the curves parted by 1e-3 from the second resumed step). Steps 7-12 resumed from the straight run's
    step-6 checkpoint equal the straight run's (at stage 2, the run DeepSpeed's launcher started)."""
    backend = {"kind": "deepspeed", "precision": "bf16", "zero_stage": stage}
    straight = request.getfixturevalue("launcher_run")[0] if stage == 2 else launch(tmp_path, SFT, backend, "straight")
    resumed = launch(tmp_path, SFT, backend, "resumed", "--resume", checkpoint(straight, 6))
    assert metrics(resumed, "train/loss") == after(metrics(straight, "train/loss"), 6)
    assert metrics(resumed, "train/grad_norm") == after(metrics(straight, "train/grad_norm"), 6)


def test_zero3_export_loads_with_from_pretrained(runs: dict[str, Path]) -> None:
    """ZeRO-3 holds each rank's shard only; the export gathers the whole model (GPT-2's tied lm_head
    and wte included) and gives the torch backend's logits."""
    assert_export_matches(runs["zero3"] / "final", runs["torch-sft"] / "final")


def test_the_deepspeed_launcher_trains_bf16_zero2(launcher_run: tuple[Path, list[str], str]) -> None:
    """What the worker starts for backend.kind deepspeed with several processes; bf16 learns."""
    out, command, output = launcher_run
    assert command[1:4] == ["-m", "deepspeed.launcher.runner", "--num_gpus"] and "--no_local_rank" in command
    loss = metrics(out, "train/loss")
    assert sorted(loss) == list(range(1, 13)) and loss[12] < loss[1] - 1.0, loss
    # DeepSpeed's launcher does not prefix its ranks' lines as torchrun's --tee does; the trainer does
    ranks = {split_rank(line)[0] for line in output.splitlines()}
    assert ranks == {0, 1}, ranks


def test_a_cpu_spec_with_two_processes_starts_them_itself(tmp_path: Path) -> None:
    """`python -m trainer_core run` (and so `rlplane train`) of a spec with backend.processes 2, started as
    one process, re-runs itself under torchrun with that many ranks."""
    spec = {**SFT, "backend": {"kind": "deepspeed", "precision": "fp32", "zero_stage": 2, "processes": 2}}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({**spec, "train": {**SFT["train"], "steps": 4, "checkpoint_every": None}}))
    command = [sys.executable, "-m", "trainer_core", "run", str(path), "--out", str(tmp_path / "out")]
    result = subprocess.run(command, cwd=ROOT, env=trainer_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "starting 2 processes with torchrun" in result.stderr
    assert sorted(metrics(tmp_path / "out", "train/loss")) == [1, 2, 3, 4]


def test_a_one_process_run_keeps_its_world_in_memory_and_needs_no_port() -> None:
    """Without torchrun a DeepSpeed run is a world of one held in the process: the rendezvous port's default (29500)
    taken by another run on the node does not stop it (on a GPU machine, the second of two one-GPU runs failed with
    EADDRINUSE when DeepSpeed opened a TCP store there)."""
    import os
    import socket

    import torch.distributed as dist

    from rlplane.spec.sections import TrainSpec
    from trainer_core.backends import make_backend

    saved = dict(os.environ)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(name, None)
    held = socket.socket()
    try:
        try:
            held.bind(("127.0.0.1", 29500))
            held.listen()
        except OSError:
            pass  # something on this machine holds it already: the same situation
        spec = parse_spec({**SHARDED_SFT, "backend": {"kind": "deepspeed", "zero_stage": 0}}).backend
        backend = make_backend(spec, TrainSpec(steps=1, batch_size=2))
        try:
            assert dist.is_initialized() and dist.get_world_size() == 1
        finally:
            backend.close()
        assert not dist.is_initialized()
    finally:
        held.close()
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.parametrize(("group", "device"), [({"fused": True}, "meta"), ({"capturable": True}, "meta"), ({}, "cpu")])
def test_a_resumed_adam_step_counter_sits_where_its_kernel_reads_it(group: dict, device: str) -> None:
    """A resume writes Adam's step counter itself: on the parameter's device for the fused and capturable kernels
    (a CPU counter beside CUDA parameters stopped the first resumed ZeRO-2 bf16 step on an H200), else on the CPU as
    torch keeps it. A meta tensor stands in for a GPU's parameter: any device but the CPU shows the placement."""
    flat = torch.zeros(4, device="meta")
    counter = adam_step_tensor(6.0, flat, group)
    assert counter.device.type == device and counter.dtype == torch.float32 and counter.shape == ()
    if device == "cpu":
        assert float(counter) == 6.0
