"""train.on_nonfinite: a run whose loss, gradient norm, reward or policy goes NaN or infinite fails with the step
and the key in its reason and exports nothing ("fail"), or has that step's update skipped and counted ("skip")
until max_consecutive_skips in a row; no backend ever applies a non-finite update."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlplane.spec.sections import TrainSpec
from rlplane.status import EXIT_DIVERGED
from tests.harness.launch import forked
from tests.harness.training import metrics, write_spec
from trainer_core.cli import main
from trainer_core.recipes.divergence import Diverged, NonFiniteGuard
from trainer_core.recipes.loop import LogWindow, StepResult
from trainer_core.reporting import NullReporter

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
pytestmark = pytest.mark.usefixtures("one_thread")


def events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def failure(out: Path) -> str:
    return next(e["reason"] for e in events(out) if e.get("status") == "failed")


class Recorder(NullReporter):
    def __init__(self) -> None:
        self.points: list[tuple[int, dict]] = []
        self.lines: list[str] = []

    def metrics(self, step: int, values) -> None:
        self.points.append((step, dict(values)))

    def log(self, text: str, rank: int = 0) -> None:
        self.lines.append(text)


class TestGuard:
    def test_fail_names_the_key_the_value_and_the_step_and_reports_that_step(self) -> None:
        reporter = Recorder()
        guard = NonFiniteGuard(TrainSpec(steps=9), reporter)
        assert guard.check(1, {"train/loss": 2.0, "train/grad_norm": 1.0})
        with pytest.raises(Diverged, match=r"^diverged: train/grad_norm is \+inf at step 2"):
            guard.check(2, {"train/loss": 2.0, "train/grad_norm": math.inf})
        assert reporter.points == [(2, {"train/loss": 2.0, "train/grad_norm": math.inf})]

    def test_skip_counts_until_the_limit_and_a_good_step_resets_the_count(self) -> None:
        reporter = Recorder()
        guard = NonFiniteGuard(TrainSpec(steps=9, on_nonfinite="skip", max_consecutive_skips=2), reporter)
        assert not guard.check(1, {"reward/mean": math.nan})
        assert guard.check(2, {"reward/mean": 0.5})
        assert not guard.check(3, {"train/loss": -math.inf})
        with pytest.raises(Diverged, match=r"2 steps in a row skipped \(train.max_consecutive_skips 2\); the last: train/loss"):
            guard.check(4, {"train/loss": math.nan})
        assert reporter.lines[0] == "skipped the update of step 1: reward/mean is NaN at step 1 (train.on_nonfinite: skip)"

    def test_under_fp16_loss_scaling_an_infinite_norm_is_the_scalers_business(self) -> None:
        guard = NonFiniteGuard(TrainSpec(steps=9), Recorder(), loss_scaled=True)
        assert guard.check(1, {"train/loss": 1.0, "train/grad_norm": math.inf})
        with pytest.raises(Diverged):
            guard.check(2, {"train/loss": math.nan, "train/grad_norm": math.inf})

    def test_a_window_averages_the_counted_steps_and_counts_the_skipped(self) -> None:
        window = LogWindow(count_skips=True)
        window.add(StepResult({"train/loss": 1.0}), {"train/loss": 1.0, "train/lr": 0.1}, True)
        window.add(StepResult({"train/loss": math.nan}), {"train/loss": math.nan, "train/lr": 0.2}, False)
        window.add(StepResult({"train/loss": 3.0}), {"train/loss": 3.0, "train/lr": 0.3}, True)
        assert window.report() == {"train/loss": 2.0, "train/lr": 0.3, "train/skipped_steps": 1.0}
        window.add(StepResult({"train/loss": math.nan}), {"train/loss": math.nan, "train/lr": 0.4}, False)
        report = window.report()
        assert math.isnan(report["train/loss"]) and report["train/skipped_steps"] == 1.0


def test_no_backend_applies_a_nan_update(tmp_path: Path) -> None:
    """One process, each backend in turn (DeepSpeed at stages 0-3, fp32 and bf16; FSDP2; Megatron): after a step
    whose loss is NaN the weights and the optimizer state are bit for bit what they were, and the next finite
    step trains."""
    names = ["torch", "deepspeed:0", "deepspeed:0:bf16", "deepspeed:1", "deepspeed:2:bf16", "deepspeed:3", "deepspeed:3:bf16"]
    names += ["fsdp2", "megatron"]
    out = tmp_path / "nonfinite.json"
    forked(["-m", "tests.nonfinite_worker", str(out), *names], 1, tmp_path / "nonfinite.log")
    found = json.loads(out.read_text())
    for name in names:
        assert found[name]["norm"] in ("nan", "inf"), (name, found[name])
        assert found[name]["weights_kept"] and found[name]["optimizer_kept"] and found[name]["then_trains"], (name, found[name])


@pytest.mark.parametrize("algorithm", ["sft", "reward", "dpo", "ppo", "ilql"])
def test_a_run_that_goes_nan_fails_and_exports_nothing(tmp_path: Path, algorithm: str) -> None:
    """lr=1e30 (the example spec otherwise): the first NaN loss ends the run with exit 3 and the reason on its status;
    that step's values are reported (the charts show where), and no final model is written."""
    out = tmp_path / "out"
    overrides = ["train.lr=1e30", "train.steps=6", "train.eval_every=null", "train.checkpoint_every=null"]
    overrides += ["model.path=builtin:tiny-gpt2"] if algorithm in ("ppo", "dpo") else []
    args = ["run", str(EXAMPLES / f"{algorithm}.yaml"), "--out", str(out)]
    assert main(args + [part for o in overrides for part in ("--set", o)]) == EXIT_DIVERGED
    reason = failure(out)
    step = int(reason.rsplit("at step ", 1)[1].split()[0])
    assert reason.startswith("diverged: train/loss is NaN at step") and step <= 2, reason
    assert metrics(out, "train/loss")[step] == "NaN"  # JSON's spelling (reporting/events.py)
    assert not (out / "final").exists()


