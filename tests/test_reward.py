"""The reward-model recipe through `python -m trainer_core run`: started from the SFT model, as in
the SFT -> RM chain, it learns to rank held-out arithmetic answers, resumes exactly, and exports a
score model transformers can load."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.harness.training import ARITHMETIC, assert_resume_is_exact, dropout_model, metrics, run_spec, samples

pytestmark = pytest.mark.usefixtures("one_thread")

SPEC = {
    "name": "reward-test",
    "algorithm": "reward",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": ARITHMETIC,
    "train": {"steps": 800, "batch_size": 32, "lr": 1e-3, "warmup_steps": 10, "eval_every": 200, "log_every": 50},
}


@pytest.fixture(scope="module")
def trained(sft_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("reward")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the module fixture runs before the function-scoped one
    try:
        spec = {**SPEC, "model": {**SPEC["model"], "path": str(sft_run / "final")}}
        run_spec(tmp / "reward.yaml", spec, "--out", str(tmp / "out"))
    finally:
        torch.set_num_threads(threads)
    return tmp / "out"


def test_reward_model_ranks_held_out_answers(trained: Path) -> None:
    """800 steps from the SFT model (a new score head on its body) on builtin:arithmetic pairs: the
    held-out ranking accuracy climbs from chance to at least 0.9 (measured: 0.95)."""
    accuracy = metrics(trained, "eval/accuracy")
    assert sorted(accuracy) == [0, 200, 400, 600, 800]
    assert accuracy[0] < 0.65 and accuracy[800] >= 0.9, accuracy
    assert metrics(trained, "eval/loss")[800] < 0.5 * metrics(trained, "eval/loss")[0]
    assert metrics(trained, "eval/margin")[800] > 1.0
    # Each evaluation shows the first 4 held-out pairs: chosen and rejected with the model's scores and the margin.
    shown = samples(trained)
    assert sorted({s["step"] for s in shown}) == [0, 200, 400, 600, 800] and len(shown) == 5 * 4 * 2
    last = [s for s in shown if s["step"] == 800]
    assert [s["label"] for s in last] == ["chosen", "rejected"] * 4
    for chosen, rejected in zip(last[::2], last[1::2], strict=True):
        assert chosen["prompt"] == rejected["prompt"] and chosen["scores"]["margin"] == chosen["reward"] - rejected["reward"]
    assert sum(c["reward"] > r["reward"] for c, r in zip(last[::2], last[1::2], strict=True)) >= 3
    for key in ("train/loss", "train/lr", "train/grad_norm", "train/accuracy", "perf/tokens_per_s", "perf/step_s"):
        assert sorted(metrics(trained, key)) == list(range(50, 801, 50)), key


def test_final_score_model_loads_with_transformers(trained: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The export scores: right answers above wrong ones for problems it may not have seen."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(str(trained / "final")).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(trained / "final"))
    texts = ["12+7=19</s>", "12+7=91</s>", "3*4=12</s>", "3*4=7</s>"]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        scores = model(**batch).logits
    assert scores.shape == (4, 1) and torch.isfinite(scores).all()
    assert scores[0] > scores[1] and scores[2] > scores[3], scores.flatten().tolist()


def test_resume_is_exact(tmp_path: Path) -> None:
    """10 steps straight vs 5 steps (stopped as if preempted), then --resume: the same weights bit for
    bit and the same logged losses (dropout on, shuffled data, two micro-batches per step)."""
    spec = {
        **SPEC,
        "model": {"path": str(dropout_model(tmp_path / "model")), "max_seq_len": 32},
        "train": {"steps": 10, "batch_size": 8, "micro_batch_size": 4, "lr": 2e-3, "warmup_steps": 2, "eval_every": 5},
    }
    assert_resume_is_exact(
        tmp_path, spec, 5, ("train/loss", "train/accuracy", "train/grad_norm", "train/lr", "eval/loss", "eval/accuracy")
    )
