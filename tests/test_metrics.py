"""Metric ingest is idempotent; series are downsampled deterministically with min/max/last per bucket."""

import json
import math
import random

from sqlalchemy import func, select

from api.metrics import rollups, schemas
from api.models import Metric, Run
from tests.harness.factories import create_run


def _points(key: str, steps, value=lambda s: math.sin(s / 10)):
    return [{"key": key, "step": s, "value": value(s), "time": 1_700_000_000.0 + s} for s in steps]


def _ingest(client, run_id, points, batch=100):
    for start in range(0, len(points), batch):
        response = client.post(f"/api/v1/runs/{run_id}/metrics", json=points[start : start + batch])
        assert response.status_code == 200, response.text


class TestIngest:
    def test_replayed_batch_neither_duplicates_nor_changes(self, client, db):
        run = create_run(client)
        batch = _points("train/loss", range(10))
        first = client.post(f"/api/v1/runs/{run['id']}/metrics", json=batch).json()
        assert first == {"accepted": 10, "duplicates": 0}
        changed = [{**p, "value": 999.0} for p in batch[:5]] + _points("train/loss", range(10, 12))
        second = client.post(f"/api/v1/runs/{run['id']}/metrics", json=changed).json()
        assert second == {"accepted": 2, "duplicates": 5}
        values = dict(db.execute(select(Metric.step, Metric.value).where(Metric.run_id == run["id"])).all())
        assert len(values) == 12 and values[0] == 0.0 and 999.0 not in values.values()

    def test_duplicates_inside_one_batch_keep_the_first(self, client, db):
        run = create_run(client)
        batch = [{"key": "k", "step": 1, "value": 1.0}, {"key": "k", "step": 1, "value": 2.0}]
        assert client.post(f"/api/v1/runs/{run['id']}/metrics", json=batch).json() == {"accepted": 1, "duplicates": 1}
        assert db.scalar(select(Metric.value).where(Metric.run_id == run["id"])) == 1.0

    def test_last_step_follows_the_highest_step(self, client, db):
        run = create_run(client)
        _ingest(client, run["id"], _points("a", [5, 3]))
        assert client.get(f"/api/v1/runs/{run['id']}").json()["last_step"] == 5
        _ingest(client, run["id"], _points("a", [4]))
        db.expire_all()
        assert db.get(Run, run["id"]).last_step == 5

    def test_steps_beyond_32_bits_are_stored_and_tracked(self, client, db):
        run = create_run(client)
        big = 2**40
        assert client.post(f"/api/v1/runs/{run['id']}/metrics", json=[{"key": "k", "step": big, "value": 1}]).status_code == 200
        assert client.get(f"/api/v1/runs/{run['id']}").json()["last_step"] == big

    def test_non_finite_values_are_stored_as_such(self, client, db):
        run = create_run(client)
        body = '[{"key":"k","step":1,"value":NaN},{"key":"k","step":2,"value":"Infinity"},{"key":"k","step":3,"value":-Infinity}]'
        response = client.post(f"/api/v1/runs/{run['id']}/metrics", content=body, headers={"Content-Type": "application/json"})
        assert response.json() == {"accepted": 3, "duplicates": 0}
        series = client.get(f"/api/v1/runs/{run['id']}/metrics", params={"keys": "k"}).json()["series"][0]
        assert [p["value"] for p in series["points"]] == ["NaN", "Infinity", "-Infinity"]
        assert series["points"][0]["min"] is None  # NaN never counts as a bucket's min or max
        rows = db.execute(select(Metric.is_nan, Metric.value).where(Metric.run_id == run["id"]).order_by(Metric.step)).all()
        assert rows[0][0] is True and rows[1][1] == math.inf and rows[2][1] == -math.inf


