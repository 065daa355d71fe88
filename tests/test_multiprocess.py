"""Each recipe under `torchrun --nproc_per_node 2` (DDP on gloo): it completes, only rank zero writes
the run's files, and the global batch is split so the loss curve matches one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training import ARITHMETIC, metrics, write_spec

ROOT = Path(__file__).resolve().parents[1]
TRAIN = {"steps": 10, "batch_size": 16, "lr": 3e-3, "warmup_steps": 2, "eval_every": 5, "log_every": 5, "checkpoint_every": 5}
SPECS = {
    "sft": {"algorithm": "sft"},
    "reward": {"algorithm": "reward"},
    "dpo": {"algorithm": "dpo", "dpo": {"beta": 0.5}},
}


def launch(spec: Path, out: Path, nproc: int) -> subprocess.CompletedProcess:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc)] if nproc > 1 else [sys.executable]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [*launcher, "-m", "trainer_core", "run", str(spec), "--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


@pytest.mark.parametrize("algorithm", sorted(SPECS))
def test_two_processes_train_like_one(algorithm: str, tmp_path: Path) -> None:
    spec = {"name": f"ddp-{algorithm}", "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32}, "data": ARITHMETIC}
    path = write_spec(tmp_path / "spec.yaml", {**spec, **SPECS[algorithm], "train": TRAIN})
    one, two = tmp_path / "one", tmp_path / "two"
    for out, nproc in ((one, 1), (two, 2)):
        result = launch(path, out, nproc)
        assert result.returncode == 0, result.stderr[-3000:]

    rows = [json.loads(line) for line in (two / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == len({(r["step"], r["key"]) for r in rows}), "a point was written twice: rank 1 reported"
    assert sorted(p.name for p in (two / "checkpoints").iterdir()) == ["step-000005", "step-000010"]
    assert (two / "final" / "model.safetensors").is_file()
    statuses = [json.loads(line) for line in (two / "events.jsonl").read_text().splitlines() if '"status"' in line]
    assert [s["status"] for s in statuses] == ["running", "succeeded"]

    # The same global batches, split over two ranks: the same curve up to float summation order.
    for key in ("train/loss", "eval/loss"):
        a, b = metrics(one, key), metrics(two, key)
        assert a.keys() == b.keys() and all(abs(a[s] - b[s]) <= 1e-3 * abs(a[s]) + 1e-5 for s in a), (key, a, b)
