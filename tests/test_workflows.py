"""Pipelines, sweeps and alerts with real processes: an `rlplane api` (its reconciler starts stages, trials and
alert checks on its own), Redis, two `rlplane worker`s training tiny models, and a webhook receiver on loopback.
One stack for the module: its runs are the claims below."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.harness.receiver import Receiver
from tests.harness.worker_stack import Stack

TINY = {"path": "builtin:tiny-gpt2", "max_seq_len": 64}


@pytest.fixture(scope="module")
def flows(tmp_path_factory) -> Iterator[Stack]:
    stack = Stack(tmp_path_factory.mktemp("workflows"))
    stack.api_env |= {"RLPLANE_RECONCILE_S": "1", "RLPLANE_ALERT_S": "1"}
    stack.restart_api(down_s=0)  # with the faster ticks
    try:
        stack.start_worker("w1")
        stack.start_worker("w2")
        yield stack
    finally:
        stack.close()


def until(what: str, check, timeout: float = 240):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.5)
    return found


def pipeline_done(stack: Stack, pipeline_id: int) -> dict:
    return until(
        f"pipeline {pipeline_id}", lambda: (p := stack.http.get(f"/pipelines/{pipeline_id}").json())["status"] != "running" and p
    )


def test_sft_rm_ppo_as_one_submission_then_a_closed_gate_skips_ppo(flows: Stack) -> None:
    """examples/pipelines/sft-rm-ppo.yaml's shape, tiny: the reward model starts from SFT's final model, PPO from
    SFT's best checkpoint scored by the reward model; each reference is the run's lineage. A second pipeline whose
    gate asks the impossible of its reward model skips PPO, saying what it saw."""
    sft = {"algorithm": "sft", "model": TINY, "data": {"source": "builtin:tiny-sft", "eval_fraction": 0.2}}
    sft["train"] = {"steps": 10, "batch_size": 4, "lr": 5e-4, "checkpoint_every": 5, "eval_every": 5}
    rm = {
        "algorithm": "reward",
        "model": {**TINY, "path": "stage:sft"},
        "data": {"source": "builtin:tiny-preference", "eval_fraction": 0.2},
    }
    rm["train"] = {"steps": 6, "batch_size": 4, "eval_every": 3}
    ppo = {"algorithm": "ppo", "model": {**TINY, "path": "stage:sft@best"}, "reward": {"kind": "model", "path": "stage:rm"}}
    ppo |= {
        "data": {"source": "builtin:tiny-prompts", "eval_fraction": 0.0},
        "train": {"steps": 2, "batch_size": 4, "eval_every": None},
    }
    ppo["ppo"] = {"epochs": 1, "minibatch_size": 4, "gen": {"max_new_tokens": 6}, "samples_to_log": 0}
    doc = {
        "name": "rlhf",
        "stages": {
            "sft": {"spec": sft, "best": {"metric": "eval/loss", "goal": "min"}},
            "rm": {"spec": rm},
            "ppo": {"spec": ppo, "when": 'stages.rm.metrics["eval/accuracy"] >= 0'},
        },
    }
    created = flows.http.post("/pipelines", json=doc)
    assert created.status_code == 201, created.text
    done = pipeline_done(flows, created.json()["id"])
    stages = {s["name"]: s for s in done["stages"]}
    assert done["status"] == "succeeded", [(s["name"], s["status"], s["reason"]) for s in done["stages"]]
    evals = flows.http.get(f"/runs/{stages['sft']['run_id']}/metrics", params={"keys": "eval/loss"}).json()["series"][0]["points"]
    best = min((p for p in evals if p["step"] in (5, 10)), key=lambda p: (p["value"], p["step"]))["step"]
    rm_parents = flows.http.get(f"/runs/{stages['rm']['run_id']}/lineage").json()["parents"]
    assert [(p["run_id"], p["field"], p["step"]) for p in rm_parents] == [(stages["sft"]["run_id"], "model.path", None)]
    ppo_parents = {
        p["field"]: (p["run_id"], p["step"]) for p in flows.http.get(f"/runs/{stages['ppo']['run_id']}/lineage").json()["parents"]
    }
    assert ppo_parents == {"model.path": (stages["sft"]["run_id"], best), "reward.path": (stages["rm"]["run_id"], None)}

    gated = {
        "name": "gated",
        "stages": {
            "rm": {"spec": {**rm, "model": {**TINY, "path": f"run:{stages['sft']['run_id']}"}}},
            "ppo": {
                "spec": {**ppo, "model": {**TINY, "path": f"run:{stages['sft']['run_id']}"}},
                "when": 'stages.rm.metrics["eval/accuracy"] > 1',
            },
        },
    }
    skipped = pipeline_done(flows, flows.http.post("/pipelines", json=gated).json()["id"])
    ppo_stage = {s["name"]: s for s in skipped["stages"]}["ppo"]
    assert skipped["status"] == "failed" and ppo_stage["status"] == "skipped" and ppo_stage["run_id"] is None
    assert ppo_stage["reason"].startswith('gate closed: stages.rm.metrics["eval/accuracy"] > 1: it is ')


def test_an_eight_trial_sweep_stops_a_weak_trial_and_survives_an_api_restart(flows: Stack) -> None:
    """Grid over eight learning rates, two at a time, the median pruner from step 10: trials behind the median of
    those that reached a step are stopped early (at least one: two hopeless lrs are in the grid); the API is restarted
    while trials run and the sweep goes on from the database, ending with eight trials, each lr once, and a best
    better than the worst."""
    lrs = [3e-3, 1e-3, 1e-7, 3e-4, 2e-7, 1e-4, 5e-3, 1e-5]
    doc = {
        "name": "lr8",
        "spec": {"algorithm": "sft", "model": TINY, "data": {"source": "builtin:arithmetic", "eval_fraction": 0.1}},
        "space": {"train.lr": {"type": "categorical", "choices": lrs}},
        "method": "grid",
        "metric": "eval/loss",
        "trials": 8,
        "parallel": 2,
        "early_stopping": {"method": "median", "min_steps": 10, "min_trials": 2},
    }
    doc["spec"]["train"] = {"steps": 80, "batch_size": 16, "eval_every": 10, "log_every": 10, "checkpoint_every": None}
    created = flows.http.post("/sweeps", json=doc)
    assert created.status_code == 201, created.text
    sweep_id = created.json()["id"]
    until(
        "three trials ended",
        lambda: sum(t["state"] != "running" for t in flows.http.get(f"/sweeps/{sweep_id}").json()["trial_list"]) >= 3,
    )
    flows.restart_api(down_s=2)
    final = until(
        "the sweep", lambda: (s := flows.http.get(f"/sweeps/{sweep_id}").json())["status"] != "running" and s, timeout=400
    )
    trials = final["trial_list"]
    assert final["status"] == "succeeded" and sorted(t["params"]["train.lr"] for t in trials) == sorted(lrs)
    pruned = [t for t in trials if t["state"] == "pruned"]
    assert pruned and all(t["reason"].startswith("stopped early at step") for t in pruned), trials
    # A pruned trial's run is stopped; one whose trainer reached its last step before the stop arrived ends as it did.
    ended = {
        t["number"]: until(
            "pruned runs end", lambda t=t: (r := flows.run(t["run_id"]))["status"] in ("cancelled", "succeeded") and r
        )
        for t in pruned
    }
    assert any(r["status"] == "cancelled" for r in ended.values()), ended
    scored = [t["value"] for t in trials if t["state"] == "complete"]
    assert final["best_value"] == min(scored) < max(scored)


def test_alerts_on_a_nan_run_and_on_grpo_groups_without_variance_reach_a_webhook_once_after_a_retry(flows: Stack) -> None:
    """Two rules post to a receiver that refuses each path's first POST: the NaN run's alert (train.lr 1e30) and
    the GRPO detector's (one-token answers to arithmetic all score 0) are each delivered once, on the second try."""
    receiver = Receiver(fail_first=True)
    try:
        rules = [
            {
                "name": "nan",
                "condition": {"kind": "nonfinite", "metric": "train/loss"},
                "actions": {"webhook": f"{receiver.url}/nan"},
            },
            {
                "name": "flat-groups",
                "condition": {"kind": "detector", "name": "all_groups_equal", "params": {"steps": 3}},
                "actions": {"webhook": f"{receiver.url}/flat"},
            },
        ]
        for rule in rules:
            assert flows.http.post("/alert-rules", json=rule).status_code == 201
        nan = {"name": "nan-run", "algorithm": "sft", "model": TINY, "data": {"source": "builtin:tiny-sft"}}
        nan["train"] = {"steps": 20, "batch_size": 4, "lr": 1e30}
        grpo = {"name": "flat", "algorithm": "grpo", "model": TINY, "reward": {"kind": "builtin", "name": "arithmetic"}}
        grpo |= {"data": {"source": "builtin:arithmetic"}, "train": {"steps": 6, "batch_size": 8, "eval_every": None}}
        grpo["grpo"] = {"group_size": 4, "gen": {"max_new_tokens": 1}, "samples_to_log": 0}
        runs = [flows.submit(nan), flows.submit(grpo)]

        def delivered() -> list[dict]:
            found = [
                a
                for r in runs
                for a in flows.http.get("/alerts", params={"run_id": r}).json()["items"]
                if a["delivery"] == "delivered"
            ]
            return found if len(found) == 2 else []

        alerts = until("both alerts delivered", delivered, timeout=180)
        assert {a["name"] for a in alerts} == {"nan", "flat-groups"}
        for alert in alerts:
            assert [(d["attempt"], d["ok"], d["error"]) for d in alert["deliveries"]] == [(1, False, "HTTP 503"), (2, True, None)]
        time.sleep(3)  # more ticks: nothing is sent again
        assert sorted(path for path, _ in receiver.posts) == ["/flat", "/flat", "/nan", "/nan"]
    finally:
        receiver.close()
