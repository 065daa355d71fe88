"""Sweeps through the API: checked at submit (the spec at every end of every range), trials started up to the
parallelism limit as ordinary runs with their values applied, scored on the metric, stopped early by Optuna's
pruners, the best trial named; the study is rebuilt from the database at every tick, so what a restarted API
decides is what the first would have."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from api.models import Run, Sweep
from api.reconcile import Reconciler
from tests.harness.factories import ApiWorker, spec


def sweep(**overrides) -> dict:
    base = spec()
    del base["name"]
    return {
        "name": "lr",
        "spec": base,
        "space": {
            "train.lr": {"type": "categorical", "choices": [1e-4, 3e-4, 1e-3]},
            "train.batch_size": {"type": "int", "low": 4, "high": 8, "step": 4},
        },
        "method": "grid",
        "metric": "eval/loss",
        "goal": "min",
        "trials": 10,
        "parallel": 2,
    } | overrides


def advance(app) -> None:
    Reconciler(app.state.sessionmaker, lambda *_: None).advance_pipelines()


def detail(client, sweep_id: int) -> dict:
    return client.get(f"/api/v1/sweeps/{sweep_id}").json()


def running(body: dict) -> list[dict]:
    """The trials the sweep is running: queued (their runs wait for a worker) or running."""
    return [t for t in body["trial_list"] if t["state"] in ("queued", "running")]


def test_a_grid_sweep_runs_every_combination_two_at_a_time_and_names_the_best(client, db, app):
    worker = ApiWorker(client)
    created = client.post("/api/v1/sweeps", json=sweep())
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["status"], body["budget"], body["trials"]) == ("running", 6, 2)  # 3 x 2 combinations, 2 in parallel
    loss = {(1e-4, 4): 2.0, (1e-4, 8): 1.5, (3e-4, 4): 1.2, (3e-4, 8): 0.9, (1e-3, 4): 1.1, (1e-3, 8): 3.0}
    seen = []
    while (body := detail(client, body["id"]))["status"] == "running":
        now = running(body)
        assert 1 <= len(now) <= 2
        for trial in now:
            run = db.get(Run, trial["run_id"])
            db.refresh(run)
            params = (trial["params"]["train.lr"], trial["params"]["train.batch_size"])
            assert (run.spec["train"]["lr"], run.spec["train"]["batch_size"], run.name) == (*params, f"lr-t{trial['number']}")
            seen.append(params)
            worker.finish(run.id, points={"eval/loss": {10: loss[params] + 1, 20: loss[params]}})
        advance(app)
    assert sorted(seen) == sorted(loss)  # every combination once
    assert body["status"] == "succeeded" and body["best"]["params"] == {"train.lr": 3e-4, "train.batch_size": 8}
    assert (
        body["best_value"] == 0.9
        and body["reason"] == f"best: trial {body['best']['number']} (run {body['best']['run_id']}), eval/loss 0.9"
    )
    assert all(
        t["state"] == "complete" and t["value"] == loss[(t["params"]["train.lr"], t["params"]["train.batch_size"])]
        for t in body["trial_list"]
    )
    listed = client.get("/api/v1/sweeps").json()["items"]
    assert [(s["name"], s["status"], s["trials"], s["best_value"]) for s in listed] == [("lr", "succeeded", 6, 0.9)]


@pytest.mark.parametrize("method", ["random", "tpe"])
def test_sampled_values_stay_in_their_ranges_and_a_failed_trial_does_not_stop_the_sweep(client, db, app, method):
    worker = ApiWorker(client)
    space = {
        "train.lr": {"type": "float", "low": 1e-5, "high": 1e-2, "log": True},
        "train.warmup_steps": {"type": "int", "low": 0, "high": 20, "step": 5},
        "train.batch_size": {"type": "categorical", "choices": [4, 8]},
    }
    body = client.post("/api/v1/sweeps", json=sweep(method=method, space=space, trials=5, parallel=1)).json()
    while (body := detail(client, body["id"]))["status"] == "running":
        [trial] = running(body)
        p = trial["params"]
        assert 1e-5 <= p["train.lr"] <= 1e-2 and p["train.warmup_steps"] in (0, 5, 10, 15, 20) and p["train.batch_size"] in (4, 8)
        status = "failed" if trial["number"] == 1 else "succeeded"
        worker.finish(trial["run_id"], status=status, points={"eval/loss": {10: p["train.lr"] * 100}})
        advance(app)
    states = [t["state"] for t in body["trial_list"]]
    assert states == ["complete", "failed", "complete", "complete", "complete"] and body["status"] == "succeeded"
    assert "exit code 1" in body["trial_list"][1]["reason"]
    assert len({t["params"]["train.lr"] for t in body["trial_list"]}) == 5


@pytest.mark.parametrize(
    ("early", "curve", "says"),
    [
        ({"method": "median", "min_steps": 0, "min_trials": 3}, {10: 5.0}, "the median of the 3 trials that reached it is 1"),
        ({"method": "successive_halving", "min_steps": 10}, {10: 5.0}, "(successive_halving)"),
    ],
    ids=["median", "successive-halving"],
)
def test_a_weak_trial_is_stopped_early_with_why_and_its_run_cancelled(client, db, app, early, curve, says):
    worker = ApiWorker(client)
    space = {"train.lr": {"type": "float", "low": 1e-4, "high": 1e-3}}
    body = client.post(
        "/api/v1/sweeps", json=sweep(method="random", space=space, trials=5, parallel=1, early_stopping=early)
    ).json()
    for value in (1.0, 0.9, 1.1):  # three finished trials that reached step 10 near 1
        [trial] = running(detail(client, body["id"]))
        worker.finish(trial["run_id"], points={"eval/loss": {10: value, 20: value - 0.1}})
        advance(app)
    [weak] = running(detail(client, body["id"]))
    assert weak["state"] == "queued" and weak["run_status"] == "queued"  # not "running" before a worker has it
    worker.start(weak["run_id"])
    assert running(detail(client, body["id"]))[0]["state"] == "running"
    worker.log(weak["run_id"], "eval/loss", curve)
    advance(app)
    stopped = next(t for t in detail(client, body["id"])["trial_list"] if t["number"] == weak["number"])
    assert stopped["state"] == "pruned", stopped
    assert stopped["reason"].startswith("stopped early at step 10: eval/loss 5") and says in stopped["reason"]
    assert db.get(Run, weak["run_id"]).status == "cancelling"
    assert len(running(detail(client, body["id"]))) == 1  # the next trial took its place
    worker.end(weak["run_id"], "cancelled")  # its worker stops the trainer: the run says it was pruned, not just cancelled
    run = client.get(f"/api/v1/runs/{weak['run_id']}").json()
    assert run["status"] == "cancelled"
    assert run["status_reason"].startswith(f"pruned by sweep lr (trial {weak['number']}): stopped early at step 10"), run


def test_cancel_stops_the_running_trials(client, db, app):
    body = client.post("/api/v1/sweeps", json=sweep()).json()
    cancelled = client.post(f"/api/v1/sweeps/{body['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert {db.get(Run, t["run_id"]).status for t in body["trial_list"]} == {"cancelled"}  # queued: at once
    advance(app)
    after = detail(client, body["id"])
    assert {t["state"] for t in after["trial_list"]} == {"cancelled"} and after["trials"] == 2  # no new trial
    assert client.post(f"/api/v1/sweeps/{body['id']}/cancel").status_code == 409


@pytest.mark.parametrize(
    ("edit", "loc", "says"),
    [
        (
            lambda d: d["space"].update({"train.lrr": {"type": "categorical", "choices": [0.1]}}),
            ["space", "train.lrr"],
            "unknown field 'lrr' (did you mean 'lr'?)",
        ),
        (
            lambda d: d["space"].update({"train.batch_size": {"type": "int", "low": 0, "high": 8}}),
            ["space", "train.batch_size"],
            "with train.lr=0.0001, train.batch_size=0",
        ),
        (
            lambda d: d["space"].update({"train.lr": {"type": "float", "low": 1e-3, "high": 1e-4}}),
            ["space", "train.lr", "float"],
            "must be below high",
        ),
        (lambda d: d["space"].update({"train.lr": {"type": "float", "low": 1e-4, "high": 1e-3}}), [], "grid needs a finite set"),
        (lambda d: d.update(goal="lowest"), ["goal"], "'min' or 'max'"),
    ],
    ids=["unknown-path", "invalid-at-an-end", "empty-range", "grid-of-floats", "bad-goal"],
)
def test_a_bad_sweep_is_refused_at_its_field_and_nothing_is_stored(client, db, edit, loc, says):
    doc = sweep()
    edit(doc)
    response = client.post("/api/v1/sweeps", json=doc)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(e["loc"][: len(loc) + 1] == ["body", *loc] and says in e["msg"] for e in errors), errors
    assert db.scalar(select(func.count()).select_from(Sweep)) == 0 and db.scalar(select(func.count()).select_from(Run)) == 0


def test_the_shipped_sweep_example_is_accepted_and_starts_its_parallel_trials(client, db):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "examples" / "sweeps" / "sft-lr.yaml").read_text()
    response = client.post("/api/v1/sweeps", content=text, headers={"Content-Type": "application/yaml"})
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["method"], body["budget"], len(running(body))) == ("tpe", 12, 4)
    assert all(1e-4 <= t["params"]["train.lr"] <= 1e-2 for t in body["trial_list"])
