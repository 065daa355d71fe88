"""Usage at the API (api/usage/): each attempt costs its run's GPUs (or, on a CPU queue, worker slots) times its wall
time; the sum over a run's attempts is the run's, and a project's roll-up the sum of its runs', clipped to the period
asked for and spread over its hours or days; the tokens each attempt's worker said it trained on add up the same way;
the CSV says the same; nobody sees what they may not read."""

from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from api.models import RunAttempt
from tests.harness.factories import auth, create_project, create_user, spec, worker_token
from tests.test_gang import beat
from tests.test_priorities import lease

T0 = datetime(2026, 11, 2, tzinfo=UTC)  # a Monday, 00:00 UTC


def run_with_attempts(app, client, anon, token, name, project, resources, spans, tokens=()) -> int:
    """A run whose attempts ran over `spans` (hours after T0: (start, end)), each ended lost then retried; the last
    one succeeded. `tokens`: what each attempt's worker says it trained on with its end (None: nothing)."""
    train = {**spec()["train"], "batch_size": 12}
    body = spec(name=name, project=project, resources={"queue": "cpu", "max_attempts": 5, **resources}, train=train)
    run_id = client.post("/api/v1/runs", json=body).json()["id"]
    for number, _ in enumerate(spans, start=1):
        leased = lease(anon, token, run_id, "w1")
        assert leased.status_code == 200, leased.text
        status = "succeeded" if number == len(spans) else "lost"
        ended = {"attempt": number, "status": status, "reason": status}
        if number <= len(tokens) and tokens[number - 1] is not None:
            ended["tokens"] = tokens[number - 1]
        assert anon.post(f"/api/v1/runs/{run_id}/status", json=ended, headers=auth(token)).status_code == 200
    with app.state.sessionmaker() as session, session.begin():
        for number, (start, end) in enumerate(spans, start=1):
            times = {"started_at": T0 + timedelta(hours=start), "ended_at": T0 + timedelta(hours=end)}
            session.execute(update(RunAttempt).where(RunAttempt.run_id == run_id, RunAttempt.number == number).values(**times))
    return run_id


