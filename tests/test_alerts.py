"""Alerts: the detectors and conditions as pure functions, then rules through the API against runs a worker
reports to, with deliveries to a real HTTP receiver (a Slack-compatible webhook, and apprise's json:// service)."""

from __future__ import annotations

import logging
import math
from datetime import timedelta

import pytest
from sqlalchemy import event, select

from api.alerts import delivery
from api.alerts import service as alerts
from api.alerts.detectors import DETECTORS, change, nonfinite, threshold
from api.models import Alert, Run
from api.models.base import utcnow
from api.reconcile import Reconciler
from api.unit_of_work import transaction
from tests.harness.factories import ApiWorker, create_run
from tests.harness.receiver import Receiver

# An RL run, which gets the built-in detectors
GRPO = {
    "algorithm": "grpo",
    "reward": {"kind": "builtin", "name": "arithmetic"},
    "data": {"source": "builtin:arithmetic"},
    "grpo": {"group_size": 4, "gen": {"max_new_tokens": 8}},
}

# --- the conditions and detectors, pure ---


def test_conditions_read_the_recent_points():
    assert threshold([1, 9, 7], ">", 5, 2, "train/loss").firing  # mean of 9 and 7
    assert not threshold([9, 1], ">", 5, 2, "train/loss").firing
    assert not threshold([9], ">", 5, 2, "train/loss").firing  # fewer points than the window: no verdict yet
    fell = change([1.0, 0.9, 0.4], "<", -0.5, 2, "reward/mean")
    assert fell.firing and fell.message == "reward/mean moved by -0.6 over 2 points (< -0.5)"
    assert nonfinite({"a": [1.0], "b": [1.0, math.nan]}).message == "b is NaN"


@pytest.mark.parametrize(
    ("name", "fires", "quiet", "params"),
    [
        ("all_groups_equal", {"grpo/zero_std_groups": [0.5] + [1.0] * 5}, {"grpo/zero_std_groups": [1.0] * 4 + [0.9]}, {}),
        ("kl_unbounded", {"grpo/kl": [0.1, 12.0]}, {"grpo/kl": [0.1, 0.3, 0.2] * 4}, {}),
        ("kl_unbounded", {"ppo/kl": [0.05 * i for i in range(12)]}, {"ppo/kl": [0.5] * 12}, {}),
        (
            "length_at_max",
            {"gen/response_length": [31.9] * 5},
            {"gen/response_length": [31.9] * 4 + [20.0]},
            {"max_new_tokens": 32},
        ),
        ("entropy_collapse", {"ppo/entropy": [1.0, 0.01]}, {"ppo/entropy": [0.01, 1.0]}, {}),
        ("mostly_truncated", {"gen/truncated": [0.2] + [0.8] * 5}, {"gen/truncated": [0.8] * 4 + [0.3]}, {}),
        ("prompts_cut", {"gen/prompt_cut": [0.0, 0.25]}, {"gen/prompt_cut": [0.5, 0.0]}, {}),
        ("prompts_cut", {"gen/prompt_cut": [0.3, 0.3]}, {"gen/prompt_cut": [0.3, 0.1]}, {"bound": 0.2, "steps": 2}),
        ("clipping_heavily", {"grpo/clipfrac": [0.4] * 5}, {"grpo/clipfrac": [0.4] * 4 + [0.1]}, {}),
        ("clipping_heavily", {"ppo/clipfrac": [0.2] * 5}, {"ppo/clipfrac": [0.05] * 5}, {"bound": 0.1}),
        ("critic_blind", {"ppo/explained_variance": [0.5] + [-0.2] * 10}, {"ppo/explained_variance": [-0.2] * 9 + [0.1]}, {}),
        ("async_idle", {"async/trainer_idle": [0.9] * 9 + [0.5]}, {"async/trainer_idle": [0.9] * 5 + [0.5] * 5}, {}),
        ("async_idle", {"async/generator_idle": [0.0] + [0.95] * 10}, {"async/generator_idle": [0.95] * 9}, {}),
        ("async_idle", {"async/trainer_idle": [0.6] * 4}, {"async/trainer_idle": [0.6] * 3 + [0.1]}, {"bound": 0.5, "window": 4}),
        (
            "reward_falling",
            {"reward/mean": [0.0] * 10 + [1.0] * 10 + [0.2] * 10},
            {"reward/mean": [0.0] * 10 + [1.0] * 10 + [0.8] * 10},
            {},
        ),
    ],
)
def test_each_detector_fires_on_its_pattern_and_not_on_a_healthy_run(name, fires, quiet, params):
    detector = DETECTORS[name]
    verdict = detector.check(fires, params)
    assert verdict.firing and verdict.message
    assert not detector.check(quiet, params).firing
    assert not detector.check({}, params).firing  # a run that has not logged the key yet


