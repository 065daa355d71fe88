"""The SFT recipe end to end through `python -m trainer_core run`: it learns, resumes exactly,
rejects bad input with exit 2 and a message, and exports a model transformers can load."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlplane.spec import TrainSpec, parse_spec
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
    write_spec,
)
from trainer_core.checkpoint import verify
from trainer_core.data.pairs import load_pairs
from trainer_core.data.tokenize import collate, pack, tokenize_counting, tokenize_row, tokenize_rows
from trainer_core.losses import IGNORE_INDEX
from trainer_core.models import build_builtin, build_tokenizer, load_model
from trainer_core.recipes.common import BatchOrder, lr_factor, report_cut
from trainer_core.reporting import make_reporter

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_thread")

SPEC = {
    "name": "sft-test",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": ARITHMETIC,
    "train": {"steps": 150, "batch_size": 16, "lr": 3e-3, "warmup_steps": 5, "eval_every": 50, "log_every": 10},
}


def test_sft_learns_held_out_arithmetic(sft_run: Path) -> None:
    """tests.harness.training.SFT_SPEC: 1,000 steps of tiny-gpt2 from random weights on builtin:arithmetic.
    The held-out answer loss (prompt tokens masked) falls below a fifth of its step-0 value, and
    greedy answers to held-out problems go from none right to at least 85% right (measured: 96%)."""
    eval_loss = metrics(sft_run, "eval/loss")
    assert sorted(eval_loss) == [0, 250, 500, 750, 1000]
    assert eval_loss[1000] < 0.2 * eval_loss[0], eval_loss

    rows = held_out()
    before = greedy_accuracy(build_builtin("tiny-gpt2", seed=0)[0], rows)
    after = greedy_accuracy(load_causal(sft_run / "final"), rows)
    assert before < 0.05 and after >= 0.85, (before, after)
    # At every evaluation the model answers the same 4 held-out prompts, shown beside the dataset's answer.
    shown = samples(sft_run)
    assert sorted({s["step"] for s in shown}) == [0, 250, 500, 750, 1000] and len(shown) == 5 * 4
    assert all(s["label"] == "generation" and s["reference"] for s in shown)
    last = [s for s in shown if s["step"] == 1000]
    assert [s["prompt"] for s in last] == [s["prompt"] for s in shown if s["step"] == 0]
    assert sum(s["response"] == s["reference"] for s in last) >= 3, last

    for key in ("train/loss", "train/lr", "train/grad_norm", "perf/tokens_per_s", "perf/step_s"):
        assert sorted(metrics(sft_run, key)) == list(range(50, 1001, 50)), key
    checkpoints = sorted(p.name for p in (sft_run / "checkpoints").iterdir())
    assert checkpoints == ["step-000250", "step-000500", "step-000750", "step-001000"]
    events = [json.loads(line) for line in (sft_run / "events.jsonl").read_text().splitlines()]
    saved = [e for e in events if e["type"] == "checkpoint"]
    assert [(e["step"], e["metadata"]["kind"]) for e in saved] == [(250, "checkpoint"), (500, "checkpoint"),
        (750, "checkpoint"), (1000, "checkpoint"), (1000, "export")]  # fmt: skip


def test_the_export_is_reported_as_the_runs_output(sft_run: Path) -> None:
    """The final export carries a manifest and is reported like a checkpoint (kind "export"), so the
    control plane registers it; its sha256 is the manifest's and every file checks out."""
    events = [json.loads(line) for line in (sft_run / "events.jsonl").read_text().splitlines()]
    [export] = [e for e in events if e["type"] == "checkpoint" and e["metadata"]["kind"] == "export"]
    assert export["path"] == "final" and export["metadata"] == {"kind": "export", "format": "hf"}
    assert export["sha256"] == hashlib.sha256((sft_run / "final" / "manifest.json").read_bytes()).hexdigest()
    assert verify(sft_run / "final")


