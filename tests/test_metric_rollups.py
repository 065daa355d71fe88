"""Rollups: the block summaries ingest keeps equal a summary of the stored points, whatever the order,
replays and duplicates, and long series are downsampled from them with spikes and NaN handled."""

import math
import random

import pytest
from sqlalchemy import delete, select, text

from api.metrics import rollups
from api.models import Metric, MetricRollup
from tests.harness.factories import create_run


def _post(client, run_id, points):
    response = client.post(f"/api/v1/runs/{run_id}/metrics", json=points)
    assert response.status_code == 200, response.text
    return response.json()


def _point(key, step, value):
    return {"key": key, "step": step, "value": value, "time": 1_700_000_000.0 + step}


def _stored_rollups(db, run_id):
    db.expire_all()
    rows = db.scalars(select(MetricRollup).where(MetricRollup.run_id == run_id))
    fields = ("count", "min", "max", "first_step", "last_step", "last_value", "last_is_nan", "last_time")
    return {(r.width, r.key, r.block): rollups.Summary(*(getattr(r, f) for f in fields)) for r in rows}


def _from_points(db, run_id):
    rows = db.execute(select(Metric.key, Metric.step, Metric.value, Metric.is_nan, Metric.time).where(Metric.run_id == run_id))
    return rollups.summarise({"key": k, "step": s, "value": v, "is_nan": n, "time": t} for k, s, v, n, t in rows)


def test_rollups_match_the_points_after_shuffled_replayed_and_duplicated_batches(client, db):
    run_id = create_run(client)["id"]
    rng = random.Random(7)
    points = [_point("loss", s, "NaN" if s % 97 == 0 else rng.uniform(-1, 1)) for s in range(0, 5000, 3)]
    points += [_point("lr", s, 1e-3) for s in range(0, 3000, 500)]
    rng.shuffle(points)  # blocks are merged out of order
    for start in range(0, len(points), 250):
        _post(client, run_id, points[start : start + 250])
    assert _post(client, run_id, points[:250])["accepted"] == 0  # a replay changes nothing
    partial = [*points[250:300], _point("loss", 5001, 9.0), _point("loss", 5001, -9.0)]  # stored, new, twice
    assert _post(client, run_id, partial) == {"accepted": 1, "duplicates": 51}
    stored = _stored_rollups(db, run_id)
    assert stored == _from_points(db, run_id)
    wide = (rollups.WIDTHS[-1], "loss", 5001 // rollups.WIDTHS[-1])
    assert stored[wide].last_value == 9.0 and stored[wide].max == 9.0
    assert {w for w, _, _ in stored} == set(rollups.WIDTHS)


def test_the_migration_backfill_gives_what_ingest_keeps(client, db):
    run_id = create_run(client)["id"]
    _post(client, run_id, [_point("k", s, "NaN" if s in (5, 2048) else float(s % 13)) for s in range(0, 3000)])
    kept = _stored_rollups(db, run_id)
    db.execute(delete(MetricRollup))
    for width in rollups.WIDTHS:
        db.execute(text(rollups.backfill_sql(width)))
    db.commit()
    assert _stored_rollups(db, run_id) == kept


@pytest.mark.parametrize("max_points", [300, 100])  # from the fine blocks, and from the wide ones
def test_a_long_series_is_read_from_rollups_with_spikes_nan_and_the_last_point(client, db, monkeypatch, max_points):
    monkeypatch.setattr(rollups, "RAW_LIMIT", 2000)
    run_id = create_run(client)["id"]
    steps = range(0, 60_000, 7)
    values = {s: 50.0 if s == 30_002 else ("NaN" if s % 1001 == 0 else 1.0 / (1 + s)) for s in steps}
    values[59_997] = -3.0  # the last point
    for start in range(0, len(steps), 5000):
        _post(client, run_id, [_point("loss", s, values[s]) for s in steps[start : start + 5000]])
    body = client.get(f"/api/v1/runs/{run_id}/metrics", params={"keys": "loss", "max_points": max_points}).json()
    series = body["series"][0]
    points = series["points"]
    assert series["total_points"] == len(steps) and series["downsampled"] is True
    assert max_points // 2 <= len(points) <= max_points
    assert sum(p["count"] for p in points) == len(steps)
    assert max(p["max"] for p in points) == 50.0  # the spike survives
    assert points[-1]["step"] == 59_997 and points[-1]["value"] == -3.0 and points[-1]["min"] == -3.0
    assert [p["step"] for p in points] == sorted(p["step"] for p in points)
    assert all(p["min"] is None or not math.isnan(p["min"]) for p in points)
    keys = client.get(f"/api/v1/runs/{run_id}/metrics/keys").json()["data"]
    assert [(k["key"], k["count"], k["last_step"], k["last_value"]) for k in keys] == [("loss", len(steps), 59_997, -3.0)]
    # a step range reads the raw points, exactly
    ranged = client.get(f"/api/v1/runs/{run_id}/metrics", params={"keys": "loss", "max_points": 300, "step_min": 30_000}).json()
    assert ranged["series"][0]["total_points"] == len([s for s in steps if s >= 30_000])
    assert max(p["max"] for p in ranged["series"][0]["points"]) == 50.0


@pytest.mark.parametrize("width", rollups.WIDTHS)
def test_rollups_go_with_their_run(client, db, width):
    run = create_run(client)
    _post(client, run["id"], [_point("k", s, 1.0) for s in range(10)])
    client.post(f"/api/v1/runs/{run['id']}/cancel")
    assert client.delete(f"/api/v1/runs/{run['id']}").status_code == 204
    db.expire_all()
    assert db.scalar(select(MetricRollup).where(MetricRollup.run_id == run["id"], MetricRollup.width == width)) is None