def test_reward_falling_fires_once_about_its_line_and_clears_only_on_recovery():
    """A smoothed reward that hovers about the half-way line fires, then does not clear (nor fire anew) until it has
    won back half of what it lost: the alert no longer opens and closes with each wobble."""
    check = DETECTORS["reward_falling"].check
    rise = [0.0] * 10 + [1.0] * 10  # gained 1.0: fires below 0.5, clears at or above 0.75

    def at(level: float) -> object:
        return check({"reward/mean": rise + [level] * 10}, {})

    assert at(0.45).firing and at(0.45).cleared is False
    hovering = at(0.55)  # back above the firing line: not firing, not cleared
    assert not hovering.firing and hovering.cleared is False
    assert at(0.8).cleared is True and not at(0.8).firing


def test_async_idle_says_which_side_waits_how_long_and_what_would_help():
    """The side that idles more is named with its mean share: a waiting trainer points at generation, a waiting
    generator at training (where more staleness buys nothing)."""
    check = DETECTORS["async_idle"].check
    trainer = check({"async/trainer_idle": [0.85] * 10, "async/generator_idle": [0.0] * 10}, {})
    assert trainer.firing and trainer.message.startswith(
        "the trainer sat waiting for the generator 85% of the time over the last 10 steps (async/trainer_idle): "
        "generation is the bottleneck"
    )
    assert "gen.engine: continuous or vllm" in trainer.message and "larger grpo.max_staleness" in trainer.message
    generator = check({"async/trainer_idle": [0.82] * 10, "async/generator_idle": [0.9] * 10}, {})
    assert generator.firing and "generator sat waiting on the trainer 90%" in generator.message
    assert "training is the bottleneck" in generator.message and "max_staleness above 1 buys nothing" in generator.message
    assert not check({"async/trainer_idle": [math.nan] + [0.9] * 9}, {}).firing  # a NaN is no idle time: 9 points


# --- through the API ---


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def watch(app) -> None:
    Reconciler(app.state.sessionmaker, lambda *_: None).watch()


def alerts_of(client, run_id: int) -> list[dict]:
    return client.get("/api/v1/alerts", params={"run_id": run_id}).json()["items"]


SECRET = "T0KEN-abc123-secret"


def test_a_threshold_rule_opens_delivers_to_a_webhook_and_apprise_and_resolves(client, db, app, receiver, caplog):
    worker = ApiWorker(client)
    run = create_run(client)
    rule = {
        "name": "loss-high",
        "condition": {"kind": "threshold", "metric": "train/loss", "op": ">", "value": 5, "window": 2},
        "actions": {
            "webhook": f"{receiver.url}/hooks/{SECRET}",
            "notify": [f"json://127.0.0.1:{receiver.url.rsplit(':', 1)[1]}/apprise/{SECRET}"],
        },
    }
    created = client.post("/api/v1/alert-rules", json=rule)
    assert created.status_code == 201, created.text
    assert created.json()["actions"] == {"webhook": "http://127.0.0.1/…", "notify": ["json://127.0.0.1/…"], "stop_run": False}
    worker.start(run["id"])
    worker.log(run["id"], "train/loss", {1: 3.0, 2: 6.0})
    caplog.set_level(logging.DEBUG)
    watch(app)
    assert alerts_of(client, run["id"]) == []  # the mean of the last two is 4.5
    worker.log(run["id"], "train/loss", {3: 7.0})
    watch(app)
    [alert] = alerts_of(client, run["id"])
    assert (alert["name"], alert["state"], alert["source"]) == ("loss-high", "open", f"rule:{created.json()['id']}")
    assert alert["message"] == "mean of the last 2 points of train/loss is 6.5 (> 5)"
    assert alert["delivery"] == "delivered" and {d["target"] for d in alert["deliveries"]} == {"webhook", "notify 1"}
    paths = {path.rsplit("/", 2)[-2]: body for path, body in receiver.posts}
    assert paths["hooks"]["text"] == f"[rlplane] loss-high on run {run['id']} (sft-tiny, project default): {alert['message']}"
    assert paths["hooks"]["alert"]["run_id"] == run["id"]
    assert alert["message"] in paths["apprise"]["message"]
    assert SECRET not in caplog.text and SECRET not in client.get("/api/v1/alert-rules").text
    watch(app)
    assert len(receiver.posts) == 2  # open already: not again
    worker.log(run["id"], "train/loss", {4: 1.0, 5: 1.0})
    watch(app)
    [alert] = alerts_of(client, run["id"])
    assert alert["state"] == "resolved" and alert["resolved_at"] is not None


