"""Helpers of the trainer tests: specs on disk, metrics read back from metrics.jsonl, greedy
accuracy on held-out arithmetic, and the SFT run that the reward and DPO tests start from."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml
from transformers import AutoModelForCausalLM, GPT2Config

from trainer_core.cli import main
from trainer_core.data import load_examples
from trainer_core.data.tasks.arithmetic import reward
from trainer_core.models import build_tokenizer

ARITHMETIC = {"source": "builtin:arithmetic", "eval_fraction": 0.1}

# The SFT run of the chain: 1,000 steps take tiny-gpt2 from random weights to >90% held-out greedy
# accuracy; the step-250 checkpoint (about 30%) is the weaker policy DPO starts from.
SFT_SPEC = {
    "name": "sft-arithmetic",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": ARITHMETIC,
    "train": {
        "steps": 1000,
        "batch_size": 32,
        "lr": 3e-3,
        "warmup_steps": 20,
        "eval_every": 250,
        "log_every": 50,
        "checkpoint_every": 250,
        "keep_last": 4,
    },
}


def grpo_spec(model: Path, **grpo: object) -> dict:
    """GRPO on arithmetic from `model` (the SFT chain's early checkpoint): 160 steps of 8 prompts x 8 answers."""
    return {
        "name": "grpo-test",
        "algorithm": "grpo",
        "model": {"path": str(model), "max_seq_len": 32},
        "reward": {"kind": "builtin", "name": "arithmetic"},
        "data": ARITHMETIC,
        "train": {"steps": 160, "batch_size": 64, "lr": 2e-4, "schedule": "constant", "eval_every": 80, "log_every": 1},
        "grpo": {"group_size": 8, "beta": 0.04, "gen": {"max_new_tokens": 4}, "samples_to_log": 2, **grpo},
    }


def write_spec(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec))
    return path


def run_spec(path: Path, spec: dict, *args: str) -> None:
    """`python -m trainer_core run` in this process (the CLI's main), asserting exit 0."""
    assert main(["run", str(write_spec(path, spec)), *args]) == 0


def metrics(out: Path, key: str) -> dict[int, float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["value"] for row in rows if row["key"] == key}


def held_out(kind: str = "sft") -> list[dict]:
    return load_examples(ARITHMETIC, kind, seed=0).eval


def greedy_accuracy(model: torch.nn.Module, rows: list[dict]) -> float:
    """Fraction of held-out prompts whose greedy answer is right (the task's own reward)."""
    tokenizer = build_tokenizer()
    model.eval()
    right = 0.0
    with torch.no_grad():
        for row in rows:
            ids = tokenizer(row["prompt"], return_tensors="pt").input_ids
            out = model.generate(
                ids, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
            )
            answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
            right += reward(row["prompt"], answer, row.get("completion") or row.get("chosen"))
    return right / len(rows)


def load_causal(directory: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(str(directory))


def assert_export_matches(export: Path, reference: Path) -> None:
    """A sharding backend's export (a gathered tiny GPT-2) loads with from_pretrained, gives the reference export's
    logits, and keeps lm_head tied to wte."""
    ours, theirs = load_causal(export).eval(), load_causal(reference).eval()
    ids = torch.tensor([[5, 17, 3, 9, 11, 2, 8]])
    with torch.no_grad():
        assert torch.allclose(ours(ids).logits, theirs(ids).logits, atol=1e-4)
    assert ours.lm_head.weight.data_ptr() == ours.transformer.wte.weight.data_ptr()  # still tied


def dropout_model(directory: Path) -> Path:
    """A local tiny GPT-2 directory with dropout on (the builtins have none), for resume tests: a
    resumed run must restore the RNG that dropout draws from to match the straight one bit for bit."""
    dropout = {"resid_pdrop": 0.1, "attn_pdrop": 0.1, "embd_pdrop": 0.1}
    return local_model(directory, GPT2Config, n_layer=2, n_head=4, n_embd=64, n_positions=64, **dropout)


def local_model(directory: Path, config_type: type, **shape: object) -> Path:
    """A model directory (seed 0's weights, the builtin tokenizer beside them) of `config_type(**shape)`, with the
    tokenizer's vocabulary and special ids: what `model.path` names for a model that is not builtin."""
    tokenizer = build_tokenizer()
    config = config_type(
        **shape,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def assert_resume_is_exact(tmp_path: Path, spec: dict, stop_at: int, keys: tuple[str, ...]) -> None:
    """spec.train.steps straight vs `stop_at` steps (stopped as if preempted) then --resume: the same
    final weights bit for bit and the same logged `keys` at every step."""
    from safetensors.torch import load_file

    path = write_spec(tmp_path / "spec.yaml", spec)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_spec(path, spec, "--out", str(straight))
    run_spec(path, spec, "--out", str(resumed), "--stop-at", str(stop_at))
    assert not (resumed / "final").exists()
    run_spec(path, spec, "--resume", str(resumed))

    a, b = load_file(str(straight / "final" / "model.safetensors")), load_file(str(resumed / "final" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for key in keys:
        assert metrics(straight, key) == metrics(resumed, key), key
    assert sorted(metrics(resumed, "train/loss")) == list(range(1, spec["train"]["steps"] + 1))


def samples(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