def test_checkpoints_rotate_to_keep_last(tmp_path: Path) -> None:
    spec = {**SPEC, "train": {**SPEC["train"], "steps": 6, "eval_every": 3, "checkpoint_every": 2, "keep_last": 2}}
    run_spec(tmp_path / "sft.yaml", spec, "--out", str(tmp_path / "out"))
    assert sorted(p.name for p in (tmp_path / "out" / "checkpoints").iterdir()) == ["step-000004", "step-000006"]


def test_a_minimal_spec_trains_at_the_models_context_length(tmp_path: Path) -> None:
    """No model.max_seq_len: the builtin model's 256 positions (it was a fixed 512, which the builtins refused)."""
    minimal = {
        "name": "minimal",
        "algorithm": "sft",
        "model": {"path": "builtin:tiny-gpt2"},
        "data": {"source": "builtin:tiny-sft"},
    }
    run_spec(tmp_path / "sft.yaml", {**minimal, "train": {"steps": 2}}, "--out", str(tmp_path / "out"))
    state = json.loads((tmp_path / "out" / "checkpoints" / "step-000002" / "trainer_state.json").read_text())
    assert state["spec"]["model"]["max_seq_len"] == 256


def test_final_model_loads_with_transformers(sft_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(sft_run / "final"))
    tokenizer = AutoTokenizer.from_pretrained(str(sft_run / "final"))
    ids = tokenizer("12+7=", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] > ids["input_ids"].shape[1]
    saved = load_file(str(sft_run / "checkpoints" / "step-001000" / "model" / "model.safetensors"))
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items() if k in saved)


def test_a_checkpoint_directory_loads_as_a_model(sft_run: Path) -> None:
    """model.path may name a training checkpoint (model/ and tokenizer/ inside), as run:<id>@<step> does."""
    model, tokenizer = load_model(str(sft_run / "checkpoints" / "step-000250"))
    saved = load_file(str(sft_run / "checkpoints" / "step-000250" / "model" / "model.safetensors"))
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items() if k in saved)
    assert len(tokenizer) == len(build_tokenizer())


def test_resume_is_exact(tmp_path: Path) -> None:
    """20 steps straight vs 10 steps (stopped as if preempted), then --resume for the rest:
    the same weights bit for bit and the same logged losses (dropout on, shuffled data)."""
    spec = {
        **SPEC,
        "model": {"path": str(dropout_model(tmp_path / "model")), "max_seq_len": 32},
        "train": {"steps": 20, "batch_size": 8, "micro_batch_size": 4, "lr": 3e-3, "warmup_steps": 3, "eval_every": 5},
    }
    assert_resume_is_exact(tmp_path, spec, 10, ("train/loss", "train/grad_norm", "train/lr", "eval/loss"))


def test_sigterm_checkpoints_after_the_step_and_the_resume_trains_every_step_once(tmp_path: Path) -> None:
    """SIGTERM to `python -m trainer_core run` mid-run in a Slurm job (SLURM_JOB_ID set: a preemption or the time
    limit signals every process of a job, the trainer included): it checkpoints after its current step and exits 6
    (handed back, not failed); --resume goes on from that checkpoint to the end, every step logged once. Through a
    real Slurm job: tests/test_slurm.py."""
    spec = {**SPEC, "train": {**SPEC["train"], "steps": 3000, "log_every": 1, "eval_every": None, "checkpoint_every": None}}
    path, out = write_spec(tmp_path / "spec.yaml", spec), tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SLURM_JOB_ID": "7"}
    trainer = subprocess.Popen(
        [sys.executable, "-m", "trainer_core", "run", str(path), "--out", str(out)], env=env, cwd=ROOT, stderr=subprocess.PIPE
    )
    metrics_file = out / "metrics.jsonl"
    while not (metrics_file.exists() and metrics_file.read_text().count('"train/loss"') >= 20):
        assert trainer.poll() is None, trainer.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    trainer.send_signal(signal.SIGTERM)
    said = trainer.communicate(timeout=120)[1].decode()
    assert trainer.returncode == 6, said[-2000:]
    assert "stopped: handed back after a checkpoint (exit 6)" in said
    [saved] = sorted((out / "checkpoints").glob("step-*"))
    stopped = int(saved.name.removeprefix("step-"))
    assert 20 <= stopped < 3000 and sorted(metrics(out, "train/loss")) == list(range(1, stopped + 1))
    spec["train"]["steps"] = stopped + 5  # the rest, briefly
    run_spec(path, spec, "--resume", str(out))
    assert sorted(metrics(out, "train/loss")) == list(range(1, stopped + 6))


