"""ZeRO-Infinity on CPU: ZeRO-3 with its optimizer state offloaded to "nvme" (a directory on this machine's disk)
through DeepSpeed's async_io op, 2 rank processes, follows the torch backend's loss curve and swaps through the
directory it was given.

async_io is compiled against libaio (which .ci/run installs). Its cold build is two minutes of both cores, so the
suite runs this module last (tests/conftest.py), while its controller builds the op in the background from the
session's start, and the module waits for that build (tests/harness/deepspeed_ops.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.deepspeed_ops import NVME, build
from tests.harness.launch import launch, max_diff
from tests.harness.specs import SHARDED_SFT
from tests.harness.training import metrics

SFT = {**SHARDED_SFT, "name": "ds-nvme-sft"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("nvme")
    build(NVME)
    offload = {"kind": "deepspeed", "precision": "fp32", "zero_stage": 3, "offload": "nvme", "nvme_path": str(tmp / "swap")}
    return {
        "torch": launch(tmp, SFT, {"kind": "torch", "precision": "fp32"}, "torch"),
        "nvme": launch(tmp, SFT, offload, "nvme"),
        "swap": tmp / "swap",
    }


def test_sft_loss_curve_matches_the_torch_backend(runs: dict[str, Path]) -> None:
    assert max_diff(metrics(runs["nvme"], "train/loss"), metrics(runs["torch"], "train/loss")) < 1e-5
    assert max_diff(metrics(runs["nvme"], "train/grad_norm"), metrics(runs["torch"], "train/grad_norm")) < 1e-3


def test_the_optimizer_state_swaps_through_the_given_directory(runs: dict[str, Path]) -> None:
    swap = runs["swap"] / "zero_stage_3"
    assert {p.relative_to(swap).as_posix() for p in swap.glob("*/rank*")} >= {"optimizer/rank0", "optimizer/rank1"}