def test_skip_fails_after_max_consecutive_skips(tmp_path: Path) -> None:
    out = tmp_path / "out"
    overrides = ["train.lr=1e30", "train.on_nonfinite=skip", "train.max_consecutive_skips=3"]
    assert main(["run", str(EXAMPLES / "sft.yaml"), "--out", str(out), *[p for o in overrides for p in ("--set", o)]]) == 3
    assert failure(out) == (
        "diverged: 3 steps in a row skipped (train.max_consecutive_skips 3); the last: train/loss is NaN at step 4"
    )
    assert metrics(out, "train/skipped_steps") == {1: 0.0, 2: 1.0, 3: 1.0}
    assert not (out / "final").exists()


# --- a reward that is NaN for one training step (a python reward: allow-listed below) ---

NAN_ON_CALL = {"at": 0, "calls": 0}


def reward_nan_once(prompts: list[str], responses: list[str], metadata: list[dict]) -> list[float]:
    """The response's length; NaN for every response of the NAN_ON_CALL["at"]-th batch of 8 (training batches;
    the evaluation's batches hold 12)."""
    if len(responses) == 8:
        NAN_ON_CALL["calls"] += 1
        if NAN_ON_CALL["calls"] == NAN_ON_CALL["at"]:
            return [math.nan] * len(responses)
    return [float(len(r)) for r in responses]


def grpo_spec(data: Path, on_nonfinite: str) -> dict:
    return {
        "name": "grpo-nan-reward",
        "algorithm": "grpo",
        "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
        "reward": {"kind": "python", "entrypoint": "tests.test_divergence:reward_nan_once"},
        "data": {"source": str(data), "eval_fraction": 0.0},
        "train": {"steps": 4, "batch_size": 8, "lr": 1e-3, "checkpoint_every": 1, "keep_last": 4, "on_nonfinite": on_nonfinite},
        "grpo": {"group_size": 4, "gen": {"max_new_tokens": 6}},
    }


@pytest.fixture
def nan_at_step_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RLPLANE_REWARD_ENTRYPOINTS", "tests.test_divergence:*")
    monkeypatch.setitem(NAN_ON_CALL, "at", 2)
    monkeypatch.setitem(NAN_ON_CALL, "calls", 0)
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{a + 1}="}) + "\n" for a in range(12)))
    return data


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(str(next((checkpoint / "model").glob("*.safetensors"))))


def test_grpo_skips_the_step_of_a_nan_reward_and_goes_on(tmp_path: Path, nan_at_step_2: Path) -> None:
    """skip: step 2's rewards are NaN; its update is not applied (its checkpoint holds step 1's weights), it is
    counted, and the run goes on to train and export."""
    out = tmp_path / "out"
    assert main(["run", str(write_spec(tmp_path / "grpo.yaml", grpo_spec(nan_at_step_2, "skip"))), "--out", str(out)]) == 0
    assert metrics(out, "train/skipped_steps") == {1: 0.0, 2: 1.0, 3: 0.0, 4: 0.0}
    assert metrics(out, "reward/mean")[2] == "NaN" and isinstance(metrics(out, "reward/mean")[3], float)
    step = {n: weights(out / "checkpoints" / f"step-{n:06d}") for n in (1, 2, 3)}
    assert all(torch.equal(step[1][k], step[2][k]) for k in step[1])
    assert any(not torch.equal(step[2][k], step[3][k]) for k in step[2])
    assert (out / "final").is_dir()


def test_grpo_fails_on_a_nan_reward(tmp_path: Path, nan_at_step_2: Path) -> None:
    out = tmp_path / "out"
    spec = write_spec(tmp_path / "grpo.yaml", grpo_spec(nan_at_step_2, "fail"))
    assert main(["run", str(spec), "--out", str(out)]) == EXIT_DIVERGED
    assert failure(out) == "diverged: reward/mean is NaN at step 2 (train.on_nonfinite: fail)"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000001"]
    assert not (out / "final").exists()
