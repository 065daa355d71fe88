"""The trainer's reporter: cheap to call, never stops training, and delivers everything exactly once."""

import hashlib
import logging
import math
import sys
import time
import uuid

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from api.models import LogLine, Metric, Run
from api.models import Sample as SampleRow
from rlplane.reporting.events import Batch, MetricPoint
from tests.harness.factories import ADMIN_TOKEN, auth, create_run, worker_token
from trainer_core.reporting import (
    AsyncReporter,
    CheckpointEvent,
    ControlPlaneSink,
    JsonlSink,
    NullReporter,
    Sample,
    StdoutSink,
    WandbSink,
    make_reporter,
)


class Collect:
    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.closed = False

    def write(self, batch: Batch) -> None:
        self.batches.append(batch)

    def close(self) -> None:
        self.closed = True

    def metrics(self) -> list[tuple[int, str, float]]:
        return [(p.step, p.key, p.value) for b in self.batches for p in b.metrics]


class Broken:
    def write(self, batch: Batch) -> None:
        raise RuntimeError("disk full")

    def close(self) -> None:
        raise RuntimeError("still full")


def _lines(path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


class TestLocalSinks:
    def test_jsonl_files_hold_every_report_after_close(self, tmp_path):
        reporter = AsyncReporter([JsonlSink(tmp_path)])
        reporter.metrics(1, {"train/loss": 2.5, "train/lr": 1e-4})
        reporter.metrics(2, {"train/loss": math.nan})
        reporter.log("hello")
        reporter.log("again")
        reporter.log("from rank 3", rank=3)
        reporter.samples(2, [Sample("p", "r", reward=1.0, scores={"len": 3})])
        reporter.samples(2, [Sample("p2", "r2", kl=-math.inf)])
        reporter.checkpoint(CheckpointEvent(2, "runs/1/step-2", 10, "0" * 64, {"seed": 1}))
        reporter.status("succeeded")
        reporter.close()
        metrics = _lines(tmp_path / "metrics.jsonl")
        assert [(m["step"], m["key"], m["value"]) for m in metrics] == [
            (1, "train/loss", 2.5),
            (1, "train/lr", 1e-4),
            (2, "train/loss", "NaN"),
        ]
        assert all(m["time"] > 1e9 for m in metrics)
        assert [(line["rank"], line["seq"], line["text"]) for line in _lines(tmp_path / "logs.jsonl")] == [
            (0, 0, "hello"),
            (0, 1, "again"),
            (3, 0, "from rank 3"),
        ]
        samples = _lines(tmp_path / "samples.jsonl")
        assert [(s["step"], s["index"], s["prompt"], s["reward"], s["kl"], s["scores"]) for s in samples] == [
            (2, 0, "p", 1.0, None, {"len": 3}),
            (2, 1, "p2", None, "-Infinity", {}),
        ]
        events = _lines(tmp_path / "events.jsonl")
        assert events[0] == {
            "type": "checkpoint",
            "step": 2,
            "path": "runs/1/step-2",
            "size": 10,
            "sha256": "0" * 64,
            "metadata": {"seed": 1},
        }
        assert events[1]["type"] == "status" and events[1]["status"] == "succeeded" and events[1]["last_step"] == 2

    def test_stdout_prints_one_line_per_step(self, capsys):
        reporter = AsyncReporter([StdoutSink(every=2)])
        reporter.metrics(11, {"train/loss": 9.0})
        reporter.metrics(12, {"train/loss": 1.23449, "train/lr": 3e-5})
        reporter.close()
        assert capsys.readouterr().out == "step 12 | train/loss 1.234 | train/lr 3e-05\n"

    def test_wandb_without_wandb_says_how_to_install_it(self, tmp_path, monkeypatch):
        monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails, installed or not
        with pytest.raises(ImportError, match="pip install wandb"):
            WandbSink("proj", "run", dir=tmp_path)


class TestAsyncReporter:
    def test_a_failing_sink_does_not_stop_the_others(self, caplog):
        good = Collect()
        reporter = AsyncReporter([Broken(), good])
        with caplog.at_level(logging.ERROR, logger="rlplane.reporting"):
            reporter.metrics(1, {"a": 1})
            assert reporter.flush(timeout=5)
            reporter.metrics(2, {"a": 2})
            reporter.close()
        assert good.metrics() == [(1, "a", 1.0), (2, "a", 2.0)] and good.closed
        assert "sink=Broken failed" in caplog.text and "RuntimeError: disk full" in caplog.text

    def test_close_flushes_everything_and_stops_the_thread(self):
        sink = Collect()
        reporter = AsyncReporter([sink], flush_interval=60)
        for step in range(1000):
            reporter.metrics(step, {"train/loss": step})
        reporter.close()
        reporter.close()  # idempotent
        assert sink.metrics() == [(s, "train/loss", float(s)) for s in range(1000)]
        assert sink.closed and not reporter._thread.is_alive()

    def test_flush_writes_what_was_reported_before_it(self):
        sink = Collect()
        reporter = AsyncReporter([sink], flush_interval=60)
        reporter.metrics(1, {"a": 1})
        assert reporter.flush(timeout=5)
        assert sink.metrics() == [(1, "a", 1.0)]
        reporter.close()

    def test_metrics_calls_are_cheap(self):
        reporter = AsyncReporter([Collect()])
        calls = 100_000
        start = time.perf_counter()
        for step in range(calls):
            reporter.metrics(step, {"train/loss": 0.5})
        per_call = (time.perf_counter() - start) / calls
        reporter.close()
        assert per_call < 20e-6, f"{per_call * 1e6:.1f} µs per metrics() call"

    def test_make_reporter_gives_other_ranks_nothing_to_do(self, tmp_path):
        other = make_reporter(tmp_path / "r1", rank=1)
        assert isinstance(other, NullReporter)
        other.metrics(1, {"a": 1})
        other.log("x")
        assert other.flush() and other.close() is None and not (tmp_path / "r1").exists()
        zero = make_reporter(tmp_path / "r0", rank=0, stdout=False)
        zero.metrics(1, {"a": 1})
        zero.close()
        assert len(_lines(tmp_path / "r0" / "metrics.jsonl")) == 1


class Flaky:
    """A client whose first `down` posts fail to connect and next `lost_replies` are stored but never answered."""

    def __init__(self, client, down: int = 0, lost_replies: int = 0) -> None:
        self.client, self.down, self.lost_replies, self.posts = client, down, lost_replies, 0

    def request(self, method, url, **kwargs):
        self.posts += 1
        if self.down:
            self.down -= 1
            raise httpx.ConnectError("connection refused")
        response = self.client.request(method, url, **kwargs)
        if self.lost_replies:
            self.lost_replies -= 1
            raise httpx.ReadTimeout("timed out")
        return response


class OlderApi:
    """The real API, answering POST .../reports as an API from before that endpoint does (the 404 of an
    unknown path) unless `knows_reports`; it records the endpoints posted to."""

    def __init__(self, client, knows_reports: bool = False) -> None:
        self.client, self.knows_reports, self.paths = client, knows_reports, []

    def request(self, method, url, **kwargs):
        self.paths.append(url.rsplit("/", 1)[-1])
        return self.client.request(method, url if self.knows_reports else url.replace("/reports", "/no-such-endpoint"), **kwargs)


def _sink(client, run_id, token=ADMIN_TOKEN, attempt=0, **kwargs) -> ControlPlaneSink:
    return ControlPlaneSink("http://testserver", token, run_id, attempt, client=client, backoff=0, **kwargs)


def _count(db, model, run_id) -> int:
    return db.scalar(select(func.count()).select_from(model).where(model.run_id == run_id))


class TestControlPlaneSink:
    def test_reports_arrive_through_the_real_api(self, client, db):
        run = create_run(client)
        reporter = AsyncReporter([_sink(client, run["id"])])
        reporter.metrics(1, {"train/loss": 1.5, "ppo/kl": math.nan})
        reporter.metrics(2, {"train/loss": math.inf})
        reporter.log("step 1 done")
        reporter.log("step 2 done")
        reporter.samples(2, [Sample("2+2", "4", reward=math.nan, kl=0.1, scores={"len": 1.0}), Sample("1+1", "2", reward=1.0)])
        reporter.close()
        series = client.get(f"/api/v1/runs/{run['id']}/metrics", params={"keys": ["train/loss", "ppo/kl"]}).json()["series"]
        values = {s["key"]: [p["value"] for p in s["points"]] for s in series}
        assert values == {"train/loss": [1.5, "Infinity"], "ppo/kl": ["NaN"]}
        logs = client.get(f"/api/v1/runs/{run['id']}/logs").json()["data"]
        assert [(line["attempt"], line["seq"], line["text"]) for line in logs] == [(0, 0, "step 1 done"), (0, 1, "step 2 done")]
        samples = client.get(f"/api/v1/runs/{run['id']}/samples", params={"step": 2}).json()["data"]
        assert sorted((s["index"], s["prompt"], s["reward"]) for s in samples) == [(0, "2+2", "NaN"), (1, "1+1", 1.0)]
        assert client.get(f"/api/v1/runs/{run['id']}").json()["last_step"] == 2

    def test_big_batches_are_split_under_the_api_limits(self, client, db):
        run = create_run(client)
        counting = Flaky(client)
        reporter = AsyncReporter([_sink(counting, run["id"])], flush_interval=60)
        for step in range(12_000):
            reporter.metrics(step, {"k": step})
        reporter.close()
        assert counting.posts == 2 and _count(db, Metric, run["id"]) == 12_000

    def test_checkpoint_and_status_with_a_lease(self, client, db, artifacts_root):
        token = worker_token(client)
        run = create_run(client)
        assert client.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "w"}, headers=auth(token)).json()["attempt"] == 1
        rel = f"ckpts/{uuid.uuid4().hex}/step-3"
        (artifacts_root / rel).mkdir(parents=True)
        (artifacts_root / rel / "model.safetensors").write_bytes(b"weights")
        reporter = AsyncReporter([_sink(client, run["id"], token=token, attempt=1)])
        reporter.status("running")
        reporter.metrics(3, {"train/loss": 0.1})
        reporter.log("worker line")
        reporter.checkpoint(CheckpointEvent(3, rel, 7, hashlib.sha256(b"weights").hexdigest(), {"data_position": 12}))
        reporter.close()
        detail = client.get(f"/api/v1/runs/{run['id']}").json()
        assert detail["status"] == "running" and detail["last_step"] == 3
        checkpoints = client.get(f"/api/v1/runs/{run['id']}/checkpoints").json()["data"]
        assert [(c["step"], c["path"], c["metadata"]) for c in checkpoints] == [(3, rel, {"data_position": 12})]
        assert client.get(f"/api/v1/runs/{run['id']}/logs").json()["data"][0]["attempt"] == 1

    def test_an_older_api_gets_the_same_rows_one_request_per_kind(self, client, db):
        run = create_run(client)
        older = OlderApi(client)
        reporter = AsyncReporter([_sink(older, run["id"])])
        reporter.metrics(1, {"train/loss": 1.5})
        reporter.log("a line")
        reporter.close()
        assert older.paths == ["reports", "metrics", "logs"]
        assert _count(db, Metric, run["id"]) == 1 and _count(db, LogLine, run["id"]) == 1
        missing = OlderApi(client, knows_reports=True)
        _sink(missing, 999_999).write(Batch(metrics=[MetricPoint("a", 1, 1.0, 0.0)]))  # the run's own 404: not split
        assert missing.paths == ["reports"]

    def test_a_field_the_api_does_not_know_is_dropped_not_the_rows(self, client, db, caplog):
        """A newer trainer or SDK (here: a row field this API has never had) reporting to an older API: the API
        refuses the unknown field (422), and the rows go again without it, said once in the log; a refused row costs
        its own kind's rows only."""
        from rlplane.reports import report_requests

        run = create_run(client)
        sink = _sink(client, run["id"])
        sample = {"step": 1, "index": 0, "prompt": "2+2=", "response": "4", "reward": 1.0, "from_the_future": [1]}
        metric = {"step": 1, "key": "train/loss", "value": 0.5, "time": 1.0}
        line = {"attempt": 0, "rank": 0, "seq": 0, "text": "hello", "time": 1.0}
        with caplog.at_level(logging.WARNING, logger="rlplane.reporting"):
            assert sink.send(report_requests([metric], [sample, {**sample, "index": 1}], [line]))
            assert sink.send(report_requests([], [{**sample, "step": 2}], []))
        said = [r.getMessage() for r in caplog.records if "does not take" in r.getMessage()]
        assert said == ["reporting: the API does not take samples.from_the_future (it is older): sent without"], said
        stored = client.get(f"/api/v1/runs/{run['id']}/samples", params={"step": 1}).json()["data"]
        assert sorted(s["index"] for s in stored) == [0, 1] and _count(db, SampleRow, run["id"]) == 3
        assert _count(db, Metric, run["id"]) == 1 and _count(db, LogLine, run["id"]) == 1

        bad = {**sample, "step": -1}
        bad.pop("from_the_future")
        with caplog.at_level(logging.ERROR, logger="rlplane.reporting"):
            assert sink.send(report_requests([{**metric, "step": 3}], [bad], [{**line, "seq": 1}]))
        assert "endpoint=samples rejected status=422" in caplog.text
        assert (
            _count(db, Metric, run["id"]) == 2 and _count(db, LogLine, run["id"]) == 2 and _count(db, SampleRow, run["id"]) == 3
        )

    def test_rejected_requests_are_logged_not_retried(self, client, db, caplog):
        run = create_run(client)
        counting = Flaky(client)
        sink = _sink(counting, run["id"], attempt=1)
        batch = Batch()
        batch.checkpoints.append(CheckpointEvent(1, "no/such/dir", 1, "0" * 64))
        with caplog.at_level(logging.ERROR, logger="rlplane.reporting"):
            sink.write(batch)
        assert counting.posts == 1 and len(sink.spool) == 0
        assert (
            "endpoint=checkpoints rejected status=422" in caplog.text and "does not exist under the artifact root" in caplog.text
        )

    def test_an_api_down_for_a_while_loses_nothing_and_stores_nothing_twice(self, client, db, tmp_path):
        run = create_run(client)
        flaky = Flaky(client, down=5, lost_replies=1)
        sink = _sink(flaky, run["id"], spool_dir=tmp_path / "spool", max_retries=1)
        reporter = AsyncReporter([sink], flush_interval=60)
        for step in range(3):
            reporter.metrics(step, {"train/loss": step, "nan": math.nan})
            reporter.log(f"line {step}")
            reporter.flush(timeout=10)  # each flush: one batch, retried twice, then spooled while the API is down
        # each batch is one request (metrics and logs together). The 6th post reached the API, which
        # stored step 0 and its line, but its reply was lost: step 0 is spooled anyway
        assert flaky.posts == 6 and _count(db, Metric, run["id"]) == 2 and _count(db, LogLine, run["id"]) == 1
        assert [p.name.split(".")[1] for p in sorted((tmp_path / "spool").glob("*.json"))] == ["reports"] * 3
        reporter.metrics(3, {"train/loss": 3})
        reporter.close()  # the API is back: the spool goes first, then the new batch
        assert len(sink.spool) == 0
        assert _count(db, Metric, run["id"]) == 7 and _count(db, LogLine, run["id"]) == 3
        series = client.get(f"/api/v1/runs/{run['id']}/metrics", params={"keys": ["train/loss", "nan"]}).json()["series"]
        values = {s["key"]: [(p["step"], p["value"]) for p in s["points"]] for s in series}
        assert values == {"train/loss": [(s, float(s)) for s in range(4)], "nan": [(s, "NaN") for s in range(3)]}
        db.expire_all()
        assert db.get(Run, run["id"]).last_step == 3 and _count(db, SampleRow, run["id"]) == 0


