"""The DPO recipe through `python -m trainer_core run`: started from an early SFT checkpoint, the
implicit reward learns to rank held-out arithmetic answers and the policy's greedy answers get
more correct; resume is exact; preference pairs tokenize with the prompt masked."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.harness.training import (
    ARITHMETIC,
    assert_resume_is_exact,
    dropout_model,
    greedy_accuracy,
    held_out,
    load_causal,
    metrics,
    run_spec,
    samples,
)
from trainer_core.cli import main
from trainer_core.data.pairs import collate_pairs, tokenize_pair
from trainer_core.losses import IGNORE_INDEX
from trainer_core.models import build_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

SPEC = {
    "name": "dpo-test",
    "algorithm": "dpo",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": ARITHMETIC,
    "dpo": {"beta": 0.5, "nll_weight": 1.0},
    "train": {"steps": 400, "batch_size": 32, "lr": 1e-3, "warmup_steps": 10, "eval_every": 100, "log_every": 50},
}


@pytest.fixture(scope="module")
def start(sft_run: Path) -> Path:
    """The SFT run's step-250 checkpoint: a policy that answers about a third of held-out problems."""
    return sft_run / "checkpoints" / "step-000250"


@pytest.fixture(scope="module")
def trained(start: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("dpo")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the module fixture runs before the function-scoped one
    try:
        run_spec(tmp / "dpo.yaml", {**SPEC, "model": {**SPEC["model"], "path": str(start)}}, "--out", str(tmp / "out"))
    finally:
        torch.set_num_threads(threads)
    return tmp / "out"


def test_dpo_learns_held_out_preferences(trained: Path) -> None:
    """400 steps of DPO (with the chosen answers' NLL, nll_weight 1) from the step-250 SFT model. At
    step 0 the policy is the reference: every implicit reward is 0 and accuracy reads 0.5. It ends at
    or above 0.8 (measured: 0.96)."""
    accuracy = metrics(trained, "eval/accuracy")
    assert sorted(accuracy) == [0, 100, 200, 300, 400]
    assert accuracy[0] == 0.5 and accuracy[400] >= 0.8, accuracy
    assert metrics(trained, "eval/loss")[400] < metrics(trained, "eval/loss")[0]
    for key in ("train/loss", "train/lr", "train/grad_norm", "perf/tokens_per_s", "perf/step_s", "rewards/chosen",
                "rewards/rejected", "rewards/margin", "rewards/accuracy"):  # fmt: skip
        assert sorted(metrics(trained, key)) == list(range(50, 401, 50)), key
    assert metrics(trained, "rewards/margin")[400] > 0
    # Each evaluation: the first 4 held-out pairs with their implicit rewards (0 at step 0: the policy is the
    # reference), then the policy's greedy answers to the same prompts beside the dataset's answer.
    shown = samples(trained)
    assert sorted({s["step"] for s in shown}) == [0, 100, 200, 300, 400] and len(shown) == 5 * 4 * 3
    first = [s for s in shown if s["step"] == 0]
    assert [s["label"] for s in first] == ["chosen", "rejected"] * 4 + ["generation"] * 4
    assert all(s["reward"] == 0 for s in first[:8]) and all(s["reference"] for s in first[8:])
    last = [s for s in shown if s["step"] == 400]
    assert sum(c["scores"]["margin"] > 0 for c in last[:8:2]) >= 3


def test_the_shipped_example_learns(tmp_path: Path) -> None:
    """examples/dpo.yaml as shipped (50 steps of a random tiny Llama): eval/loss 0.693 -> below 0.67 and held-out
    accuracy 0.5 -> above 0.58 (measured 0.641 and 0.644; it was 0.6934 -> 0.6914 at lr 5e-5, beta 0.1)."""
    out = tmp_path / "out"
    assert main(["run", str(Path(__file__).resolve().parents[1] / "examples" / "dpo.yaml"), "--out", str(out)]) == 0
    loss, accuracy = metrics(out, "eval/loss"), metrics(out, "eval/accuracy")
    assert loss[50] < 0.67 < loss[0] and accuracy[0] == 0.5 and accuracy[50] > 0.58, (loss, accuracy)


def test_dpo_policy_answers_more_problems_right(start: Path, trained: Path) -> None:
    """Greedy answers to held-out problems, before and after DPO (measured: 0.34 -> 0.85)."""
    rows = held_out()
    before, after = greedy_accuracy(load_causal(start / "model"), rows), greedy_accuracy(load_causal(trained / "final"), rows)
    assert after >= before + 0.2, (before, after)


def test_resume_is_exact(tmp_path: Path) -> None:
    """10 steps straight vs 5 steps then --resume (the reference rebuilt from the spec): the same
    weights bit for bit and the same logged losses and rewards (dropout on)."""
    spec = {
        **SPEC,
        "model": {"path": str(dropout_model(tmp_path / "model")), "max_seq_len": 32},
        "train": {"steps": 10, "batch_size": 8, "micro_batch_size": 4, "lr": 3e-3, "warmup_steps": 2, "eval_every": 5},
    }
    assert_resume_is_exact(
        tmp_path, spec, 5, ("train/loss", "train/grad_norm", "rewards/margin", "rewards/accuracy", "eval/loss", "eval/accuracy")
    )


# --- pairs tokenization ---


def test_pairs_mask_the_prompt_and_pad_together() -> None:
    tokenizer = build_tokenizer()
    pair = tokenize_pair({"prompt": "12+7=", "chosen": "19", "rejected": "91"}, tokenizer, 32)
    prompt_len = len(tokenizer("12+7=")["input_ids"])
    for side, answer in (("chosen", "19"), ("rejected", "91")):
        ids, labels = pair[side]["input_ids"], pair[side]["labels"]
        assert labels[:prompt_len] == [IGNORE_INDEX] * prompt_len
        assert labels[prompt_len:] == ids[prompt_len:]
        assert tokenizer.decode(labels[prompt_len:]) == answer + "</s>"
    assert len(tokenize_pair({"prompt": "1+1=" * 20, "chosen": "2", "rejected": "3"}, tokenizer, 16)["chosen"]["input_ids"]) == 16

    short = tokenize_pair({"prompt": "1+1=", "chosen": "2", "rejected": "11"}, tokenizer, 32)
    batch = collate_pairs([pair, short], tokenizer.pad_token_id)
    assert batch["input_ids"].shape[0] == 4  # chosen rows first, then rejected
    assert batch["input_ids"][0].tolist()[: len(pair["chosen"]["input_ids"])] == pair["chosen"]["input_ids"]
    assert batch["input_ids"][3].tolist()[: len(short["rejected"]["input_ids"])] == short["rejected"]["input_ids"]
    padding = batch["attention_mask"] == 0
    assert padding.any() and (batch["labels"][padding] == IGNORE_INDEX).all()


def test_pairs_render_messages_with_the_chat_template() -> None:
    tokenizer = build_tokenizer()
    prompt = [
        {"role": "user", "content": "What is 3+4?"},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "And 2+2?"},
    ]
    pair = tokenize_pair({"prompt": prompt, "chosen": "4", "rejected": [{"role": "assistant", "content": "5"}]}, tokenizer, 64)
    for side, answer in (("chosen", "4"), ("rejected", "5")):
        example = pair[side]
        trained = tokenizer.decode([t for t in example["labels"] if t != IGNORE_INDEX])
        assert trained.startswith(answer) and "7" not in trained, trained  # earlier assistant turns stay masked
        assert "And 2+2?" in tokenizer.decode(example["input_ids"])