BAD_INPUTS = [
    "missing dataset",
    "wrong columns",
    "unknown model",
    "impossible batch",
    "unknown field",
    "reward not allowed",
    "missing spec file",
    "bad --set",
    "nothing to resume",
]


def _bad_inputs(tmp: Path) -> dict[str, tuple[dict | None, list[str], str]]:
    wrong_columns = tmp / "wrong.jsonl"
    wrong_columns.write_text(json.dumps({"question": "1+1=", "answer": "2"}) + "\n")
    return {
        "missing dataset": ({"data": {"source": str(tmp / "nope.jsonl")}}, [], "nope.jsonl"),
        "wrong columns": ({"data": {"source": str(wrong_columns)}}, [], "prompt"),
        "unknown model": ({"model": {"path": "builtin:no-such-model"}}, [], "no-such-model"),
        "impossible batch": ({"train": {**SPEC["train"], "batch_size": 10, "micro_batch_size": 4}}, [], "micro_batch_size"),
        "unknown field": ({"train": {**SPEC["train"], "stepz": 3}}, [], "stepz"),
        "reward not allowed": (
            {"algorithm": "ppo", "reward": {"kind": "python", "entrypoint": "os:system"}, "ppo": {"gen": {"max_new_tokens": 8}}},
            [],
            "RLPLANE_REWARD_ENTRYPOINTS",
        ),
        "missing spec file": (None, [], "does not exist"),
        "bad --set": ({}, ["--set", "train.steps=-1"], "train.steps"),
        "nothing to resume": ({}, ["--resume", str(tmp)], "no complete checkpoint"),
    }


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_exits_2_with_a_message(case: str, tmp_path: Path) -> None:
    override, extra, needle = _bad_inputs(tmp_path)[case]
    spec_path = tmp_path / "missing.yaml"
    if override is not None:
        spec_path = write_spec(tmp_path / "spec.yaml", {**SPEC, **override})
    result = subprocess.run(
        [sys.executable, "-m", "trainer_core", "run", str(spec_path), "--out", str(tmp_path / "out"), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert needle in result.stderr, result.stderr


def test_help_shows_an_example() -> None:
    result = subprocess.run([sys.executable, "-m", "trainer_core", "run", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0 and "python -m trainer_core run examples/sft.yaml" in result.stdout


# --- the pieces, quickly ---


def test_tokenize_masks_prompt_and_padding() -> None:
    tokenizer = build_tokenizer()
    row = {"prompt": "12+7=", "completion": "19"}
    example = tokenize_row(row, tokenizer, 32)
    prompt_len = len(tokenizer("12+7=")["input_ids"])
    assert example["labels"][:prompt_len] == [IGNORE_INDEX] * prompt_len
    assert example["labels"][prompt_len:] == example["input_ids"][prompt_len:]
    assert example["input_ids"][-1] == tokenizer.eos_token_id
    assert tokenize_row(row, tokenizer, 32, loss_on_prompt=True)["labels"] == example["input_ids"]
    assert len(tokenize_row({"text": "1 2 3 4 5 6 7 8 9 " * 10}, tokenizer, 16)["input_ids"]) == 16

    batch = collate([example, tokenize_row({"text": "hi"}, tokenizer, 32)], tokenizer.pad_token_id)
    short = batch["attention_mask"][1] == 0
    assert short.any() and (batch["labels"][1][short] == IGNORE_INDEX).all()
    assert sum(len(e["input_ids"]) for e in pack([example] * 5, 32)) == 5 * len(example["input_ids"])


def test_rows_longer_than_the_context_are_counted_and_said_once(tmp_path) -> None:
    """tokenize_counting cuts what tokenize_rows cuts and counts the rows it cut (not one that fits exactly); a
    preference pair counts when either side is cut; the run's log says so once, with the fix."""
    tokenizer = build_tokenizer()
    fits = {"prompt": "12+7=", "completion": "19"}
    exact = len(tokenize_row(fits, tokenizer, 999)["input_ids"])
    rows = [fits, {"text": "1 2 3 4 5 6 7 8 9 " * 10}, {"prompt": "1+1=" * 20, "completion": "2"}]
    examples, cut = tokenize_counting(rows, tokenizer, exact)
    assert cut == 2 and examples == tokenize_rows(rows, tokenizer, exact) and {len(e["input_ids"]) for e in examples} == {exact}
    pairs = [{"prompt": "1+1=", "chosen": "2", "rejected": "11 " * 30}, {"prompt": "1+1=", "chosen": "2", "rejected": "3"}]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    spec = {"name": "d", "algorithm": "dpo", "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 16}}
    spec |= {"data": {"source": str(tmp_path / "pairs.jsonl")}, "train": {"steps": 1, "batch_size": 2}}
    assert load_pairs(parse_spec(spec), tokenizer).train_cut == 1
    reporter = make_reporter(tmp_path / "out", rank=0, stdout=False)
    report_cut(reporter, cut, len(rows), "rows are", exact)
    report_cut(reporter, 0, len(rows), "rows are", exact)  # nothing cut: nothing said
    reporter.close()
    logged = [json.loads(line)["text"] for line in (tmp_path / "out" / "logs.jsonl").read_text().splitlines()]
    assert [text for text in logged if text.startswith("data:")] == [
        f"data: 2 of 3 training rows (66.7%) are longer than model.max_seq_len {exact}, cut at the end (a completion's "
        "last tokens and its EOS are lost): raise model.max_seq_len or shorten them"
    ]


def test_tokenize_messages_trains_on_assistant_turns_only() -> None:
    tokenizer = build_tokenizer()
    messages = [
        {"role": "user", "content": "What is 3+4?"},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "And 2+2?"},
        {"role": "assistant", "content": "4"},
    ]
    example = tokenize_row({"messages": messages}, tokenizer, 64)
    trained = tokenizer.decode([t for t in example["labels"] if t != IGNORE_INDEX])
    assert trained == "7</s>4</s>"


def test_batch_order_resumes_exactly() -> None:
    straight = BatchOrder(10, 4, seed=3, shuffle=True)
    batches = [straight.next_batch() for _ in range(6)]
    first = BatchOrder(10, 4, seed=3, shuffle=True)
    head = [first.next_batch() for _ in range(3)]
    second = BatchOrder(10, 4, seed=3, shuffle=True, position=json.loads(json.dumps(first.position)))
    assert head + [second.next_batch() for _ in range(3)] == batches
    assert sorted(batches[0] + batches[1] + batches[2][:2]) == list(range(10))  # each epoch is a permutation


def test_lr_schedule() -> None:
    train = TrainSpec(steps=10, warmup_steps=2, schedule="cosine")
    factors = [lr_factor(s, train) for s in range(10)]
    assert factors[0] < factors[1] < factors[2] == 1.0 and factors[-1] < 0.1
    assert lr_factor(5, TrainSpec(steps=10, schedule="constant")) == 1.0


def test_the_trainer_says_what_it_does_before_its_first_step(sft_run: Path) -> None:
    """Its phases, as running statuses with a reason (the worker makes each the run's reason, so a cold node that
    spends minutes before step 1 shows which phase it is in): the backend, the model and data, then training."""
    events = [json.loads(line) for line in (sft_run / "events.jsonl").read_text().splitlines()]
    said = [e["reason"] for e in events if e["type"] == "status" and e["status"] == "running"]
    assert said == ["starting the torch backend", "loading the model, the data and the optimizer", "training"]
