"""Bad input across endpoints: every refusal is JSON with a `detail`, and data stored before stays as it was."""

import hashlib
import json
import math
import uuid

import pytest
from sqlalchemy import select

from api.models import Checkpoint, LogLine, Metric, Run, Sample
from tests.harness.factories import auth, create_run, spec, worker_token

JSON = {"Content-Type": "application/json"}
MODEL_BYTES = b"weights" * 10


def refused(response, status: int) -> dict | list:
    """Assert the status, that the body is JSON with a `detail`, and return that detail."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"detail"} and body["detail"]
    return body["detail"]


def locs(response) -> set[tuple]:
    return {tuple(error["loc"]) for error in refused(response, 422)}


@pytest.fixture
def seeded(client, db, artifacts_root) -> dict:
    """A run with metrics, logs, samples and a checkpoint, and a check that none of it changed."""
    run = create_run(client)
    rid = run["id"]
    points = [{"key": "train/loss", "step": s, "value": 1.0 / (s + 1), "time": 1_700_000_000.0 + s} for s in range(5)]
    assert client.post(f"/api/v1/runs/{rid}/metrics", json=points).status_code == 200
    logs = [{"attempt": 1, "rank": 0, "seq": s, "text": f"line {s}", "time": 1_700_000_000.0} for s in range(3)]
    assert client.post(f"/api/v1/runs/{rid}/logs", json=logs).status_code == 200
    samples = [{"step": 1, "index": i, "prompt": "p", "response": f"r{i}", "reward": 0.5} for i in range(2)]
    assert client.post(f"/api/v1/runs/{rid}/samples", json=samples).status_code == 200
    rel = f"ckpts/{uuid.uuid4().hex}"
    (artifacts_root / rel).mkdir(parents=True)
    (artifacts_root / rel / "model.bin").write_bytes(MODEL_BYTES)
    ckpt = {"step": 4, "path": rel, "size": len(MODEL_BYTES), "sha256": hashlib.sha256(MODEL_BYTES).hexdigest()}
    assert client.post(f"/api/v1/runs/{rid}/checkpoints", json=ckpt).status_code == 201
    before = snapshot(db)

    def assert_unchanged() -> None:
        assert snapshot(db) == before

    return {"run_id": rid, "ckpt": ckpt, "points": points, "logs": logs, "samples": samples, "assert_unchanged": assert_unchanged}


def snapshot(db) -> dict[str, list]:
    db.expire_all()

    def rows(*columns) -> list:
        return db.execute(select(*columns).order_by(columns[0])).all()

    return {
        "runs": rows(Run.id, Run.status, Run.last_step, Run.archived),
        "metrics": rows(Metric.id, Metric.run_id, Metric.key, Metric.step, Metric.value, Metric.is_nan, Metric.time),
        "logs": rows(LogLine.id, LogLine.attempt, LogLine.rank, LogLine.seq, LogLine.text, LogLine.time),
        "samples": rows(Sample.id, Sample.step, Sample.index, Sample.prompt, Sample.response, Sample.reward, Sample.kl),
        "checkpoints": rows(Checkpoint.id, Checkpoint.step, Checkpoint.path, Checkpoint.size, Checkpoint.sha256, Checkpoint.meta),
    }


def _ingest_urls(rid: int) -> list[str]:
    return [
        "/api/v1/runs",
        f"/api/v1/runs/{rid}/metrics",
        f"/api/v1/runs/{rid}/logs",
        f"/api/v1/runs/{rid}/samples",
        f"/api/v1/runs/{rid}/checkpoints",
    ]


class TestMalformedBodies:
    @pytest.mark.parametrize("body", [b"{not json", b"[1,", b'[{"key": "a", "step": 1, "value": 1}', b"\xff\xfe[]", b""])
    def test_malformed_json_is_422(self, client, seeded, body):
        for url in _ingest_urls(seeded["run_id"]):
            refused(client.post(url, content=body, headers=JSON), 422)
        seeded["assert_unchanged"]()

    def test_a_batch_must_be_a_list(self, client, seeded):
        rid = seeded["run_id"]
        for url in _ingest_urls(rid)[1:4]:
            assert ("body",) in locs(client.post(url, json={"step": 1}))
        assert ("body",) in locs(client.post(f"/api/v1/runs/{rid}/checkpoints", json=[seeded["ckpt"]]))
        seeded["assert_unchanged"]()

    def test_wrong_types_name_the_field(self, client, seeded):
        rid = seeded["run_id"]
        assert locs(client.post(f"/api/v1/runs/{rid}/metrics", json=[{"key": "k", "step": "ten", "value": 1}])) == {
            ("body", 0, "step")
        }
        assert locs(client.post(f"/api/v1/runs/{rid}/metrics", json=[{"key": "k", "step": 1.5, "value": 1}])) == {
            ("body", 0, "step")
        }
        assert locs(client.post(f"/api/v1/runs/{rid}/metrics", json=[{"key": "k", "step": 1, "value": "abc"}])) == {
            ("body", 0, "value")
        }
        assert locs(client.post(f"/api/v1/runs/{rid}/logs", json=[{"seq": "x", "text": 5}])) == {
            ("body", 0, "seq"),
            ("body", 0, "text"),
        }
        bad_sample = {"step": "one", "prompt": "p", "response": "r", "reward": "high"}
        assert locs(client.post(f"/api/v1/runs/{rid}/samples", json=[bad_sample])) == {("body", 0, "step"), ("body", 0, "reward")}
        assert locs(client.post(f"/api/v1/runs/{rid}/checkpoints", json={**seeded["ckpt"], "step": "five"})) == {("body", "step")}
        assert ("body", "train", "steps") in locs(client.post("/api/v1/runs", json=spec(train={"steps": "many"})))
        seeded["assert_unchanged"]()

    def test_only_the_bad_item_of_a_batch_is_named_and_nothing_is_stored(self, client, seeded):
        rid = seeded["run_id"]
        batch = [{"key": "k", "step": s, "value": 1.0} for s in range(10, 15)] + [{"key": "k", "step": -1, "value": 1.0}]
        assert locs(client.post(f"/api/v1/runs/{rid}/metrics", json=batch)) == {("body", 5, "step")}
        seeded["assert_unchanged"]()

    @pytest.mark.parametrize(
        "kind, item, field",
        [
            ("metrics", {"key": "k", "step": 9, "value": 1.0, "unit": "s"}, "unit"),
            ("logs", {"seq": 9, "text": "t", "level": "info"}, "level"),
            ("samples", {"step": 9, "prompt": "p", "response": "r", "rewards": 1.0}, "rewards"),
        ],
    )
    def test_unknown_fields_are_refused(self, client, seeded, kind, item, field):
        response = client.post(f"/api/v1/runs/{seeded['run_id']}/{kind}", json=[item])
        [error] = refused(response, 422)
        assert error["loc"] == ["body", 0, field] and error["type"] == "extra_forbidden"
        seeded["assert_unchanged"]()

    def test_unknown_checkpoint_field_is_refused(self, client, seeded):
        response = client.post(f"/api/v1/runs/{seeded['run_id']}/checkpoints", json={**seeded["ckpt"], "step": 8, "md5": "x"})
        assert locs(response) == {("body", "md5")}
        seeded["assert_unchanged"]()

    def test_too_many_items_in_a_batch(self, client, seeded):
        lines = [{"seq": s, "text": ""} for s in range(100, 10_101)]
        assert locs(client.post(f"/api/v1/runs/{seeded['run_id']}/logs", json=lines)) == {("body",)}
        seeded["assert_unchanged"]()


class TestOversizedBodies:
    LIMIT = 1024 * 1024

    def _points(self) -> bytes:
        body = json.dumps([{"key": "train/loss", "step": s, "value": 0.5} for s in range(100, 40_100)]).encode()
        assert len(body) > self.LIMIT
        return body

    def test_declared_length_over_the_limit_is_413(self, client, seeded):
        response = client.post(f"/api/v1/runs/{seeded['run_id']}/metrics", content=self._points(), headers=JSON)
        assert refused(response, 413) == f"request body larger than {self.LIMIT} bytes"
        seeded["assert_unchanged"]()

    def test_chunked_body_over_the_limit_is_413(self, client, seeded):
        body = self._points()
        chunks = (body[i : i + 65536] for i in range(0, len(body), 65536))
        response = client.post(f"/api/v1/runs/{seeded['run_id']}/metrics", content=chunks, headers=JSON)
        assert "content-length" not in response.request.headers
        assert refused(response, 413) == f"request body larger than {self.LIMIT} bytes"
        seeded["assert_unchanged"]()

    def test_every_json_endpoint_has_the_limit(self, client, seeded):
        padding = "x" * (self.LIMIT + 1)
        rid = seeded["run_id"]
        refused(client.post("/api/v1/runs", json=spec(description=padding)), 413)
        refused(client.post(f"/api/v1/runs/{rid}/logs", json=[{"seq": 99, "text": padding}]), 413)
        refused(client.post(f"/api/v1/runs/{rid}/samples", json=[{"step": 9, "prompt": padding, "response": ""}]), 413)
        big_metadata = {**seeded["ckpt"], "step": 9, "metadata": {"x": padding}}
        refused(client.post(f"/api/v1/runs/{rid}/checkpoints", json=big_metadata), 413)
        seeded["assert_unchanged"]()


class TestUnknownIdsAndStates:
    @pytest.mark.parametrize(
        "method, url",
        [
            ("GET", "/api/v1/runs/999"),
            ("GET", "/api/v1/runs/999/metrics"),
            ("GET", "/api/v1/runs/999/logs"),
            ("GET", "/api/v1/runs/999/samples"),
            ("GET", "/api/v1/runs/999/checkpoints"),
            ("GET", "/api/v1/datasets/999"),
            ("GET", "/api/v1/datasets/999/preview"),
            ("POST", "/api/v1/runs/999/cancel"),
            ("POST", "/api/v1/runs/999/resume"),
            ("GET", "/api/v1/runs/{rid}/checkpoints/999/files"),
            ("GET", "/api/v1/nothing-here"),
        ],
    )
    def test_unknown_ids_are_404_json(self, client, seeded, method, url):
        refused(client.request(method, url.format(rid=seeded["run_id"])), 404)
        seeded["assert_unchanged"]()

    @pytest.mark.parametrize("kind", ["metrics", "logs", "samples"])
    def test_ingest_into_an_unknown_run_is_404(self, client, seeded, kind):
        item = {"metrics": seeded["points"][0], "logs": seeded["logs"][0], "samples": seeded["samples"][0]}[kind]
        assert refused(client.post(f"/api/v1/runs/999/{kind}", json=[item]), 404) == "run 999 not found"
        seeded["assert_unchanged"]()

    def test_wrong_state_is_409_json(self, client, db, seeded):
        rid = seeded["run_id"]
        assert "only failed, cancelled or lost" in refused(client.post(f"/api/v1/runs/{rid}/resume"), 409)
        assert "ended" in refused(client.post(f"/api/v1/runs/{rid}/archive"), 409)
        refused(client.delete(f"/api/v1/runs/{rid}"), 409)
        different = {**seeded["ckpt"], "size": seeded["ckpt"]["size"] + 1}
        assert "step 4" in refused(client.post(f"/api/v1/runs/{rid}/checkpoints", json=different), 409)
        seeded["assert_unchanged"]()
        token = worker_token(client)
        assert client.post(f"/api/v1/runs/{rid}/lease", json={"worker": "w1"}, headers=auth(token)).status_code == 200
        leased = snapshot(db)
        refused(client.post(f"/api/v1/runs/{rid}/lease", json={"worker": "w2"}, headers=auth(token)), 409)
        assert snapshot(db) == leased

    def test_wrong_method_is_405_json(self, client, seeded):
        refused(client.delete(f"/api/v1/runs/{seeded['run_id']}/logs"), 405)
        refused(client.put(f"/api/v1/runs/{seeded['run_id']}/metrics", json=[]), 405)
        seeded["assert_unchanged"]()


class TestNonFiniteMetrics:
    def test_literals_and_strings_are_stored_as_such(self, client, db, seeded):
        rid = seeded["run_id"]
        body = (
            '[{"key": "a", "step": 1, "value": NaN}, {"key": "a", "step": 2, "value": Infinity},'
            ' {"key": "a", "step": 3, "value": -Infinity}, {"key": "b", "step": 1, "value": "NaN"},'
            ' {"key": "b", "step": 2, "value": "Infinity"}, {"key": "b", "step": 3, "value": "-Infinity"}]'
        )
        response = client.post(f"/api/v1/runs/{rid}/metrics", content=body, headers=JSON)
        assert response.status_code == 200 and response.json() == {"accepted": 6, "duplicates": 0}
        series = client.get(f"/api/v1/runs/{rid}/metrics", params={"keys": ["a", "b"]}).json()["series"]
        for one in series:
            assert [p["value"] for p in one["points"]] == ["NaN", "Infinity", "-Infinity"]
        db.expire_all()
        rows = db.execute(
            select(Metric.key, Metric.step, Metric.is_nan, Metric.value)
            .where(Metric.run_id == rid, Metric.key.in_(["a", "b"]))
            .order_by(Metric.key, Metric.step)
        ).all()
        for key in ("a", "b"):
            nan, inf, neg = [row for row in rows if row[0] == key]
            assert nan[2] is True and inf[2] is False and neg[2] is False
            assert inf[3] == math.inf and neg[3] == -math.inf
        keys = {k["key"]: k["last_value"] for k in client.get(f"/api/v1/runs/{rid}/metrics/keys").json()["data"]}
        assert keys["a"] == keys["b"] == "-Infinity"

    def test_a_replayed_batch_with_other_values_changes_nothing(self, client, seeded):
        rid = seeded["run_id"]
        replay = [{**point, "value": math.nan if point["step"] % 2 else 999.0} for point in seeded["points"]]
        response = client.post(f"/api/v1/runs/{rid}/metrics", content=json.dumps(replay), headers=JSON)
        assert response.json() == {"accepted": 0, "duplicates": 5}
        values = client.get(f"/api/v1/runs/{rid}/metrics", params={"keys": "train/loss"}).json()["series"][0]["points"]
        assert [p["value"] for p in values] == [point["value"] for point in seeded["points"]]
        seeded["assert_unchanged"]()


class TestOutOfRange:
    """Numbers the columns cannot hold are refused by validation (422), never by the database (500)."""

    @pytest.mark.parametrize(
        "kind, item, loc",
        [
            ("logs", {"seq": 2**31, "text": "t"}, ("body", 0, "seq")),
            ("logs", {"seq": 1, "attempt": 2**31, "text": "t"}, ("body", 0, "attempt")),
            ("logs", {"seq": 1, "rank": 10**6, "text": "t"}, ("body", 0, "rank")),
            ("samples", {"step": 2**63, "prompt": "p", "response": "r"}, ("body", 0, "step")),
            ("samples", {"step": 1, "index": 2**31, "prompt": "p", "response": "r"}, ("body", 0, "index")),
            ("metrics", {"key": "k", "step": 2**63, "value": 1.0}, ("body", 0, "step")),
        ],
    )
    def test_in_bodies(self, client, seeded, kind, item, loc):
        assert locs(client.post(f"/api/v1/runs/{seeded['run_id']}/{kind}", json=[item])) == {loc}
        seeded["assert_unchanged"]()

    @pytest.mark.parametrize(
        "url, loc",
        [
            ("/api/v1/runs/{rid}/checkpoints/{big}/files", ("path", "step")),
            ("/api/v1/runs/{rid}/checkpoints/{big}/files/model.bin", ("path", "step")),
            ("/api/v1/runs/{rid}/logs?offset={big}", ("query", "offset")),
            ("/api/v1/runs/{rid}/logs?rank={big}", ("query", "rank")),
            ("/api/v1/runs/{rid}/samples?step={big}", ("query", "step")),
            ("/api/v1/runs/{rid}/samples?step_min={big}", ("query", "step_min")),
            ("/api/v1/runs/{rid}/samples?offset={big}", ("query", "offset")),
            ("/api/v1/datasets/{big}", ("path", "dataset_id")),
            ("/api/v1/datasets/{int32}/preview", ("path", "dataset_id")),
        ],
    )
    def test_in_urls(self, client, seeded, url, loc):
        response = client.get(url.format(rid=seeded["run_id"], big=2**63, int32=2**31))
        assert locs(response) == {loc}


class TestNeverAServerError:
    """Input that reached the database or the error encoder and came back as 500 before."""

    @pytest.mark.parametrize(
        "kind, body",
        [
            ("metrics", '[{"key": "a", "step": NaN, "value": 1}]'),
            ("metrics", '[{"key": "a", "step": 1, "value": 1, "extra": Infinity}]'),
            ("logs", '[{"seq": Infinity, "text": "a"}]'),
            ("logs", '[{"seq": 1, "text": "a\\ud800"}]'),
            ("metrics", '[{"key": "a", "step": true, "value": 1}]'),
            ("metrics", '[{"key": "a", "step": "5", "value": 1}]'),
        ],
    )
    def test_validation_errors_are_json_even_for_unencodable_input(self, client, seeded, kind, body):
        response = client.post(f"/api/v1/runs/{seeded['run_id']}/{kind}", content=body, headers=JSON)
        refused(response, 422)
        seeded["assert_unchanged"]()

    @pytest.mark.parametrize(
        "url, loc",
        [
            ("/api/v1/runs/{int32}", ("path", "run_id")),
            ("/api/v1/runs/{big}/events", ("path", "run_id")),
            ("/api/v1/runs/{big}/metrics", ("path", "run_id")),
            ("/api/v1/runs?offset={big}", ("query", "offset")),
            ("/api/v1/datasets?offset={big}", ("query", "offset")),
            ("/api/v1/runs/{rid}/metrics?step_min={big}", ("query", "step_min")),
        ],
    )
    def test_ids_and_offsets_beyond_the_columns(self, client, seeded, url, loc):
        assert locs(client.get(url.format(rid=seeded["run_id"], big=2**63, int32=2**31))) == {loc}

    def test_token_id_beyond_the_column(self, client, seeded):
        assert locs(client.delete(f"/api/v1/tokens/{2**31}")) == {("path", "token_id")}

    @pytest.mark.parametrize(
        "url",
        [
            "/api/v1/runs?q=a%00",
            "/api/v1/runs?project=a%00",
            "/api/v1/runs/{rid}/metrics?keys=a%00",
            "/api/v1/runs/{rid}/logs?q=%00",
            "/api/v1/datasets?project=x%00y",
        ],
    )
    def test_nul_in_urls_is_refused_on_every_backend(self, client, seeded, url):
        detail = refused(client.get(url.format(rid=seeded["run_id"])), 400)
        assert "NUL" in detail

    @pytest.mark.parametrize("field, value", [("lr", "Infinity"), ("lr", "NaN"), ("weight_decay", "-Infinity")])
    def test_non_finite_hyperparameters_are_refused(self, client, seeded, field, value):
        body = json.dumps(spec()).replace(
            '"lr": 0.0001', f'"lr": 0.0001, "{field}": {value}' if field != "lr" else f'"lr": {value}'
        )
        response = client.post("/api/v1/runs", content=body, headers=JSON)
        assert ("body", "train", field) in locs(response)
        seeded["assert_unchanged"]()

    def test_nul_in_spec_text_is_refused_at_its_field(self, client, seeded):
        assert ("body", "description") in locs(client.post("/api/v1/runs", json=spec(description="a\x00b")))
        assert ("body", "tags", 1) in locs(client.post("/api/v1/runs", json=spec(tags=["ok", "x\x00"])))
        seeded["assert_unchanged"]()
