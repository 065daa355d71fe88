"""The dispatcher hears of a queued run once its transaction has committed, once per transaction, whichever path queued
it (submit, resume, a worker's lost report, the reconciler's requeue); a rolled-back request never wakes it."""

import time

import pytest
from sqlalchemy import select

from api.exceptions import Conflict
from api.models import Run
from api.reconcile import Reconciler
from tests.harness.factories import auth, create_run, spec, worker_token


class Dispatcher:
    """Stands in for the reconciler's nudge and notes what another connection sees at that moment: the commit's rows."""

    def __init__(self, app) -> None:
        self.factory = app.state.sessionmaker
        self.seen: list[dict[int, str]] = []

    def nudge(self) -> None:
        with self.factory() as session:
            self.seen.append(dict(session.execute(select(Run.id, Run.status)).all()))


@pytest.fixture
def dispatcher(app, client, monkeypatch) -> Dispatcher:
    recorder = Dispatcher(app)
    monkeypatch.setattr(app.state, "reconciler", recorder)  # after the client's startup, which set it to None
    return recorder


def _lease(client, run_id: int, token: str) -> None:
    assert client.post(f"/api/v1/runs/{run_id}/lease", json={"worker": "w1"}, headers=auth(token)).status_code == 200


def test_a_submit_nudges_once_after_its_commit(client, dispatcher):
    run = create_run(client)
    assert dispatcher.seen == [{run["id"]: "queued"}]


def test_a_resume_nudges_once_after_its_commit(client, dispatcher):
    run = create_run(client)
    assert client.post(f"/api/v1/runs/{run['id']}/cancel").json()["status"] == "cancelled"
    assert client.post(f"/api/v1/runs/{run['id']}/resume").status_code == 200
    assert dispatcher.seen == [{run["id"]: "queued"}, {run["id"]: "queued"}]


def test_leases_cancels_and_reads_do_not_nudge(client, dispatcher):
    token, run = worker_token(client), create_run(client)
    dispatcher.seen.clear()
    _lease(client, run["id"], token)
    assert client.get(f"/api/v1/runs/{run['id']}").status_code == 200
    assert client.post(f"/api/v1/runs/{run['id']}/cancel").json()["status"] == "cancelling"
    assert dispatcher.seen == []


def test_a_lost_report_requeues_and_nudges_once(client, dispatcher):
    token, run = worker_token(client), create_run(client)
    _lease(client, run["id"], token)
    lost = {"attempt": 1, "status": "lost", "reason": "worker shutting down", "handed_back": True}
    assert client.post(f"/api/v1/runs/{run['id']}/status", json=lost, headers=auth(token)).json()["status"] == "queued"
    assert dispatcher.seen == [{run["id"]: "queued"}, {run["id"]: "queued"}]


def test_a_rolled_back_request_does_not_nudge(client, dispatcher, db, monkeypatch):
    def fails_after_the_run_was_queued(*_args, **_kwargs):
        raise Conflict("refused after the service had queued the run")

    monkeypatch.setattr("api.runs.endpoints.views.run_detail", fails_after_the_run_was_queued)
    response = client.post("/api/v1/runs", json=spec())
    assert response.status_code == 409 and response.json() == {"detail": "refused after the service had queued the run"}
    assert db.scalar(select(Run.id)) is None
    assert dispatcher.seen == []


def test_the_reconciler_nudges_after_committing_a_requeue(app, client):
    token, run = worker_token(client), create_run(client)
    _lease(client, run["id"], token)
    reconciler = Reconciler(app.state.sessionmaker, lambda *_: None, lost_after_s=0.001)
    recorder = Dispatcher(app)
    reconciler.nudge = recorder.nudge
    time.sleep(0.01)  # silent for longer than lost_after_s since the reconciler's start
    reconciler.find_lost()
    assert recorder.seen == [{run["id"]: "queued"}]
