"""Pipelines through the API: validated whole at submit, stages started by the reconciler as their inputs exist
(references resolved to run:<id>@<step>, lineage recorded), gates, skips, retries, replaces, stale stages, cancel.

The stages' runs are driven as a worker drives them (lease, metrics, status through the API); checkpoints are
rows as the worker's registration leaves them (tests/test_checkpoints.py covers registering the files)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from sqlalchemy import func, select

from api.models import Checkpoint, Pipeline, PipelineStage, Run, RunLink
from api.reconcile import Reconciler
from rlplane.pipeline import find_cycle, parse_gate
from tests.harness.factories import ApiWorker, auth, create_project, create_user, spec

GRPO = {
    "algorithm": "grpo",
    "model": {"path": "stage:sft@best"},
    "reward": {"kind": "builtin", "name": "arithmetic"},
    "data": {"source": "builtin:arithmetic"},
    "train": {"steps": 10, "batch_size": 8, "lr": 1e-5},
    "grpo": {"group_size": 4},
}


def chain(**grpo_stage) -> dict:
    """sft (best by eval/loss) -> grpo from sft's best checkpoint -> a second sft from grpo's final model."""
    sft = spec()
    del sft["name"]
    after = spec(model={"path": "stage:grpo"})
    del after["name"]
    return {
        "name": "chain",
        "stages": {
            "sft": {"spec": sft, "best": {"metric": "eval/loss", "goal": "min"}},
            "grpo": {"spec": copy.deepcopy(GRPO), **grpo_stage},
            "polish": {"spec": after},
        },
    }


def advance(app) -> None:
    Reconciler(app.state.sessionmaker, lambda *_: None).advance_pipelines()


def stages(client, pipeline_id: int) -> dict[str, dict]:
    return {s["name"]: s for s in client.get(f"/api/v1/pipelines/{pipeline_id}").json()["stages"]}


def checkpoints(db, run_id: int, steps: list[int]) -> None:
    for step in steps:
        db.add(
            Checkpoint(
                run_id=run_id, step=step, path=f"runs/{run_id}/checkpoints/step-{step:06d}", size=1, sha256="0" * 64, meta={}
            )
        )
    db.commit()


def exported(db, run_id: int, step: int) -> None:
    """The final model a succeeded run registers (ApiWorker trains nothing): what run:<id> names."""
    db.add(Checkpoint(run_id=run_id, step=step, kind="export", path=f"runs/{run_id}/final", size=1, sha256="0" * 64, meta={}))
    db.commit()


def test_a_chain_runs_stage_by_stage_from_the_best_checkpoint_and_a_failed_stage_skips_the_rest(client, db, app):
    worker = ApiWorker(client)
    created = client.post("/api/v1/pipelines", json=chain())
    assert created.status_code == 201, created.text
    body = created.json()
    pid, first = body["id"], {s["name"]: s for s in body["stages"]}
    assert body["status"] == "running"
    assert first["sft"]["status"] == "running" and first["sft"]["run_id"] is not None
    assert (first["grpo"]["status"], first["grpo"]["needs"], first["polish"]["needs"]) == ("waiting", ["sft"], ["grpo"])
    sft_run = first["sft"]["run_id"]
    assert db.get(Run, sft_run).name == "chain-sft" and db.get(Run, sft_run).status == "queued"

    advance(app)  # nothing has ended: nothing moves
    assert stages(client, pid)["grpo"]["status"] == "waiting"

    # eval/loss is best at step 20 (the checkpoint at 30 was saved after it rose again)
    worker.finish(sft_run, points={"eval/loss": {10: 2.0, 20: 1.2, 30: 1.4}, "train/loss": {30: 1.1}})
    checkpoints(db, sft_run, [10, 20, 30])
    advance(app)
    now = stages(client, pid)
    assert now["sft"]["status"] == "succeeded" and now["sft"]["headline"] == {"key": "eval/loss", "value": 1.4, "decoding": None}
    grpo_run = now["grpo"]["run_id"]
    assert now["grpo"]["status"] == "running" and now["polish"]["status"] == "waiting"
    started = db.get(Run, grpo_run)
    assert started.spec["model"]["path"] == f"run:{sft_run}@20" and started.status == "queued"
    link = db.scalars(select(RunLink).where(RunLink.child_id == grpo_run)).one()
    assert (link.parent_id, link.field, link.step) == (sft_run, "model.path", 20)

    worker.finish(grpo_run, status="failed", points={"train/loss": {3: 0.01}, "reward/mean": {3: 0.25}})
    advance(app)
    detail = client.get(f"/api/v1/pipelines/{pid}").json()
    now = {s["name"]: s for s in detail["stages"]}
    assert now["grpo"]["status"] == "failed" and "exit code 1" in now["grpo"]["reason"]
    assert now["grpo"]["headline"] == {"key": "reward/mean", "value": 0.25, "decoding": "greedy"}  # as the runs list
    assert (now["polish"]["status"], now["polish"]["reason"]) == ("skipped", "stage grpo failed")
    assert (detail["status"], detail["reason"]) == ("failed", "grpo failed, polish skipped")

    # Replace the failed stage's spec: a new run from the same checkpoint; the skipped stage waits again.
    changed = {**copy.deepcopy(GRPO), "train": {**GRPO["train"], "lr": 5e-6}}
    retried = client.post(f"/api/v1/pipelines/{pid}/stages/grpo/retry", json={"spec": changed})
    assert retried.status_code == 200, retried.text
    now = {s["name"]: s for s in retried.json()["stages"]}
    assert retried.json()["status"] == "running"
    assert now["grpo"]["status"] == "running" and now["grpo"]["runs"] == [grpo_run, now["grpo"]["run_id"]]
    assert db.get(Run, now["grpo"]["run_id"]).spec["train"]["lr"] == 5e-6
    assert now["polish"]["status"] == "waiting"

    worker.finish(now["grpo"]["run_id"])
    exported(db, now["grpo"]["run_id"], 3)
    advance(app)
    polish = stages(client, pid)["polish"]
    assert db.get(Run, polish["run_id"]).spec["model"]["path"] == f"run:{now['grpo']['run_id']}"
    worker.finish(polish["run_id"])
    advance(app)
    assert client.get(f"/api/v1/pipelines/{pid}").json()["status"] == "succeeded"

    # Re-running the first stage leaves the two after it stale: they ran on its old output.
    rerun = client.post(f"/api/v1/pipelines/{pid}/stages/sft/retry", json={}).json()
    now = {s["name"]: s for s in rerun["stages"]}
    assert now["sft"]["status"] == "running" and len(now["sft"]["runs"]) == 2
    assert now["grpo"]["status"] == "stale" and now["polish"]["status"] == "stale"
    assert "retry this stage" in now["grpo"]["reason"]
    busy = client.post(f"/api/v1/pipelines/{pid}/stages/sft/retry", json={})
    assert busy.status_code == 409 and "running" in busy.json()["detail"]


def test_a_closed_gate_skips_its_stage_with_the_value_it_saw_and_cancel_stops_everything(client, db, app):
    worker = ApiWorker(client)
    body = client.post("/api/v1/pipelines", json=chain(when='stages.sft.metrics["eval/loss"] < 1.5')).json()
    pid, sft_run = body["id"], body["stages"][0]["run_id"]
    assert stages(client, pid)["grpo"]["gate"] == ['stages.sft.metrics["eval/loss"] < 1.5: no value yet']
    worker.finish(sft_run, points={"eval/loss": {10: 1.7}})
    checkpoints(db, sft_run, [10])
    advance(app)
    now = stages(client, pid)
    assert now["grpo"]["status"] == "skipped" and now["grpo"]["run_id"] is None
    assert now["grpo"]["reason"] == 'gate closed: stages.sft.metrics["eval/loss"] < 1.5: it is 1.7'
    assert now["grpo"]["gate"] == ['stages.sft.metrics["eval/loss"] < 1.5: it is 1.7, does not hold']
    assert now["sft"]["gate"] == []
    assert now["polish"]["reason"] == "stage grpo skipped"
    assert db.scalar(select(func.count()).select_from(Run)) == 1  # no run for a skipped stage

    # Retry sft (a better run, say): grpo, never run, waits again rather than going stale.
    now = {s["name"]: s for s in client.post(f"/api/v1/pipelines/{pid}/stages/sft/retry", json={}).json()["stages"]}
    assert (now["grpo"]["status"], now["polish"]["status"]) == ("waiting", "waiting")
    cancelled = client.post(f"/api/v1/pipelines/{pid}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    now = {s["name"]: s for s in cancelled.json()["stages"]}
    assert db.get(Run, now["sft"]["run_id"]).status == "cancelled"  # queued: cancelled at once
    assert now["grpo"]["status"] == "cancelled" and now["polish"]["status"] == "cancelled"
    advance(app)
    assert stages(client, pid)["sft"]["status"] == "cancelled"
    assert client.post(f"/api/v1/pipelines/{pid}/cancel").status_code == 409


def test_a_stage_referencing_a_checkpoint_that_does_not_exist_fails_with_what_there_is(client, db, app):
    worker = ApiWorker(client)
    doc = chain()
    doc["stages"]["grpo"]["spec"]["model"]["path"] = "stage:sft@25"
    body = client.post("/api/v1/pipelines", json=doc).json()
    worker.finish(body["stages"][0]["run_id"])
    checkpoints(db, body["stages"][0]["run_id"], [10, 20])
    advance(app)
    grpo = stages(client, body["id"])["grpo"]
    assert grpo["status"] == "failed"
    sft_run = body["stages"][0]["run_id"]
    assert (
        grpo["reason"] == f"could not start: model.path: stage sft (run {sft_run}) has no checkpoint at step 25 (it has 10, 20)"
    )


@pytest.mark.parametrize(
    ("edit", "loc", "says"),
    [
        (
            lambda d: d["stages"]["grpo"]["spec"]["model"].update(path="stage:sfft"),
            ["stages", "grpo", "spec", "model", "path"],
            "no stage named 'sfft'",
        ),
        (lambda d: d["stages"]["sft"].pop("best"), ["stages", "grpo", "spec", "model", "path"], "add best: {metric"),
        (lambda d: d["stages"]["sft"].update(needs=["polish"]), ["stages"], "cycle: sft -> polish -> grpo -> sft"),
        (lambda d: d["stages"]["grpo"].update(when="stages.sft.metrics.loss < 1"), ["stages", "grpo", "when"], "cannot read"),
        (
            lambda d: d["stages"]["grpo"]["spec"]["train"].update(steps=0),
            ["stages", "grpo", "spec", "train", "steps"],
            "greater than",
        ),
        (lambda d: d["stages"]["grpo"].update(wen="x"), ["stages", "grpo", "wen"], "Extra inputs"),
        (
            lambda d: d["stages"]["polish"]["spec"].update(project="other"),
            ["stages", "polish", "spec", "project"],
            "pipeline's project",
        ),
    ],
    ids=["unknown-stage", "best-undefined", "cycle", "bad-gate", "bad-spec-field", "unknown-key", "other-project"],
)
def test_a_bad_pipeline_is_refused_whole_naming_the_stage_and_field(client, db, edit, loc, says):
    doc = chain()
    edit(doc)
    response = client.post("/api/v1/pipelines", json=doc)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(e["loc"] == ["body", *loc] and says in e["msg"] for e in errors), errors
    assert db.scalar(select(func.count()).select_from(Pipeline)) == 0 and db.scalar(select(func.count()).select_from(Run)) == 0


def test_yaml_submits_and_projects_bound_who_sees_and_starts_pipelines(client, db):
    create_project(client, "team")
    reader = create_user(client, "rita", roles={"team": "viewer"}, scopes=("write",))
    outsider = create_user(client, "otto", roles={}, scopes=("write",))
    yaml = (
        "name: two\nproject: team\nstages:\n"
        "  sft: {spec: {algorithm: sft, model: {path: 'builtin:tiny-gpt2'}, data: {source: 'builtin:tiny-sft'},\n"
        "                train: {steps: 5, batch_size: 4}}}\n"
    )
    created = client.post("/api/v1/pipelines", content=yaml, headers={"Content-Type": "application/yaml"})
    assert created.status_code == 201, created.text
    pid = created.json()["id"]
    assert db.scalars(select(PipelineStage.status).where(PipelineStage.pipeline_id == pid)).all() == ["running"]
    assert (
        client.post("/api/v1/pipelines", content=yaml, headers={**auth(reader), "Content-Type": "application/yaml"}).status_code
        == 403
    )
    assert client.get(f"/api/v1/pipelines/{pid}", headers=auth(reader)).status_code == 200
    assert client.post(f"/api/v1/pipelines/{pid}/cancel", headers=auth(reader)).status_code == 403
    assert client.get(f"/api/v1/pipelines/{pid}", headers=auth(outsider)).status_code == 403  # as for runs
    assert client.get("/api/v1/pipelines", headers=auth(outsider)).json() == {"items": []}
    listed = client.get("/api/v1/pipelines", params={"project": "team"}).json()["items"]
    assert [(p["name"], p["stages"]) for p in listed] == [("two", [{"name": "sft", "status": "running"}])]


def test_gates_and_cycles_are_read_not_run():
    (a, b) = parse_gate("stages.sft.metrics[\"eval/loss\"] < 1.5 and stages.rm.metrics['eval/accuracy'] >= 0.8")
    assert (a.stage, a.metric, a.op, a.value, a.holds(1.4), a.holds(1.5)) == ("sft", "eval/loss", "<", 1.5, True, False)
    assert (b.stage, b.metric, b.holds(0.8)) == ("rm", "eval/accuracy", True)
    with pytest.raises(ValueError, match="cannot read"):
        parse_gate("__import__('os').system('true')")
    assert find_cycle({"a": ["b"], "b": ["c"], "c": []}) is None
    assert find_cycle({"a": ["b"], "b": ["a"]}) == ["a", "b", "a"]


@pytest.mark.parametrize("name", ["sft-grpo.yaml", "sft-rm-ppo.yaml"])
def test_every_shipped_pipeline_example_is_accepted_and_starts_its_first_stage(client, db, name):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "examples" / "pipelines" / name).read_text()
    response = client.post("/api/v1/pipelines", content=text, headers={"Content-Type": "application/yaml"})
    assert response.status_code == 201, response.text
    statuses = [(s["name"], s["status"]) for s in response.json()["stages"]]
    assert statuses[0] == ("sft", "running") and all(status == "waiting" for _, status in statuses[1:])


def test_a_tuned_stage_runs_a_sweep_and_the_next_stage_starts_from_its_best_trial(client, db, app):
    worker = ApiWorker(client)
    doc = chain()
    del doc["stages"]["grpo"]
    doc["stages"]["polish"]["spec"]["model"]["path"] = "stage:sft"
    doc["stages"]["sft"]["sweep"] = {
        "space": {"train.lr": {"type": "categorical", "choices": [1e-4, 1e-3]}},
        "method": "grid",
        "metric": "eval/loss",
        "parallel": 2,
    }
    body = client.post("/api/v1/pipelines", json=doc).json()
    sft = {s["name"]: s for s in body["stages"]}["sft"]
    assert sft["status"] == "running" and sft["sweep_id"] is not None and sft["run_id"] is None
    trials = client.get(f"/api/v1/sweeps/{sft['sweep_id']}").json()["trial_list"]
    assert [t["params"]["train.lr"] for t in trials] == [1e-4, 1e-3]
    for trial, loss in zip(trials, (1.5, 0.7), strict=True):
        worker.finish(trial["run_id"], points={"eval/loss": {10: loss}})
        exported(db, trial["run_id"], 10)
    advance(app)  # the sweep ends
    advance(app)  # the stage sees it, and the next one starts
    now = stages(client, body["id"])
    best = trials[1]["run_id"]
    assert now["sft"]["status"] == "succeeded" and now["sft"]["run_id"] == best and "best: trial 1" in now["sft"]["reason"]
    assert db.get(Run, now["polish"]["run_id"]).spec["model"]["path"] == f"run:{best}"

    doc["stages"]["sft"]["sweep"]["space"] = {"train.lrr": {"type": "categorical", "choices": [1]}}
    refused = client.post("/api/v1/pipelines", json=doc)
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "stages", "sft", "sweep", "space", "train.lrr"]


def test_validate_checks_a_pipeline_as_a_submit_would_and_stores_nothing(client, db):
    checked = client.post("/api/v1/pipelines/validate", json=chain())
    assert checked.status_code == 200, checked.text
    assert checked.json() == {
        "valid": True,
        "stages": [{"name": "sft", "needs": []}, {"name": "grpo", "needs": ["sft"]}, {"name": "polish", "needs": ["grpo"]}],
    }
    bad = chain()
    bad["stages"]["grpo"]["spec"]["model"]["path"] = "stage:nope"
    refused = client.post("/api/v1/pipelines/validate", json=bad)
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == [
        "body",
        "stages",
        "grpo",
        "spec",
        "model",
        "path",
    ]
    assert db.scalar(select(func.count()).select_from(Pipeline)) == 0 and db.scalar(select(func.count()).select_from(Run)) == 0


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "examples" / "pipelines").glob("*.yaml")))
def test_every_example_pipeline_is_accepted_whole(client, db, path: Path) -> None:
    """examples/pipelines/*.yaml as `rlplane submit` sends them: accepted (201) with every stage."""
    body = yaml.safe_load(path.read_text())
    created = client.post("/api/v1/pipelines", json=body)
    assert created.status_code == 201, created.text
    assert {s["name"] for s in created.json()["stages"]} == set(body["stages"])
