"""Each recipe under `torchrun --nproc_per_node 2` (DDP on gloo): it completes, only rank zero writes
the run's files, and the global batch is split so the loss curve matches one process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.baselines import one_torch_thread
from tests.harness.launch import launch
from tests.harness.training import ARITHMETIC, metrics, run_spec

TRAIN = {"steps": 10, "batch_size": 16, "lr": 3e-3, "warmup_steps": 2, "eval_every": 5, "log_every": 5, "checkpoint_every": 5}
SPECS = {
    "sft": {"algorithm": "sft"},
    "reward": {"algorithm": "reward"},
    "dpo": {"algorithm": "dpo", "dpo": {"beta": 0.5}},
}


@pytest.mark.parametrize("algorithm", sorted(SPECS))
def test_two_processes_train_like_one(algorithm: str, tmp_path: Path) -> None:
    spec = {"name": f"ddp-{algorithm}", "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32}, "data": ARITHMETIC}
    spec |= {**SPECS[algorithm], "train": TRAIN}
    one = tmp_path / "one"
    with one_torch_thread():  # the one-process baseline in this process: a process start is most of its time
        run_spec(tmp_path / "one.yaml", spec, "--out", str(one))
    two = launch(tmp_path, spec, {"kind": "torch"}, "two", launcher="torchrun")  # this module holds the torchrun claim

    rows = [json.loads(line) for line in (two / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == len({(r["step"], r["key"]) for r in rows}), "a point was written twice: rank 1 reported"
    assert sorted(p.name for p in (two / "checkpoints").iterdir()) == ["step-000005", "step-000010"]
    assert (two / "final" / "model.safetensors").is_file()
    statuses = [json.loads(line) for line in (two / "events.jsonl").read_text().splitlines() if '"status"' in line]
    # rank 0's phases (backend, model and data, training) and its end; rank 1 says nothing
    assert [s["status"] for s in statuses] == ["running", "running", "running", "succeeded"]

    # The same global batches, split over two ranks: the same curve up to float summation order.
    for key in ("train/loss", "eval/loss"):
        a, b = metrics(one, key), metrics(two, key)
        assert a.keys() == b.keys() and all(abs(a[s] - b[s]) <= 1e-3 * abs(a[s]) + 1e-5 for s in a), (key, a, b)
