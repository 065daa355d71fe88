"""Worker heartbeats: capacity and GPUs recorded, run progress forwarded, other projects' runs hidden."""

from datetime import timedelta

from sqlalchemy import select

from api.models import Worker
from api.models.base import utcnow
from tests.harness.factories import auth, create_project, create_run, create_user, worker_token

GPU = {"index": 0, "name": "NVIDIA H100", "memory_total_mb": 81559, "memory_used_mb": 1024, "utilization": 37.5}


def test_heartbeat_upserts_and_lists(client, anon, db):
    token = worker_token(client)
    beat = {"name": "node-1", "hostname": "gpu-01", "queues": ["gpu"], "capacity": 2, "gpus": [GPU]}
    first = anon.post("/api/v1/workers/heartbeat", json=beat, headers=auth(token))
    assert first.status_code == 200 and first.json()["gpus"] == [GPU]
    anon.post("/api/v1/workers/heartbeat", json={**beat, "capacity": 1}, headers=auth(token))
    listed = client.get("/api/v1/workers").json()
    assert listed["count"] == 1 and listed["data"][0]["capacity"] == 1 and listed["data"][0]["seconds_since_heartbeat"] < 60


def test_heartbeat_forwards_the_step_of_a_leased_run(client, anon, db):
    token = worker_token(client)
    run = create_run(client)
    beat = {"name": "n", "queues": ["cpu"], "current_run_id": run["id"], "last_step": 12}
    assert anon.post("/api/v1/workers/heartbeat", json=beat, headers=auth(token)).status_code == 403  # not leased
    anon.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "n"}, headers=auth(token))
    assert anon.post("/api/v1/workers/heartbeat", json=beat, headers=auth(token)).status_code == 200
    assert client.get(f"/api/v1/runs/{run['id']}").json()["last_step"] == 12


def test_runs_outside_your_projects_are_hidden(client, anon, db):
    token = worker_token(client)
    create_project(client, "secret")
    run = create_run(client, project="secret")
    anon.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "n"}, headers=auth(token))
    anon.post(
        "/api/v1/workers/heartbeat", json={"name": "n", "queues": ["cpu"], "current_run_id": run["id"]}, headers=auth(token)
    )
    viewer = create_user(client, "v", roles={"default": "viewer"}, scopes=("read",))
    seen = anon.get("/api/v1/workers", headers=auth(viewer)).json()["data"][0]
    assert seen["name"] == "n" and seen["current_run_id"] is None
    assert client.get("/api/v1/workers").json()["data"][0]["current_run_id"] == run["id"]


def test_bad_heartbeats(client, anon, db):
    token = worker_token(client)
    assert anon.post("/api/v1/workers/heartbeat", json={"name": "n", "queues": []}, headers=auth(token)).status_code == 422
    bad_gpu = {"name": "n", "queues": ["gpu"], "gpus": [{**GPU, "utilization": 250}]}
    assert anon.post("/api/v1/workers/heartbeat", json=bad_gpu, headers=auth(token)).status_code == 422
    assert client.post("/api/v1/workers/heartbeat", json={"name": "n", "queues": ["cpu"]}).status_code == 403


def test_a_silent_worker_is_flagged_stale(client, anon, db, app):
    token = worker_token(client)
    for name in ("fresh", "silent"):
        anon.post("/api/v1/workers/heartbeat", json={"name": name, "queues": ["cpu"]}, headers=auth(token))
    silent = db.scalar(select(Worker).where(Worker.name == "silent"))
    silent.last_heartbeat = utcnow() - timedelta(seconds=app.state.settings.lost_after_s + 5)
    db.commit()
    listed = {w["name"]: w for w in client.get("/api/v1/workers").json()["data"]}
    assert listed["fresh"]["stale"] is False and listed["silent"]["stale"] is True
    assert listed["silent"]["seconds_since_heartbeat"] > app.state.settings.lost_after_s


