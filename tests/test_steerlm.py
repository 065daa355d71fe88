"""SteerLM through `python -m trainer_core run`, on builtin:arithmetic-graded (each problem answered right and wrong,
graded correctness 4 or 0 and verbosity): the attribute model (the reward recipe with a regression output per
attribute) learns each attribute and its export grades right answers above wrong ones; attribute-conditioned SFT,
its unlabelled rows labelled by that model, answers more problems right when an evaluation asks for correctness 4
than for 0; resume is exact; rows and templates are checked at the edges, with the errors naming the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from rlplane.spec.attributes import AttributeConditioning, AttributeSteering, attribute_text
from tests.harness.training import assert_resume_is_exact, metrics, run_spec, write_spec
from trainer_core.cli import main
from trainer_core.data import DataError
from trainer_core.data.tasks.arithmetic import graded_examples
from trainer_core.losses import attribute_loss
from trainer_core.recipes import steering

pytestmark = pytest.mark.usefixtures("one_thread")

GRADED = {"source": "builtin:arithmetic-graded", "eval_fraction": 0.1}


def attribute_spec(model: str, **train: object) -> dict:
    return {
        "name": "attributes",
        "algorithm": "reward",
        "model": {"path": model, "max_seq_len": 32},
        "data": GRADED,
        "train": {"steps": 800, "batch_size": 32, "lr": 1e-3, "warmup_steps": 10, "eval_every": 400, "log_every": 100} | train,
        "reward_model": {"attributes": ["correctness", "verbosity"], "samples_to_log": 2},
    }


def steering_eval(model: Path, correctness: int) -> dict:
    return {
        "name": f"asks-{correctness}",
        "algorithm": "eval",
        "model": {"path": str(model), "max_seq_len": 32},
        "data": GRADED,  # its prompts: arithmetic's, with the same problems held out
        "reward": {"kind": "builtin", "name": "arithmetic"},
        "eval": {"greedy": True, "gen": {"max_new_tokens": 4}, "attributes": {"values": {"correctness": correctness}}},
    }


@pytest.fixture(scope="module")
def chain(sft_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The attribute model on the SFT chain's final model (its trunk knows arithmetic), then conditioned SFT from that
    model on builtin:arithmetic-partly-graded (a quarter of the rows ungraded, labelled by the attribute model), then
    evaluations asking for correctness 4 and 0."""
    tmp = tmp_path_factory.mktemp("steerlm")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the module fixture runs before the function-scoped one
    try:
        run_spec(tmp / "attributes.yaml", attribute_spec(str(sft_run / "final")), "--out", str(tmp / "attributes"))
        conditioned = {
            "name": "steered-sft",
            "algorithm": "sft",
            "model": {"path": str(sft_run / "final"), "max_seq_len": 32},
            "data": {"source": "builtin:arithmetic-partly-graded", "eval_fraction": 0.1},
            "train": {"steps": 500, "batch_size": 32, "lr": 1e-3, "warmup_steps": 20, "eval_every": 500, "log_every": 100},
            "sft": {
                "attributes": {"names": ["correctness"], "labeller": {"path": str(tmp / "attributes" / "final")}},
                "samples_to_log": 2,
            },
        }
        run_spec(tmp / "sft.yaml", conditioned, "--out", str(tmp / "sft"))
        for value in (4, 0):
            run_spec(tmp / f"eval-{value}.yaml", steering_eval(tmp / "sft" / "final", value), "--out", str(tmp / f"eval-{value}"))
    finally:
        torch.set_num_threads(threads)
    return tmp


def test_the_attribute_model_learns_each_attribute(chain: Path) -> None:
    """800 steps: each attribute's held-out mean absolute error falls from where the new head starts (correctness
    2.01 -> 1.36 measured: a constant 2 scores 2.0; verbosity 2.09 -> 0.13), and its export names them."""
    mae = {name: metrics(chain / "attributes", f"eval/mae/{name}") for name in ("correctness", "verbosity")}
    assert sorted(mae["correctness"]) == [0, 400, 800]
    assert mae["correctness"][800] < 1.7 < 1.9 < mae["correctness"][0], mae
    assert mae["verbosity"][800] < 0.3 < 1.5 < mae["verbosity"][0], mae
    assert sorted(metrics(chain / "attributes", "train/loss")) == [100, 200, 300, 400, 500, 600, 700, 800]
    config = json.loads((chain / "attributes" / "final" / "config.json").read_text())
    assert config["rlplane_attributes"] == ["correctness", "verbosity"] and len(config["id2label"]) == 2
    shown = [json.loads(line) for line in (chain / "attributes" / "samples.jsonl").read_text().splitlines()]
    last = [row for row in shown if row["step"] == 800]
    assert len(last) == 2 and all(
        set(row["scores"]) == {"correctness", "correctness/true", "verbosity", "verbosity/true"} for row in last
    )


