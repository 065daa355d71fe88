"""Priorities and preemption at the API (api/runs/priorities.py, api/runs/preemption.py): who may ask for what, the
order waiting runs start in, which running run is preempted for which waiting one and when, and how the preempted
attempt ends. The real processes (a worker handing a run back, the run resuming) are in tests/test_preemption.py."""

from datetime import timedelta

from sqlalchemy import select, update

from api.models import Run, RunAttempt
from api.models.base import utcnow
from tests.harness.factories import auth, create_run, create_user, spec, worker_token
from tests.test_gang import Broker, beat, reconciler


def submit(client, name: str, priority=None, headers=None, **resources):
    body = spec(name=name, resources={"queue": "cpu", **({"priority": priority} if priority is not None else {}), **resources})
    return client.post("/api/v1/runs", json=body, headers=headers or {})


def lease(anon, token: str, run_id: int, worker: str):
    return anon.post(f"/api/v1/runs/{run_id}/lease", json={"worker": worker}, headers=auth(token))


def running(anon, token: str, run_id: int, attempt: int = 1) -> None:
    answer = anon.post(f"/api/v1/runs/{run_id}/status", json={"attempt": attempt, "status": "running"}, headers=auth(token))
    assert answer.status_code == 200, answer.text


def test_who_may_ask_for_a_priority_and_what_a_run_without_one_gets(client, anon):
    member = create_user(client, "mia", roles={"default": "member"})
    boss = create_user(client, "ada", roles={"default": "admin"}, scopes=("admin",))
    refused = submit(anon, "urgent-by-a-member", "high", auth(member))
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        "resources.priority 75 (high) is above what members of project default may ask for (50 (normal)): ask one of "
        "its admins to submit it, or lower resources.priority"
    )
    assert submit(anon, "normal-by-a-member", "normal", auth(member)).json()["priority"] == 50
    assert submit(anon, "urgent-by-an-admin", "urgent", auth(boss)).json()["priority"] == 100
    bad = submit(client, "vip", "vip")
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "resources", "priority"], bad.text

    policy = {"default_priority": 25, "member_max_priority": 75}
    assert anon.patch("/api/v1/projects/default/scheduling", json=policy, headers=auth(boss)).status_code == 403  # site's
    project = client.patch("/api/v1/projects/default/scheduling", json=policy).json()
    assert (project["default_priority"], project["member_max_priority"]) == (25, 75)
    assert submit(anon, "unnamed", headers=auth(member)).json()["priority"] == 25
    assert submit(anon, "high-by-a-member", "high", auth(member)).status_code == 201
    assert client.get("/api/v1/runs", params={"status": "queued"}).json()["data"][0]["priority"] in (25, 50, 75, 100)


def test_a_worker_leases_the_higher_priority_run_first_and_a_gang_ranked_ahead_holds_it(app, client, anon):
    token = worker_token(client)
    beat(anon, token, "node-a")
    low = submit(client, "low", "low").json()
    high = submit(client, "high", "high").json()
    refused = lease(anon, token, low["id"], "node-a")
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        f"worker node-a is held for run {high['id']}, a run of priority 75 (high), above this run's 25 (low)"
    )
    beat(anon, token, "node-b")  # another idle worker can take the high one: the low one may go
    assert lease(anon, token, low["id"], "node-a").status_code == 200
    assert lease(anon, token, high["id"], "node-b").status_code == 200

    # A newer gang of a higher priority that the queue can hold keeps the freed workers from an older one-node run.
    for worker in ("node-a", "node-b"):
        beat(anon, token, worker)
    older = submit(client, "older-normal").json()
    gang = submit(client, "gang-high", "high", nodes=2, max_attempts=1).json()
    held = lease(anon, token, older["id"], "node-a")
    assert (
        held.status_code == 409
        and f"held for run {gang['id']}, a run of priority 75 (high), above this run's 50 (normal) that waits" in held.text
    )