def test_a_worker_back_under_its_name_without_its_run_loses_the_run(client, anon, db, app):
    """`rlplane up` names its workers local-1, local-2, ... on every start: a worker stopped at once (a crash, a cold
    stop) comes back under the same name and heartbeats, so it is never silent. Its heartbeats holding no run, sent
    well after it took one, end that attempt at once: requeued, or, being cancelled, cancelled (it stayed
    `cancelling` for good before). A heartbeat sent within the lease's first seconds holding nothing ends nothing."""
    from api.models import RunAttempt
    from api.reconcile import Reconciler
    from api.workers.holding import HOLD_GRACE_S

    token = worker_token(client)
    running, cancelling = create_run(client, name="running")["id"], create_run(client, name="cancelling")["id"]
    for run_id, worker in ((running, "local-1"), (cancelling, "local-2")):
        assert anon.post(f"/api/v1/runs/{run_id}/lease", json={"worker": worker}, headers=auth(token)).status_code == 200
        beat = {"name": worker, "queues": ["cpu"], "current_run_id": run_id}
        assert anon.post("/api/v1/workers/heartbeat", json=beat, headers=auth(token)).status_code == 200
    assert client.post(f"/api/v1/runs/{cancelling}/cancel").json()["status"] == "cancelling"
    reconciler = Reconciler(app.state.sessionmaker, lambda *_: None)

    def back_without_runs() -> None:
        for worker in ("local-1", "local-2"):
            beat = {"name": worker, "queues": ["cpu"]}
            assert anon.post("/api/v1/workers/heartbeat", json=beat, headers=auth(token)).status_code == 200
        reconciler.find_lost()

    back_without_runs()  # within the grace: a heartbeat built before the worker noted its lease
    statuses = {r["name"]: r["status"] for r in client.get("/api/v1/runs").json()["data"]}
    assert statuses == {"running": "starting", "cancelling": "cancelling"}
    for attempt in db.scalars(select(RunAttempt)):
        attempt.started_at -= timedelta(seconds=HOLD_GRACE_S + 1)
    db.commit()
    back_without_runs()
    first = client.get(f"/api/v1/runs/{running}").json()
    assert first["status"] == "queued", first["status_reason"]
    reason = first["attempts"][0]["end_reason"]
    assert reason == "lost: worker local-1 is back without it (its heartbeats say it holds no run: restarted, or stopped at once)"
    second = client.get(f"/api/v1/runs/{cancelling}").json()
    assert second["status"] == "cancelled" and second["status_reason"].endswith("it was being cancelled")


def test_a_worker_silent_for_a_day_is_dropped_from_the_list(client, anon, db, app):
    """Listed stale first, dropped once silent for forget_workers_after_s (a removed node stayed listed for ever);
    one that still holds a run stays until the run is found lost; one that comes back is listed again."""
    from api.reconcile import Reconciler

    token = worker_token(client)
    for name in ("live", "gone", "holding"):
        anon.post("/api/v1/workers/heartbeat", json={"name": name, "queues": ["cpu"]}, headers=auth(token))
    run = create_run(client)
    anon.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "holding"}, headers=auth(token))
    beat = {"name": "holding", "queues": ["cpu"], "current_run_id": run["id"]}
    assert anon.post("/api/v1/workers/heartbeat", json=beat, headers=auth(token)).status_code == 200
    day_ago = utcnow() - timedelta(seconds=app.state.settings.forget_workers_after_s + 60)
    for name in ("gone", "holding"):
        db.scalar(select(Worker).where(Worker.name == name)).last_heartbeat = day_ago
    db.commit()
    Reconciler(app.state.sessionmaker, lambda *_: None).forget_gone_workers()
    assert [w["name"] for w in client.get("/api/v1/workers").json()["data"]] == ["holding", "live"]
    anon.post("/api/v1/workers/heartbeat", json={"name": "gone", "queues": ["cpu"]}, headers=auth(token))
    assert [w["name"] for w in client.get("/api/v1/workers").json()["data"]] == ["gone", "holding", "live"]
