"""POST /runs/{id}/reports: metrics, samples and log lines in one request, as their own endpoints store them."""

import math

from sqlalchemy import func, select

from api.models import LogLine, Metric, Run, Sample
from rlplane.limits import MAX_ROWS
from rlplane.reports import report_requests
from tests.harness.factories import auth, create_run, worker_token


def report(run_id: int) -> dict:
    return {
        "metrics": [{"key": "train/loss", "step": s, "value": 1.0 / (s + 1)} for s in range(4)]
        + [{"key": "ppo/kl", "step": 3, "value": "NaN"}],
        "samples": [{"step": 3, "index": i, "prompt": f"p{i}", "response": "r", "reward": 0.5} for i in range(2)],
        "logs": [{"attempt": 1, "rank": 0, "seq": s, "text": f"line {s}"} for s in range(3)],
    }


def counts(db, run_id: int) -> tuple[int, int, int]:
    db.expire_all()
    return tuple(
        db.scalar(select(func.count()).select_from(model).where(model.run_id == run_id)) for model in (Metric, Sample, LogLine)
    )


def test_one_request_stores_all_three_kinds_and_a_replay_stores_nothing(client, db):
    run_id = create_run(client)["id"]
    response = client.post(f"/api/v1/runs/{run_id}/reports", json=report(run_id))
    assert response.status_code == 200, response.text
    assert response.json() == {
        "metrics": {"accepted": 5, "duplicates": 0},
        "samples": {"accepted": 2, "duplicates": 0},
        "logs": {"accepted": 3, "duplicates": 0},
    }
    assert counts(db, run_id) == (5, 2, 3) and db.get(Run, run_id).last_step == 3
    replay = client.post(f"/api/v1/runs/{run_id}/reports", json=report(run_id))
    assert replay.json()["metrics"] == {"accepted": 0, "duplicates": 5} and counts(db, run_id) == (5, 2, 3)
    series = client.get(f"/api/v1/runs/{run_id}/metrics", params={"keys": ["train/loss", "ppo/kl"]}).json()["series"]
    assert [p["value"] for p in series[0]["points"]] == [1.0, 0.5, 1 / 3, 0.25] and series[1]["points"][0]["value"] == "NaN"
    keys = client.get(f"/api/v1/runs/{run_id}/metrics/keys").json()["data"]  # the rollups were kept
    assert {k["key"]: k["count"] for k in keys} == {"train/loss": 4, "ppo/kl": 1}


def test_kinds_are_optional(client, db):
    run_id = create_run(client)["id"]
    response = client.post(f"/api/v1/runs/{run_id}/reports", json={"logs": [{"seq": 0, "text": "only a line"}]})
    assert response.status_code == 200 and response.json()["logs"]["accepted"] == 1
    assert client.post(f"/api/v1/runs/{run_id}/reports", json={}).json()["metrics"] == {"accepted": 0, "duplicates": 0}
    assert counts(db, run_id) == (0, 0, 1)


def test_one_bad_item_rejects_the_whole_report_and_names_it(client, db):
    run_id = create_run(client)["id"]
    body = report(run_id)
    body["samples"][1]["step"] = -1
    response = client.post(f"/api/v1/runs/{run_id}/reports", json=body)
    assert response.status_code == 422
    assert [e["loc"] for e in response.json()["detail"]] == [["body", "samples", 1, "step"]]
    assert counts(db, run_id) == (0, 0, 0)
    unknown = client.post(f"/api/v1/runs/{run_id}/reports", json={"metric": []})
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"] == ["body", "metric"]
    assert client.post("/api/v1/runs/999999/reports", json={}).status_code == 404


def test_a_worker_token_reports_only_for_the_run_it_leased(client, anon, db):
    run_id, other = create_run(client)["id"], create_run(client)["id"]
    token = worker_token(client)
    assert anon.post(f"/api/v1/runs/{run_id}/reports", json=report(run_id), headers=auth(token)).status_code == 403
    assert anon.post(f"/api/v1/runs/{run_id}/lease", json={"worker": "w"}, headers=auth(token)).status_code == 200
    assert anon.post(f"/api/v1/runs/{run_id}/reports", json=report(run_id), headers=auth(token)).status_code == 200
    assert anon.post(f"/api/v1/runs/{other}/reports", json=report(other), headers=auth(token)).status_code == 403
    assert counts(db, run_id) == (5, 2, 3) and counts(db, other) == (0, 0, 0)


def test_the_sink_sends_one_request_unless_a_kind_is_over_its_limit():
    metrics = [{"key": "a", "step": s, "value": 0.0} for s in range(3)]
    assert [endpoint for endpoint, _ in report_requests(metrics, [], [{"seq": 0, "text": "x"}])] == ["reports"]
    assert report_requests([], [], []) == []
    many = [{"key": "a", "step": s, "value": math.pi} for s in range(MAX_ROWS["metrics"] + 1)]
    split = [endpoint for endpoint, _ in report_requests(many, [], [{"seq": 0, "text": "x"}])]
    assert split == ["metrics", "metrics", "logs"]
