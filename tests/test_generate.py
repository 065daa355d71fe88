"""The generate recipe (Constitutional AI's data) through `python -m trainer_core run`, into a runs directory laid out
as a worker lays it: critique_revise writes sft rows (each answer critiqued and revised against drawn principles,
the same rows again for the same seed), ai_feedback writes preference rows (identical pairs dropped), and an SFT run
and a reward model read them with `data.source: run:<id>`; a data source that names nothing says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.training import metrics, run_spec, write_spec
from trainer_core.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")

PRINCIPLES = ["Point out what is wrong.", "Point out what is missing."]


def generate_spec(kind: str, **options: object) -> dict:
    return {
        "name": f"generate-{kind}",
        "algorithm": "generate",
        "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 64},
        "data": {"source": "builtin:tiny-prompts", "eval_fraction": 0.1},
        "generate": {"kind": kind, "principles": PRINCIPLES, "max_prompts": 12, "gen": {"max_new_tokens": 4}} | options,
    }


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "final" / "data.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """runs/1: critique_revise with two rounds; runs/2: ai_feedback judged by another model (tiny-llama)."""
    root = tmp_path_factory.mktemp("generate") / "runs"
    run_spec(root.parent / "1.yaml", generate_spec("critique_revise", revisions=2), "--out", str(root / "1"))
    judged = generate_spec(
        "ai_feedback", feedback_model={"path": "builtin:tiny-llama"}, gen={"max_new_tokens": 4, "temperature": 1.5}
    )
    run_spec(root.parent / "2.yaml", judged, "--out", str(root / "2"))
    return root


def test_critique_revise_writes_each_answers_last_revision(runs: Path) -> None:
    rows = rows_of(runs / "1")
    assert len(rows) == 12 and metrics(runs / "1", "data/rows") == {1: 12.0}
    for row in rows:
        assert set(row) == {"prompt", "completion", "first_response", "critiques"}
        assert [step["principle"] in PRINCIPLES for step in row["critiques"]] == [True, True]
        assert row["completion"] == row["critiques"][-1]["revision"]
    assert len({row["critiques"][0]["principle"] for row in rows}) == 2  # drawn per prompt, not one for all
    manifest = json.loads((runs / "1" / "final" / "manifest.json").read_text())
    assert set(manifest["files"]) == {"data.jsonl"} and manifest["step"] == 1  # registered and verified as an export
    shown = [json.loads(line) for line in (runs / "1" / "samples.jsonl").read_text().splitlines()]
    assert [row["label"] for row in shown] == ["answer", "revision"] * 4


def test_the_same_seed_writes_the_same_rows(runs: Path, tmp_path: Path) -> None:
    run_spec(tmp_path / "again.yaml", generate_spec("critique_revise", revisions=2), "--out", str(tmp_path / "again"))
    assert (tmp_path / "again" / "final" / "data.jsonl").read_bytes() == (runs / "1" / "final" / "data.jsonl").read_bytes()


def test_attribute_values_reach_what_the_model_answers(runs: Path, tmp_path: Path) -> None:
    """generate.attributes (SteerLM's steering): the model answers prompts that carry the values, so the same draws give
    other answers, while the rows keep their prompts as they were."""
    steered = generate_spec("critique_revise", revisions=2, attributes={"values": {"correctness": 4}})
    run_spec(tmp_path / "steered.yaml", steered, "--out", str(tmp_path / "steered"))
    plain, asked = rows_of(runs / "1"), rows_of(tmp_path / "steered")
    assert [row["prompt"] for row in asked] == [row["prompt"] for row in plain]
    assert [row["first_response"] for row in asked] != [row["first_response"] for row in plain]


def test_ai_feedback_writes_preference_rows(runs: Path) -> None:
    rows = rows_of(runs / "2")
    identical = metrics(runs / "2", "data/identical")[1]
    assert rows and len(rows) + identical == 12, (len(rows), identical)
    for row in rows:
        assert row["chosen"] != row["rejected"] and 0.5 <= row["preference"] <= 1 and row["principle"] in PRINCIPLES
    assert 0 <= metrics(runs / "2", "data/agreement")[1] <= 1


def test_later_runs_read_them_as_data(runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """data.source run:<id> through the runs directory the worker names (RLPLANE_RUNS_DIR): SFT on the revisions, a
    reward model on the AI's preferences."""
    monkeypatch.setenv("RLPLANE_RUNS_DIR", str(runs))
    train = {"steps": 2, "batch_size": 4, "eval_every": None}
    base = {"model": {"path": "builtin:tiny-gpt2", "max_seq_len": 64}, "train": train}
    sft = base | {"name": "sl-cai", "algorithm": "sft", "data": {"source": "run:1", "eval_fraction": 0.0}}
    run_spec(tmp_path / "sft.yaml", sft, "--out", str(tmp_path / "sft"))
    assert sorted(metrics(tmp_path / "sft", "train/loss")) == [1, 2]
    pm = base | {"name": "pm", "algorithm": "reward", "data": {"source": "run:2", "eval_fraction": 0.0}}
    pm["train"] = train | {"batch_size": 2}
    run_spec(tmp_path / "pm.yaml", pm, "--out", str(tmp_path / "pm"))
    assert sorted(metrics(tmp_path / "pm", "train/loss")) == [1, 2]


def test_a_data_source_run_that_names_nothing_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    spec = {
        "name": "orphan",
        "algorithm": "sft",
        "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 64},
        "data": {"source": "run:7"},
        "train": {"steps": 1, "batch_size": 2},
    }
    path = write_spec(tmp_path / "spec.yaml", spec)
    monkeypatch.delenv("RLPLANE_RUNS_DIR", raising=False)
    assert main(["run", str(path), "--out", str(tmp_path / "a")]) == 2
    assert "does not know where runs are" in capsys.readouterr().err
    monkeypatch.setenv("RLPLANE_RUNS_DIR", str(tmp_path / "runs"))
    assert main(["run", str(path), "--out", str(tmp_path / "b")]) == 2
    assert "names a generate run that succeeded (it writes final/data.jsonl)" in capsys.readouterr().err