def test_a_failed_delivery_is_recorded_retried_with_backoff_then_given_up(client, db, app, receiver):
    receiver.status = 500
    worker = ApiWorker(client)
    run = create_run(client)
    rule = {"name": "any-nan", "condition": {"kind": "nonfinite"}, "actions": {"webhook": f"{receiver.url}/x/{SECRET}"}}
    assert client.post("/api/v1/alert-rules", json=rule).status_code == 201
    worker.start(run["id"])
    worker.log(run["id"], "train/grad_norm", {1: 1.0, 2: "NaN"})
    watch(app)
    [alert] = alerts_of(client, run["id"])
    assert alert["message"] == "train/grad_norm is NaN at step 2"
    assert alert["delivery"] == "pending" and alert["deliveries"][0]["error"] == "HTTP 500"
    stored = db.get(Alert, alert["id"])
    db.refresh(stored)
    assert 4 <= (stored.next_attempt_at - utcnow()).total_seconds() <= 5  # the first backoff
    later = utcnow()
    for _ in range(delivery.MAX_ATTEMPTS):
        later += timedelta(minutes=5)
        delivery.deliver_due(app.state.sessionmaker, now=later)
    [alert] = alerts_of(client, run["id"])
    assert alert["delivery"] == "failed" and [d["attempt"] for d in alert["deliveries"]] == [1, 2, 3, 4, 5]
    assert len(receiver.posts) == delivery.MAX_ATTEMPTS


def test_stop_run_cancels_the_run_and_a_status_rule_fires_once(client, db, app):
    worker = ApiWorker(client)
    doomed, failing = create_run(client, name="doomed"), create_run(client, name="failing")
    stop = {"name": "stop-on-nan", "run_id": doomed["id"], "condition": {"kind": "nonfinite", "metric": "train/loss"}}
    stop["actions"] = {"stop_run": True}
    assert client.post("/api/v1/alert-rules", json=stop).status_code == 201
    assert (
        client.post(
            "/api/v1/alert-rules", json={"name": "failed", "condition": {"kind": "status", "statuses": ["failed"]}}
        ).status_code
        == 201
    )
    for run in (doomed, failing):
        worker.start(run["id"])
        worker.log(run["id"], "train/loss", {1: "NaN"})
    watch(app)
    assert client.get(f"/api/v1/runs/{doomed['id']}").json()["status"] == "cancelling"
    assert db.get(Run, doomed["id"]).status_reason.startswith("stopped by alert stop-on-nan: train/loss is NaN")
    assert client.get(f"/api/v1/runs/{failing['id']}").json()["status"] == "running"  # the rule names one run
    worker.end(failing["id"], "failed")
    watch(app)
    watch(app)
    [fired] = alerts_of(client, failing["id"])
    assert (fired["name"], fired["state"]) == ("failed", "open") and fired["message"].startswith(f"run {failing['id']} failed")


