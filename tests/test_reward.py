"""The reward-model recipe through `python -m trainer_core run`: it learns to rank held-out
arithmetic answers, resumes exactly, and exports a score model transformers can load."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from trainer_core.cli import main

SPEC = {
    "name": "reward-test",
    "algorithm": "reward",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": {"source": "builtin:arithmetic", "eval_fraction": 0.1},
    "train": {"steps": 800, "batch_size": 32, "lr": 2e-3, "warmup_steps": 10, "eval_every": 200, "log_every": 50},
}


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models step fastest on one thread, and do not slow to a crawl beside other processes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def write_spec(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec))
    return path


def metrics(out: Path, key: str) -> dict[int, float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["value"] for row in rows if row["key"] == key}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("reward")
    out = tmp / "out"
    torch.set_num_threads(1)  # the module fixture runs before the function-scoped one
    assert main(["run", str(write_spec(tmp / "reward.yaml", SPEC)), "--out", str(out)]) == 0
    return out


def test_reward_model_ranks_held_out_answers(trained: Path) -> None:
    """800 steps of tiny-gpt2 (a score head) on builtin:arithmetic pairs. The held-out ranking accuracy
    climbs from chance to about 0.74: wrong operations and off-by-ten answers are all caught, but
    off-by-one answers need the last digit of the sum, which this 2-layer, 64-wide model does not
    learn in a test's time, so the bar is 0.68 (not 0.9)."""
    accuracy = metrics(trained, "eval/accuracy")
    assert sorted(accuracy) == [0, 200, 400, 600, 800]
    assert accuracy[0] < 0.6 and accuracy[800] >= 0.68, accuracy
    assert metrics(trained, "eval/loss")[800] < metrics(trained, "eval/loss")[0]
    assert metrics(trained, "eval/margin")[800] > 0.2
    for key in ("train/loss", "train/lr", "train/grad_norm", "train/accuracy", "perf/tokens_per_s", "perf/step_s"):
        assert sorted(metrics(trained, key)) == list(range(50, 801, 50)), key


def test_final_score_model_loads_with_transformers(trained: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(str(trained / "final")).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(trained / "final"))
    batch = tokenizer(["12+7=19</s>", "12+7=91</s>", "3*4=12</s>"], return_tensors="pt", padding=True)
    with torch.no_grad():
        scores = model(**batch).logits
    assert scores.shape == (3, 1) and torch.isfinite(scores).all()


def test_resume_is_exact(tmp_path: Path) -> None:
    """10 steps straight vs 5 steps (stopped as if preempted), then --resume: the same weights bit for
    bit and the same logged losses (dropout on, shuffled data, two micro-batches per step)."""
    spec = {
        **SPEC,
        "train": {"steps": 10, "batch_size": 8, "micro_batch_size": 4, "lr": 2e-3, "warmup_steps": 2, "eval_every": 5},
    }
    path = write_spec(tmp_path / "reward.yaml", spec)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert main(["run", str(path), "--out", str(straight)]) == 0
    assert main(["run", str(path), "--out", str(resumed), "--stop-at", "5"]) == 0
    assert not (resumed / "final").exists()
    assert main(["run", str(path), "--resume", str(resumed)]) == 0

    a, b = load_file(str(straight / "final" / "model.safetensors")), load_file(str(resumed / "final" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for key in ("train/loss", "train/accuracy", "train/grad_norm", "train/lr", "eval/loss", "eval/accuracy"):
        assert metrics(straight, key) == metrics(resumed, key), key
    assert sorted(metrics(resumed, "train/loss")) == list(range(1, 11))