class TestSeries:
    def test_small_series_are_returned_raw(self, client, db):
        run = create_run(client)
        _ingest(client, run["id"], _points("a", range(20)))
        series = client.get(f"/api/v1/runs/{run['id']}/metrics", params={"max_points": 50}).json()["series"][0]
        assert not series["downsampled"] and [p["step"] for p in series["points"]] == list(range(20))

    def test_downsampling_keeps_spikes_and_counts_every_point(self, client, db):
        run = create_run(client)
        spike_step = 537

        def value(step):
            return 100.0 if step == spike_step else -100.0 if step == 538 else math.sin(step / 10)

        _ingest(client, run["id"], _points("train/loss", range(2000), value))
        series = client.get(f"/api/v1/runs/{run['id']}/metrics", params={"keys": "train/loss", "max_points": 100}).json()[
            "series"
        ][0]
        points = series["points"]
        assert series["downsampled"] and series["total_points"] == 2000
        assert len(points) <= 100 and sum(p["count"] for p in points) == 2000
        assert max(p["max"] for p in points) == 100.0 and min(p["min"] for p in points) == -100.0
        assert points[-1]["step"] == 1999 and points[-1]["value"] == value(1999)  # last per bucket
        for point in points:
            assert point["value"] == value(point["step"]) and point["min"] <= point["value"] <= point["max"]

    def test_same_points_in_any_order_give_the_same_series(self, client, db):
        steps = list(range(0, 5000, 3))
        shuffled = steps[:]
        random.Random(7).shuffle(shuffled)
        a, b = create_run(client), create_run(client)
        _ingest(client, a["id"], _points("k", steps))
        _ingest(client, b["id"], _points("k", shuffled))
        params = {"keys": "k", "max_points": 64}
        series_a = client.get(f"/api/v1/runs/{a['id']}/metrics", params=params).json()["series"]
        series_b = client.get(f"/api/v1/runs/{b['id']}/metrics", params=params).json()["series"]
        assert series_a == series_b

    def test_step_window_and_key_list(self, client, db):
        run = create_run(client)
        _ingest(client, run["id"], _points("a", range(100)) + _points("b", range(50)))
        window = client.get(f"/api/v1/runs/{run['id']}/metrics", params={"keys": "a", "step_min": 10, "step_max": 19}).json()
        assert [p["step"] for p in window["series"][0]["points"]] == list(range(10, 20))
        keys = client.get(f"/api/v1/runs/{run['id']}/metrics/keys").json()
        assert [(k["key"], k["count"], k["last_step"]) for k in keys["data"]] == [("a", 100, 99), ("b", 50, 49)]
        assert keys["data"][0]["last_value"] == math.sin(99 / 10)
        unknown = client.get(f"/api/v1/runs/{run['id']}/metrics", params={"keys": "nope"}).json()["series"][0]
        assert unknown["total_points"] == 0 and unknown["points"] == []
        assert db.scalar(select(func.count()).select_from(Metric)) == 150

    def test_a_nan_inside_a_downsampled_bucket_is_not_lost(self, client, db):
        run = create_run(client)
        nan_steps = {101, 102, 500}  # none is the last step of its bucket (buckets of 20 steps end at 119 and 519)

        def value(step):
            return math.nan if step in nan_steps else float(step)

        points = [{**p, "value": "NaN" if math.isnan(p["value"]) else p["value"]} for p in _points("k", range(2000), value)]
        _ingest(client, run["id"], points)
        series = client.get(f"/api/v1/runs/{run['id']}/metrics", params={"keys": "k", "max_points": 100}).json()["series"][0]
        assert series["downsampled"]
        marked = {p["step"]: p["first_nan_step"] for p in series["points"] if p["first_nan_step"] is not None}
        assert marked == {119: 101, 519: 500}
        assert all(p["value"] != "NaN" for p in series["points"])  # each bucket's last value is finite
        raw = client.get(f"/api/v1/runs/{run['id']}/metrics", params={"keys": "k", "step_max": 102}).json()["series"][0]
        assert [(p["step"], p["first_nan_step"]) for p in raw["points"][-3:]] == [(100, None), (101, 101), (102, 102)]

    def test_every_key_is_one_json_document_written_series_by_series(self, client, db):
        run = create_run(client)
        _ingest(client, run["id"], _points("b", range(5)) + _points("a", range(3)))
        with client.stream("GET", f"/api/v1/runs/{run['id']}/metrics", params={"max_points": 10}) as response:
            assert response.headers["content-type"] == "application/json"
            assert response.headers["x-series-count"] == "2"  # known before the body: the dashboard may hang up
            chunks = list(response.iter_raw())
        assert len(chunks) >= 3  # the head, each series, the tail: not one body built first
        body = json.loads(b"".join(chunks))
        schemas.SeriesResponse.model_validate(body)  # the documented shape, though written without the models
        assert body["run_id"] == run["id"] and body["max_points"] == 10
        assert [(s["key"], s["total_points"]) for s in body["series"]] == [("a", 3), ("b", 5)]
        none = client.get(f"/api/v1/runs/{create_run(client)['id']}/metrics").json()
        assert none["series"] == []

    def test_columns_hold_the_same_series_as_the_points(self, client, db, monkeypatch):
        run = create_run(client)
        weird = {5: "NaN", 6: "Infinity", 7: "-Infinity", 1500: "NaN"}
        points = [{**p, "value": weird.get(p["step"], p["value"])} for p in _points("long", range(3000))]
        _ingest(client, run["id"], points + _points("short", range(10)), batch=1000)
        url = f"/api/v1/runs/{run['id']}/metrics"
        monkeypatch.setattr(rollups, "RAW_LIMIT", 1000)  # "long" is also answered from its rollups
        shapes = set()
        for params in ({"max_points": 100}, {"max_points": 100, "step_min": 0}, {"keys": "short"}):
            as_points = client.get(url, params=params).json()
            response = client.get(url + "/columns", params=params)
            assert response.headers["x-series-count"] == str(len(as_points["series"]))
            as_columns = schemas.ColumnsResponse.model_validate(response.json())  # the documented shape
            assert as_columns.run_id == run["id"] and as_columns.max_points == as_points["max_points"]
            for s, c in zip(as_points["series"], response.json()["series"], strict=True):
                assert (c["key"], c["total_points"], c["downsampled"]) == (s["key"], s["total_points"], s["downsampled"])
                # a series that is not downsampled leaves out what follows from each point's value and step
                fields = ("min", "max", "count", "first_nan_step") if s["downsampled"] else ()
                assert set(c) == {"key", "total_points", "downsampled", "step", "value", "time", *fields}
                for field in ("step", "value", "time", *fields):
                    assert c[field] == [p[field] for p in s["points"]], (params, s["key"], field)
            shapes |= {c.downsampled for c in as_columns.series}
        assert shapes == {True, False}  # both shapes were compared
        raw = client.get(url + "/columns", params={"keys": "long", "step_max": 7}).json()["series"][0]
        assert raw["value"][-3:] == ["NaN", "Infinity", "-Infinity"] and not raw["downsampled"]
        as_points = client.get(url, params={"keys": "long", "step_max": 7}).json()["series"][0]["points"]
        for point, value, step in zip(as_points, raw["value"], raw["step"], strict=True):  # what a reader derives
            edge = None if value == "NaN" else value
            assert (point["min"], point["max"], point["count"]) == (edge, edge, 1)
            assert point["first_nan_step"] == (step if value == "NaN" else None)

    def test_bad_parameters(self, client, db):
        run = create_run(client)
        assert client.get(f"/api/v1/runs/{run['id']}/metrics", params={"max_points": 1}).status_code == 422
        assert client.get("/api/v1/runs/9999/metrics").status_code == 404
        assert client.post(f"/api/v1/runs/{run['id']}/metrics", json=[{"key": "a b", "step": 1, "value": 1}]).status_code == 422
        assert client.post(f"/api/v1/runs/{run['id']}/metrics", json=[{"key": "a", "step": -1, "value": 1}]).status_code == 422