def test_a_waiting_run_preempts_the_lowest_priority_run_that_has_run_long_enough(app, client, anon):
    token, broker = worker_token(client), Broker()
    beat(anon, token, "node-a")
    beat(anon, token, "node-b")
    low, normal = submit(client, "low", "low").json(), submit(client, "normal").json()
    assert lease(anon, token, low["id"], "node-b").status_code == 200
    assert lease(anon, token, normal["id"], "node-a").status_code == 200
    running(anon, token, low["id"])
    running(anon, token, normal["id"])
    beat(anon, token, "node-a", current_run_id=normal["id"], current_attempt=1)
    beat(anon, token, "node-b", current_run_id=low["id"], current_attempt=1)
    urgent = submit(client, "urgent", "urgent").json()
    check = reconciler(app, broker, preempt_after_s=60.0)

    check.preempt()  # both started just now: neither has run 60 s
    assert client.get(f"/api/v1/runs/{low['id']}").json()["preempted_by"] is None
    with app.state.sessionmaker() as session, session.begin():
        session.execute(update(RunAttempt).values(started_at=utcnow() - timedelta(seconds=61)))
    check.preempt()
    check.preempt()  # one victim is enough: a second pass picks no more while it hands back
    shown = {r: client.get(f"/api/v1/runs/{r}").json() for r in (low["id"], normal["id"])}
    assert shown[low["id"]]["preempted_by"] == urgent["id"] and shown[normal["id"]]["preempted_by"] is None
    assert shown[low["id"]]["status_reason"] == f"preempted by run {urgent['id']} (priority 100 (urgent)): handing back"
    answer = beat(anon, token, "node-b", current_run_id=low["id"], current_attempt=1)
    assert (answer["current_run_preempted_by"], answer["preempt_grace_s"]) == (urgent["id"], 120.0)
    assert beat(anon, token, "node-a", current_run_id=normal["id"], current_attempt=1)["current_run_preempted_by"] is None

    # The worker hands the run back; it waits below the urgent run, which the freed worker takes.
    reason = f"handed back: preempted by run {urgent['id']}; checkpointed at step 4, where the next attempt resumes"
    end = {"attempt": 1, "status": "lost", "reason": reason, "handed_back": True, "last_step": 4}
    assert anon.post(f"/api/v1/runs/{low['id']}/status", json=end, headers=auth(token)).status_code == 200
    detail = client.get(f"/api/v1/runs/{low['id']}").json()
    assert detail["status"] == "queued" and detail["preempted_by"] is None
    [attempt] = detail["attempts"]
    assert attempt["preempted_by"] == urgent["id"] and attempt["handed_back"] and attempt["end_reason"] == reason
    beat(anon, token, "node-b")
    assert lease(anon, token, low["id"], "node-b").status_code == 409
    assert lease(anon, token, urgent["id"], "node-b").status_code == 200
    with app.state.sessionmaker() as session:
        assert session.scalar(select(Run.preempted_by).where(Run.id == normal["id"])) is None


def test_nothing_is_preempted_for_an_equal_priority_or_a_run_that_can_start(app, client, anon):
    token, broker = worker_token(client), Broker()
    beat(anon, token, "node-a")
    first = submit(client, "first").json()
    assert lease(anon, token, first["id"], "node-a").status_code == 200
    running(anon, token, first["id"])
    beat(anon, token, "node-a", current_run_id=first["id"], current_attempt=1)
    submit(client, "second")  # equal priority: it waits its turn
    check = reconciler(app, broker, preempt_after_s=0.0)
    check.preempt()
    assert client.get(f"/api/v1/runs/{first['id']}").json()["preempted_by"] is None
    beat(anon, token, "node-b")
    create_run(client, name="high-with-room", resources={"queue": "cpu", "priority": "high"})  # node-b is idle
    check.preempt()
    assert client.get(f"/api/v1/runs/{first['id']}").json()["preempted_by"] is None