def test_the_labeller_grades_right_answers_above_wrong_ones(chain: Path) -> None:
    """The export as a labeller of held-out rows: whole numbers, right answers graded above wrong ones on average
    (measured 2.9 against 1.4 on a training sample)."""
    rows = graded_examples(seed=0, eval_fraction=0.1).eval
    options = AttributeConditioning(names=["correctness"], labeller={"path": str(chain / "attributes" / "final")})
    labels = [values["correctness"] for values in steering.label(rows, options, seed=0, batch_size=64)]
    assert all(value == int(value) for value in labels)
    right = [v for v, row in zip(labels, rows, strict=True) if row["correctness"] == 4]
    wrong = [v for v, row in zip(labels, rows, strict=True) if row["correctness"] == 0]
    assert sum(right) / len(right) >= sum(wrong) / len(wrong) + 0.8, (sum(right) / len(right), sum(wrong) / len(wrong))


def test_asking_for_high_correctness_answers_more_problems_right(chain: Path) -> None:
    """The conditioned model on the 267 held-out problems, greedy: asked for correctness 4 it answers far more right
    than asked for 0 (measured 0.745 against 0.228); the labeller filled the ungraded quarter of the rows."""
    high, low = metrics(chain / "eval-4", "eval/accuracy")[1], metrics(chain / "eval-0", "eval/accuracy")[1]
    assert high >= low + 0.3 and high > 0.5, (high, low)
    log = (chain / "sft" / "logs.jsonl").read_text()
    assert "attributes: the labeller gave correctness to 1334 rows that lacked them" in log, log[-2000:]
    samples = [json.loads(line) for line in (chain / "sft" / "samples.jsonl").read_text().splitlines()]
    assert all(row["prompt"].startswith("correctness:") and "\n" in row["prompt"] for row in samples)


def test_an_attribute_model_resumes_exactly(tmp_path: Path) -> None:
    spec = attribute_spec("builtin:tiny-gpt2", steps=10, batch_size=8, micro_batch_size=4, eval_every=5, log_every=1)
    assert_resume_is_exact(tmp_path, spec, 5, ("train/loss", "train/grad_norm", "eval/loss", "eval/mae/correctness"))


# --- the edges ---


def test_a_row_without_a_value_and_no_labeller_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text('{"prompt": "1+1=", "completion": "2", "correctness": 4}\n{"prompt": "2+2=", "completion": "5"}\n')
    spec = {
        "name": "unlabelled",
        "algorithm": "sft",
        "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
        "data": {"source": str(data), "eval_fraction": 0.0},
        "train": {"steps": 1, "batch_size": 2},
        "sft": {"attributes": {"names": ["correctness"]}},
    }
    assert main(["run", str(write_spec(tmp_path / "spec.yaml", spec)), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "a training row (prompt '2+2=') has no number in 'correctness'" in err and "sft.attributes.labeller" in err, err
    spec["algorithm"], spec["reward_model"] = "reward", {"attributes": ["correctness"]}
    del spec["sft"]
    assert main(["run", str(write_spec(tmp_path / "rm.yaml", spec)), "--out", str(tmp_path / "rm")]) == 2
    assert "a training row (prompt '2+2='), column 'correctness': an attribute model needs a number" in capsys.readouterr().err


def test_prompts_carry_values_through_the_template() -> None:
    assert attribute_text({"verbosity": 1.0, "correctness": 4.0, "humor": 0.5}) == "correctness:4,humor:0.5,verbosity:1"
    options = AttributeSteering(values={"correctness": 4})
    assert steering.steered([{"prompt": "1+1=", "answer": "2"}], options) == [{"prompt": "correctness:4\n1+1=", "answer": "2"}]
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    carried = steering.carrying(chat, {"helpfulness": 3}, "<{attributes}> {prompt}")
    assert carried["messages"][0]["content"] == "<helpfulness:3> hi" and chat["messages"][0]["content"] == "hi"
    with pytest.raises(DataError, match="a 'text' row"):
        steering.carrying({"text": "plain"}, {"helpfulness": 3}, "{attributes}{prompt}")
    for template in ("{prompt} only", "{attributes}{prompt}{extra}", "{attributes {prompt}"):
        with pytest.raises(ValidationError, match="template"):
            AttributeSteering(values={"correctness": 4}, template=template)


def test_attribute_loss_by_hand() -> None:
    predicted = torch.tensor([[3.0, 1.0], [0.0, 2.0]], requires_grad=True)
    target = torch.tensor([[4.0, 1.0], [0.0, 1.0]])
    loss, absolute = attribute_loss(predicted, target)
    assert loss.item() == pytest.approx((1 + 0 + 0 + 1) / 4)
    assert absolute.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    loss.backward()
    assert predicted.grad.tolist() == [[-0.5, 0.0], [0.0, 0.5]]  # d/dp of mean (p - t)^2 = 2 (p - t) / 4
    with pytest.raises(ValueError, match=r"\[rows, attributes\]"):
        attribute_loss(predicted[0], target[0])
