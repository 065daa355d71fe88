"""Server-Sent Events: resumable with Last-Event-ID, and fanned out across API processes."""

import json
import queue
import threading
import time

import httpx
import pytest
from sqlalchemy import func, select

from api.models import Metric
from tests.conftest import create_postgres_database, drop_postgres_database
from tests.factories import ADMIN_TOKEN, auth, create_run, spec
from tests.servers import api_processes


def parse(stream_text: str) -> list[dict]:
    messages = []
    for block in stream_text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if fields:
            messages.append({"id": fields.get("id"), "event": fields.get("event"), "data": json.loads(fields["data"])})
    return messages


def events(client, run_id, last_id=None, **params):
    headers = {"Last-Event-ID": last_id} if last_id else {}
    response = client.get(f"/api/v1/runs/{run_id}/events", params={"timeout_s": 0.3, **params}, headers=headers)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    return parse(response.text)


class TestEventStream:
    def test_replay_and_resume_with_last_event_id(self, client, db):
        run = create_run(client)
        client.post(f"/api/v1/runs/{run['id']}/metrics", json=[{"key": "k", "step": s, "value": s} for s in range(3)])
        client.post(f"/api/v1/runs/{run['id']}/logs", json=[{"seq": 0, "text": "hello"}])
        first = events(client, run["id"], since_start=True)
        kinds = [m["event"] for m in first]
        assert kinds[0] == "hello" and {"status", "metrics", "logs"} <= set(kinds)
        assert [p["step"] for m in first if m["event"] == "metrics" for p in m["data"]] == [0, 1, 2]

        client.post(f"/api/v1/runs/{run['id']}/metrics", json=[{"key": "k", "step": 3, "value": 3}])
        client.post(f"/api/v1/runs/{run['id']}/cancel")
        resumed = events(client, run["id"], last_id=first[-1]["id"])
        new_steps = [p["step"] for m in resumed if m["event"] == "metrics" for p in m["data"]]
        new_status = [s["status"] for m in resumed if m["event"] == "status" for s in m["data"]]
        assert new_steps == [3] and new_status == ["cancelled"]
        assert not [m for m in resumed if m["event"] == "logs"]  # nothing replayed twice

    def test_non_finite_values_travel_as_strings(self, client, db):
        run = create_run(client)
        body = '[{"step": 1, "prompt": "p", "response": "r", "reward": Infinity, "kl": NaN}]'
        client.post(f"/api/v1/runs/{run['id']}/samples", content=body, headers={"Content-Type": "application/json"})
        client.post(
            f"/api/v1/runs/{run['id']}/metrics",
            content='[{"key": "k", "step": 1, "value": -Infinity}]',
            headers={"Content-Type": "application/json"},
        )
        messages = {m["event"]: m["data"] for m in events(client, run["id"], since_start=True)}
        assert (messages["samples"][0]["reward"], messages["samples"][0]["kl"]) == ("Infinity", "NaN")
        assert messages["metrics"][0]["value"] == "-Infinity"

    def test_without_last_event_id_only_new_things_come(self, client, db):
        run = create_run(client)
        client.post(f"/api/v1/runs/{run['id']}/metrics", json=[{"key": "k", "step": 1, "value": 1}])
        messages = events(client, run["id"], last_id="garbage")
        assert [m["event"] for m in messages] == ["hello"] and messages[0]["data"]["status"] == "queued"

    def test_deleted_run_ends_the_stream(self, client, db):
        run = create_run(client)
        client.post(f"/api/v1/runs/{run['id']}/cancel")
        hello = events(client, run["id"])[0]
        client.delete(f"/api/v1/runs/{run['id']}")
        assert client.get(f"/api/v1/runs/{run['id']}/events").status_code == 404
        assert hello["event"] == "hello"


@pytest.fixture
def two_api_processes(tmp_path):
    url = create_postgres_database()
    try:
        # Both start at once on an empty database: migrations and bootstrap must not race.
        with api_processes(tmp_path, url, ADMIN_TOKEN, count=2) as processes:
            yield processes
    finally:
        drop_postgres_database(url)


def test_events_fan_out_across_api_processes(two_api_processes):
    a, b = two_api_processes
    headers = auth(ADMIN_TOKEN)
    run = httpx.post(f"{b.url}/api/v1/runs", json=spec(), headers=headers).json()
    received: queue.Queue = queue.Queue()

    def listen() -> None:
        with httpx.stream(
            "GET", f"{a.url}/api/v1/runs/{run['id']}/events", params={"timeout_s": 10}, headers=headers, timeout=15
        ) as stream:
            buffer = ""
            for chunk in stream.iter_text():
                buffer += chunk
                while "\n\n" in buffer:
                    block, buffer = buffer.split("\n\n", 1)
                    for message in parse(block + "\n\n"):
                        received.put(message)

    threading.Thread(target=listen, daemon=True).start()
    assert received.get(timeout=10)["event"] == "hello"
    sent = time.monotonic()
    assert (
        httpx.post(
            f"{b.url}/api/v1/runs/{run['id']}/metrics", json=[{"key": "k", "step": 7, "value": 0.5}], headers=headers
        ).status_code
        == 200
    )
    assert httpx.post(f"{b.url}/api/v1/runs/{run['id']}/cancel", headers=headers).status_code == 200
    seen = {}
    while len(seen) < 2:
        message = received.get(timeout=10)
        seen[message["event"]] = message["data"]
    assert time.monotonic() - sent < 5
    assert seen["metrics"] == [{"key": "k", "step": 7, "value": 0.5, "time": seen["metrics"][0]["time"]}]
    assert seen["status"][0]["status"] == "cancelled"
    assert httpx.get(f"{a.url}/api/v1/users", headers=headers).json()["count"] == 1  # one admin, not two


def test_the_starting_cursor_is_the_runs_newest_row_inside_or_outside_the_recent_window(client, db, monkeypatch):
    from api.events import stream

    monkeypatch.setattr(stream, "RECENT_IDS", 5)
    old, busy = create_run(client), create_run(client)
    points = lambda n: [{"key": "k", "step": s, "value": 1.0} for s in range(n)]  # noqa: E731
    client.post(f"/api/v1/runs/{old['id']}/metrics", json=points(3))
    client.post(f"/api/v1/runs/{busy['id']}/metrics", json=points(20))  # pushes `old` out of the window
    newest = lambda run_id: db.scalar(select(func.max(Metric.id)).where(Metric.run_id == run_id))  # noqa: E731
    assert stream.current_cursor(db, old["id"]).metric == newest(old["id"])
    assert stream.current_cursor(db, busy["id"]).metric == newest(busy["id"])
    assert stream.current_cursor(db, create_run(client)["id"]).metric == 0