def test_rl_runs_get_the_detectors_unless_the_project_mutes_one_and_stalled_runs_are_seen(client, db, app):
    worker = ApiWorker(client)
    first = create_run(client, name="grpo-a", **GRPO)
    worker.start(first["id"])
    worker.log(first["id"], "grpo/zero_std_groups", {s: 1.0 for s in range(1, 6)})
    worker.log(first["id"], "gen/response_length", {s: 8.0 for s in range(1, 6)})
    watch(app)
    fired = {a["name"]: a for a in alerts_of(client, first["id"])}
    assert set(fired) == {"all_groups_equal", "length_at_max"}, fired
    assert fired["all_groups_equal"]["source"] == "detector:all_groups_equal" and fired["all_groups_equal"]["delivery"] == "none"
    assert "max_new_tokens 8" in fired["length_at_max"]["message"]

    muted = client.post(
        "/api/v1/alert-rules", json={"name": "no-equal-groups", "condition": {"kind": "detector", "name": "all_groups_equal"}}
    )
    assert client.post(f"/api/v1/alert-rules/{muted.json()['id']}/mute", json={"muted": True}).json()["muted"] is True
    second = create_run(client, name="grpo-b", **GRPO)
    worker.start(second["id"])
    worker.log(second["id"], "grpo/zero_std_groups", {s: 1.0 for s in range(1, 6)})
    watch(app)
    assert alerts_of(client, second["id"]) == []

    assert (
        client.post("/api/v1/alert-rules", json={"name": "stuck", "condition": {"kind": "stalled", "minutes": 5}}).status_code
        == 201
    )
    with transaction(app.state.sessionmaker) as uow:
        alerts.evaluate(uow.session, now=utcnow() + timedelta(minutes=10))
    assert "stuck" in {a["name"] for a in alerts_of(client, second["id"])}
    names = {d["name"] for d in client.get("/api/v1/alert-detectors").json()["items"]}
    assert names == set(DETECTORS)


def test_a_rule_lowers_async_idles_bound_for_its_project(client, db, app):
    """An asynchronous GRPO run whose trainer waits 60% of the time is no alert by default (bound 0.8); a project rule
    with bound 0.5 makes it one, under the rule's name."""
    worker = ApiWorker(client)
    run = create_run(client, name="grpo-async", **GRPO)
    worker.start(run["id"])
    worker.log(run["id"], "async/trainer_idle", {s: 0.6 for s in range(1, 11)})
    worker.log(run["id"], "async/generator_idle", {s: 0.0 for s in range(1, 11)})
    watch(app)
    assert alerts_of(client, run["id"]) == []
    rule = {"name": "idle", "condition": {"kind": "detector", "name": "async_idle", "params": {"bound": 0.5}}}
    assert client.post("/api/v1/alert-rules", json=rule).status_code == 201
    watch(app)
    [alert] = alerts_of(client, run["id"])
    assert alert["name"] == "idle" and "the trainer sat waiting for the generator 60%" in alert["message"], alert


def test_a_tick_reads_each_runs_series_in_one_statement_and_sees_their_latest_points(client, db, app):
    """Every key a run's rules and detectors read comes in one statement per run (a round trip per key per run
    before), each key's latest SERIES_POINTS points in step order: a window over the last points of a 300-point
    series sees steps 298-300, and a change over 199 points spans the 200 read."""
    worker = ApiWorker(client)
    grpo = {"algorithm": "grpo", "reward": {"kind": "builtin", "name": "arithmetic"}, "grpo": {"group_size": 4}}
    rules = {"latest": {"kind": "threshold", "metric": "train/loss", "op": ">", "value": 298.5, "window": 3}}
    rules["spanned"] = {"kind": "change", "metric": "train/loss", "op": ">", "value": 198.5, "window": 199}
    for name, condition in rules.items():
        assert client.post("/api/v1/alert-rules", json={"name": name, "condition": condition}).status_code == 201
    runs = [create_run(client, name=f"grpo-{i}", data={"source": "builtin:arithmetic"}, **grpo) for i in range(2)]
    for run in runs:
        worker.start(run["id"])
        worker.log(run["id"], "train/loss", {s: float(s) for s in range(1, 301)})
        worker.log(run["id"], "grpo/zero_std_groups", {s: 1.0 for s in range(1, 6)})
    statements: list[str] = []

    def seen(conn, cursor, statement, *args) -> None:
        if "FROM metrics" in statement:
            statements.append(statement)

    event.listen(app.state.engine, "before_cursor_execute", seen)
    try:
        watch(app)
    finally:
        event.remove(app.state.engine, "before_cursor_execute", seen)
    assert len(statements) == len(runs), statements
    for run in runs:
        fired = {a["name"]: a["message"] for a in alerts_of(client, run["id"])}
        assert set(fired) == {"latest", "spanned", "all_groups_equal"}, fired
        assert "is 299 (> 298.5)" in fired["latest"] and "moved by +199 over 199 points" in fired["spanned"], fired