def test_usage_adds_up_over_attempts_runs_projects_and_days(app, client, anon):
    token = worker_token(client)
    create_project(client, "vision")
    a100 = {"queue": "a100", "gpus": 4}
    gpu = run_with_attempts(app, client, anon, token, "gpu-run", "vision", a100, [(0, 2), (3, 4)], tokens=[7200, None])
    cpu = run_with_attempts(app, client, anon, token, "cpu-run", "vision", {}, [(1, 1.5)])
    nlp = {"queue": "a100", "gpus": 1}
    other = run_with_attempts(app, client, anon, token, "nlp-run", "default", nlp, [(23, 25)], tokens=[1000])

    detail = client.get(f"/api/v1/runs/{gpu}").json()
    assert [a["gpu_seconds"] for a in detail["attempts"]] == [4 * 2 * 3600, 4 * 1 * 3600]
    assert [a["tokens"] for a in detail["attempts"]] == [7200, None]
    assert detail["gpu_seconds"] == sum(a["gpu_seconds"] for a in detail["attempts"]) and detail["cpu_slot_seconds"] == 0
    assert client.get(f"/api/v1/runs/{cpu}").json()["cpu_slot_seconds"] == 0.5 * 3600  # one worker slot

    week = {"since": T0.isoformat(), "until": (T0 + timedelta(days=7)).isoformat()}
    by_project = {row["key"]: row for row in client.get("/api/v1/usage", params=week).json()["data"]}
    assert (by_project["vision"]["gpu_seconds"], by_project["vision"]["cpu_slot_seconds"]) == (12 * 3600, 1800)
    assert (by_project["vision"]["runs"], by_project["vision"]["attempts"]) == (2, 3)
    # Tokens over the GPU-seconds of the attempts that said theirs (the second one did not): 7,200 / 4 GPUs x 2 h.
    assert (by_project["vision"]["tokens"], by_project["vision"]["tokens_per_gpu_second"]) == (7200, 0.25)
    assert by_project["default"]["gpu_seconds"] == 2 * 3600
    by_run = {row["key"]: row for row in client.get("/api/v1/usage", params={**week, "by": "run"}).json()["data"]}
    assert by_run[f"{gpu} gpu-run"]["gpu_seconds"] + by_run[f"{cpu} cpu-run"]["gpu_seconds"] == 12 * 3600
    by_queue = {
        row["key"]: row["gpu_seconds"] for row in client.get("/api/v1/usage", params={**week, "by": "queue"}).json()["data"]
    }
    assert by_queue == {"a100": 14 * 3600, "cpu": 0}

    # The first day alone: nlp-run's attempt is clipped at midnight; per hour, the buckets add up to the day.
    day = {"since": T0.isoformat(), "until": (T0 + timedelta(days=1)).isoformat(), "interval": "hour"}
    rows = {row["key"]: row for row in client.get("/api/v1/usage", params=day).json()["data"]}
    assert rows["default"]["gpu_seconds"] == 3600
    assert rows["default"]["tokens"] == 500  # half of its attempt's wall time falls on the first day
    assert [b["tokens"] for b in rows["vision"]["over_time"][:4]] == [3600, 3600, 0, 0]
    assert len(rows["vision"]["over_time"]) == 24
    assert sum(b["gpu_seconds"] for b in rows["vision"]["over_time"]) == rows["vision"]["gpu_seconds"] == 12 * 3600
    assert [b["gpu_seconds"] for b in rows["vision"]["over_time"][:5]] == [4 * 3600, 4 * 3600, 0, 4 * 3600, 0]

    csv = client.get("/api/v1/usage", params={**week, "format": "csv"})
    assert csv.headers["content-type"].startswith("text/csv")
    lines = csv.text.splitlines()
    assert lines[0] == "project,start,gpu_seconds,cpu_slot_seconds,tokens,attempts,runs"
    assert f'"vision",{T0.isoformat()},{12 * 3600.0},1800.0,7200,3,2' in lines

    outsider = create_user(client, "oz", roles={"default": "viewer"}, scopes=("read",))
    seen = anon.get("/api/v1/usage", params=week, headers=auth(outsider)).json()["data"]
    assert [row["key"] for row in seen] == ["default"], other
    bad = client.get("/api/v1/usage", params={"since": week["until"], "until": week["since"]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "since"]


def test_fair_share_orders_waiting_runs_of_one_priority_by_recent_use_against_each_projects_share(app, client, anon):
    """Last week vision used 4 hours of queue cpu (share 1) and nlp 6 hours (share 2: 3 hours against it); default
    none. Waiting runs of one priority start default's, then nlp's, then vision's, whatever their age; a higher
    priority still goes first, and runs of one project keep their order."""
    token = worker_token(client)
    for name in ("vision", "nlp"):
        create_project(client, name)
    assert client.patch("/api/v1/projects/nlp/scheduling", json={"share": 2}).json()["share"] == 2
    day_ago = datetime.now(UTC) - timedelta(days=1)
    for project, hours in (("vision", 4), ("nlp", 6)):
        run_id = run_with_attempts(app, client, anon, token, f"{project}-done", project, {}, [(0, 1)])
        with app.state.sessionmaker() as session, session.begin():
            span = {"started_at": day_ago, "ended_at": day_ago + timedelta(hours=hours)}
            session.execute(update(RunAttempt).where(RunAttempt.run_id == run_id).values(**span))
    names = (("vision-a", "vision"), ("nlp-a", "nlp"), ("vision-b", "vision"), ("default-a", "default"))
    waiting = {name: client.post("/api/v1/runs", json=spec(name=name, project=project)).json()["id"] for name, project in names}
    high = spec(name="vision-high", project="vision", resources={"queue": "cpu", "priority": "high"})
    urgent = client.post("/api/v1/runs", json=high).json()["id"]
    [cpu] = client.get("/api/v1/queues").json()["data"]
    assert [w["name"] for w in cpu["waiting"]] == ["vision-high", "default-a", "nlp-a", "vision-a", "vision-b"]

    beat(anon, token, "node-a")  # one idle worker: it is kept for the run ranked first
    held = lease(anon, token, waiting["vision-a"], "node-a")
    assert held.status_code == 409 and f"held for run {urgent}" in held.text
    assert lease(anon, token, urgent, "node-a").status_code == 200
    beat(anon, token, "node-b")
    held = lease(anon, token, waiting["nlp-a"], "node-b")
    assert held.json()["detail"] == (
        f"worker node-b is held for run {waiting['default-a']}, a run of a project that has used less of the queue "
        "against its share (fair share)"
    )
    assert lease(anon, token, waiting["default-a"], "node-b").status_code == 200
