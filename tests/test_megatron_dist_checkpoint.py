"""Megatron distributed checkpoints (trainer_core/backends/megatron/dist_checkpoint.py) on CPU under gloo:
a TP=2 GPTModel + AdamW saved after 2 steps holds only JSON and safetensors, loads back bit for bit
and resumes to the same losses; the same checkpoint loads into TP=1 (resharded: the gathered TP=2
weights and moments, the same logits), and that TP=1 checkpoint back into TP=2. Twice: with a
vocabulary padded alike under both TP sizes, and padded differently (as GPT-2's 50257 tokens are with
Megatron's default divisor), where megatron loads the embedding and output layer with
allow_shape_mismatch and only the real vocabulary rows must survive.

The launches run one after another (tests/megatron_dcp_worker.py), each a fixture the next builds on.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from tests.harness.launch import forked
from trainer_core.backends.megatron.dist_checkpoint_files import check_no_pickle
from trainer_core.checkpoint.errors import CheckpointError

ROOT = Path(__file__).resolve().parents[1]
EXTRA = {"step": 2, "data_position": 6, "note": "resume here"}  # tests/megatron_dcp_worker.py saves this
# Same weights, TP all-reduce summing in another order: measured 3.6e-7 on the tiny Llama.
LOGITS_TOLERANCE = 1e-5
# vocab divisor -> the padded vocabulary under (TP=2, TP=1) for the 512 tokens of tiny-llama
PADDED_VOCAB = {128: (512, 512), 80: (640, 560)}


def run_worker(out: Path, mode: str, nproc: int, vocab_divisor: int) -> list[dict]:
    """The worker in `mode` as `nproc` ranks (forked: tests/harness/forked_ranks.py); each rank's result."""
    # CPU even on a GPU node: this is the CPU path (gloo, the CPU shim).
    argv = ["tests/megatron_dcp_worker.py", mode, str(out), str(vocab_divisor)]
    forked(argv, nproc, out / f"{mode}.log", timeout=300, HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    return [json.loads((out / f"{mode}-rank{rank}.json").read_text()) for rank in range(nproc)]


@pytest.fixture(scope="module", params=sorted(PADDED_VOCAB, reverse=True), ids=["padding-alike", "padding-differs"])
def vocab_divisor(request: pytest.FixtureRequest) -> int:
    return request.param


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory, vocab_divisor: int) -> Path:
    return tmp_path_factory.mktemp(f"megatron-dcp-{vocab_divisor}")


@pytest.fixture(scope="module")
def tp2_saved(out: Path, vocab_divisor: int) -> list[dict]:
    return run_worker(out, "tp2-save", 2, vocab_divisor)


@pytest.fixture(scope="module")
def tp1_loaded(out: Path, vocab_divisor: int, tp2_saved: list[dict]) -> list[dict]:
    return run_worker(out, "tp1-load", 1, vocab_divisor)


@pytest.fixture(scope="module")
def tp2_reloaded(out: Path, vocab_divisor: int, tp1_loaded: list[dict]) -> list[dict]:
    return run_worker(out, "tp2-load", 2, vocab_divisor)


def test_checkpoint_holds_only_json_and_safetensors(out: Path, tp2_saved: list[dict]) -> None:
    files = sorted(path for path in (out / "ckpt-tp2").rglob("*") if path.is_file())
    names = {path.relative_to(out / "ckpt-tp2").as_posix() for path in files}
    assert {
        "metadata.json",
        "common.json",
        "shards/metadata.json",
        "shards/__0_0.safetensors",
        "shards/__1_0.safetensors",
    } <= names
    assert not names & {"common.pt", ".metadata"}
    check_no_pickle(out / "ckpt-tp2")  # also run by save_distributed: JSON or safetensors headers only
    for path in files:
        if path.suffix == ".json":
            json.loads(path.read_text())
        else:
            assert path.suffix == ".safetensors", path
            with safe_open(str(path), framework="pt") as handle:
                assert list(handle.keys()), path
    assert json.loads((out / "ckpt-tp2" / "metadata.json").read_text())["sharded_backend"] == "rlplane_safetensors"


def test_tp2_load_is_bit_identical_and_resumes_exactly(tp2_saved: list[dict]) -> None:
    for rank, result in enumerate(tp2_saved):
        assert result["differed_before_load"] > 0, rank  # the fresh model really was different
        assert result["differences"] == [], (rank, result["differences"])  # weights, exp_avg, exp_avg_sq, step
        assert result["extra"] == EXTRA
        assert (result["lr"], result["weight_decay"]) == (1e-2, 1e-2)  # the saved param_groups, not the fresh ones
        assert result["loaded"] == result["original"], rank  # same step loss, same loss after the step


def test_tp2_checkpoint_loads_into_tp1(tp1_loaded: list[dict], vocab_divisor: int) -> None:
    (result,) = tp1_loaded
    assert result["padded_vocab"] == PADDED_VOCAB[vocab_divisor][1]
    assert result["differences"] == []  # the TP-gathered weights, moments and step, bit for bit
    assert result["logits_max_abs_diff"] < LOGITS_TOLERANCE
    assert result["extra"] == EXTRA and result["lr"] == 1e-2


def test_tp1_checkpoint_loads_into_tp2(tp2_reloaded: list[dict], vocab_divisor: int) -> None:
    """TP=2 -> TP=1 -> TP=2 gives back the saved state (the real vocabulary rows of it)."""
    for rank, result in enumerate(tp2_reloaded):
        assert result["padded_vocab"] == PADDED_VOCAB[vocab_divisor][0]
        assert result["differences"] == [], (rank, result["differences"])
        assert result["logits_max_abs_diff"] < LOGITS_TOLERANCE
        assert result["extra"] == EXTRA and result["lr"] == 1e-2


def test_tied_gpt2_saved_before_and_after_its_first_steps(tmp_path: Path) -> None:
    """GPT-2's output layer shares the embedding; a checkpoint from before the first step has no moments."""
    (result,) = run_worker(tmp_path, "tied-gpt2", 1, vocab_divisor=128)
    assert result["step0"] == {"differences": [], "moments": 0, "extra": {"step": 0}, "lr": 1e-2}
    step2 = result["step2"]
    assert step2["differences"] == [] and step2["moments"] > 0  # weights, moments and step, bit for bit
    assert (step2["extra"], step2["lr"]) == ({"step": 2}, 1e-2)
    refusals = result["refusals"]
    assert refusals["unfinished"].startswith("CheckpointError") and "has no metadata.json" in refusals["unfinished"]
    assert "sharded backend is 'torch_dist'" in refusals["torch_dist"], refusals["torch_dist"]


def test_check_no_pickle_names_the_offending_file(tmp_path: Path) -> None:
    (tmp_path / "common.json").write_text("{}")
    save_file({"w": torch.ones(3)}, str(tmp_path / "shards.safetensors"))
    check_no_pickle(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "common.pt").write_bytes(pickle.dumps({"step": 1}))
    with pytest.raises(CheckpointError, match=r"sub/common\.pt is a pickle"):
        check_no_pickle(tmp_path)


def test_check_no_pickle_refuses_a_pickle_named_safetensors(tmp_path: Path) -> None:
    (tmp_path / "__0_0.safetensors").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(CheckpointError, match=r"__0_0\.safetensors is a pickle"):
        check_no_pickle(tmp_path)