@pytest.mark.parametrize(
    ("rule", "loc"),
    [
        (
            {"name": "x", "condition": {"kind": "threshold", "metric": "a b", "op": ">", "value": 1}},
            ["body", "condition", "threshold", "metric"],
        ),
        ({"name": "x", "condition": {"kind": "nonfinite"}, "actions": {"webhook": "ftp://h/x"}}, ["body", "actions", "webhook"]),
        ({"name": "x", "condition": {"kind": "someday"}}, ["body", "condition"]),
        ({"name": "x", "condition": {"kind": "nonfinite"}, "project": "nowhere"}, ["body", "project"]),
    ],
    ids=["metric-key", "webhook-scheme", "unknown-kind", "unknown-project"],
)
def test_a_bad_rule_is_refused_at_its_field_and_nothing_is_stored(client, db, rule, loc):
    response = client.post("/api/v1/alert-rules", json=rule)
    assert response.status_code == 422, response.text
    assert any(e["loc"][: len(loc)] == loc for e in response.json()["detail"]), response.json()
    assert db.scalars(select(Alert)).all() == [] and client.get("/api/v1/alert-rules").json() == {"items": []}


def test_a_runs_alerts_close_when_it_ends_and_do_not_open_again(client, db, app):
    """A detector's and a metric rule's open alerts on an RL run close when the run ends (a reward_falling alert
    stayed open after the run succeeded); an ended run's metrics are not checked again, so none opens anew."""
    worker = ApiWorker(client)
    rule = {"name": "len", "condition": {"kind": "threshold", "metric": "gen/response_length", "op": ">", "value": 4}}
    assert client.post("/api/v1/alert-rules", json=rule).status_code == 201
    run = create_run(client, name="grpo", **GRPO)
    worker.start(run["id"])
    worker.log(run["id"], "gen/response_length", {s: 8.0 for s in range(1, 6)})
    watch(app)
    assert {(a["name"], a["state"]) for a in alerts_of(client, run["id"])} == {("len", "open"), ("length_at_max", "open")}
    worker.end(run["id"], "succeeded")
    watch(app)
    watch(app)
    assert {(a["name"], a["state"]) for a in alerts_of(client, run["id"])} == {("len", "resolved"), ("length_at_max", "resolved")}


def test_a_nan_that_ended_the_run_between_two_looks_still_fires_its_rule_once(client, db, app):
    """The run reports a NaN loss and fails on it before the reconciler looks again (a diverged run ends at once): its
    nonfinite rule fires on the ended run's last points, the alert closes with the run, and later looks open none
    anew; a metric rule that fired while the run ran does not fire again once it has ended."""
    worker = ApiWorker(client)
    for rule in (
        {"name": "nan", "condition": {"kind": "nonfinite", "metric": "train/loss"}},
        {"name": "high", "condition": {"kind": "threshold", "metric": "train/loss", "op": ">", "value": 5}},
    ):
        assert client.post("/api/v1/alert-rules", json=rule).status_code == 201
    run = create_run(client, name="diverging")
    worker.start(run["id"])
    worker.log(run["id"], "train/loss", {1: 6.0})
    watch(app)
    assert {(a["name"], a["state"]) for a in alerts_of(client, run["id"])} == {("high", "open")}
    worker.log(run["id"], "train/loss", {2: "NaN"})
    worker.end(run["id"], "failed")
    watch(app)
    watch(app)
    assert sorted((a["name"], a["state"]) for a in alerts_of(client, run["id"])) == [("high", "resolved"), ("nan", "resolved")]