def test_what_the_sinks_write_is_the_contracts_rows(tmp_path) -> None:
    """The records the run directory's files and the API-bound requests hold are the contract's rows (rlplane/rows.py):
    every one validates as MetricRow, LogRow or SampleRow, non-finite floats and long lines included."""
    from rlplane import rows
    from rlplane.reporting.events import LogLine, StepSample

    episode = (("policy", "call add(2, 3)"), ("environment", "5"))
    sample = Sample("2+3=", "5", reward=math.inf, kl=math.nan, scores={"len": 1.0}, label="rollout", reference="5", turns=episode)
    batch = Batch(
        metrics=[MetricPoint("train/loss", 1, 0.5, 1.0), MetricPoint("train/grad_norm", 1, math.nan, 1.0)],
        logs=[LogLine(0, 0, "x" * 70_000, 1.0)],
        samples=[StepSample(1, 0, sample, 1.0)],
    )
    JsonlSink(tmp_path).write(batch)
    files = {kind: (tmp_path / f"{kind}.jsonl").read_bytes() for kind in ("metrics", "logs", "samples")}
    read = {kind: [orjson.loads(line) for line in text.splitlines()] for kind, text in files.items()}
    assert [rows.MetricRow.model_validate(r).value for r in read["metrics"]][0] == 0.5
    assert len(rows.LogRow.model_validate({**read["logs"][0], "text": "short"}).text) == 5  # the file keeps a line whole
    assert rows.SampleRow.model_validate({k: v for k, v in read["samples"][0].items() if k != "time"}).reward == math.inf
    sink = ControlPlaneSink("http://127.0.0.1:9", "t", 1, 3, max_retries=0)
    try:
        [(endpoint, body)] = list(sink._requests(batch))
    finally:
        sink.close()
    report = rows.Report.model_validate_json(body)
    assert endpoint == "reports" and len(report.logs[0].text) == 65_536 and report.logs[0].attempt == 3
    assert math.isnan(report.metrics[1].value) and report.samples[0].turns[1].text == "5"
