"""The worker's forwarder reads the trainer's JSONL files as the contract's rows (rlplane.rows): a line that is not
one is told in the run's logs and skipped, and the rest of its request still reaches the API; a row with a field
this version does not know (a newer SDK's) is passed on for the API to take or the sender to trim. The API in
process, a real forwarder and sink."""

from __future__ import annotations

import json
import time
from pathlib import Path

from sqlalchemy import select

from api.models import LogLine, Metric, Sample
from rlplane.reporting.http import ControlPlaneSink
from tests.harness.factories import ADMIN_TOKEN, create_run
from worker.forward import Forwarder


def test_a_line_that_is_not_a_row_is_told_and_skipped_and_the_rest_arrives(client, db, tmp_path: Path) -> None:
    run_id = create_run(client)["id"]
    sink = ControlPlaneSink("http://testserver", ADMIN_TOKEN, run_id, 0, client=client, backoff=0)
    forwarder = Forwarder(sink, tmp_path, f"runs/{run_id}", 0)
    metrics = [
        json.dumps({"key": "train/loss", "step": 1, "value": 2.0, "time": 1.0}),
        '{"key": "train/loss", "step": 2, "val',  # torn, then the file went on
        json.dumps({"key": "train/loss", "step": -3, "value": 1.0}),  # not a step
        json.dumps({"key": "train/loss", "step": 4, "value": "NaN", "unit": "nats"}),  # a newer SDK's field
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(metrics) + "\n")
    samples = [{"step": 4, "index": 0, "prompt": "1+1", "response": "2", "time": 1.0}, {"step": 4, "index": 1}]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    assert forwarder.poll() is True
    stored = db.execute(select(Metric.step, Metric.value).where(Metric.run_id == run_id).order_by(Metric.step)).all()
    assert [step for step, _ in stored] == [1, 4] and stored[0][1] == 2.0
    assert db.scalars(select(Sample.response).where(Sample.run_id == run_id)).all() == ["2"]
    told = db.scalars(select(LogLine.text).where(LogLine.run_id == run_id).order_by(LogLine.seq)).all()
    assert len(told) == 3, told
    assert told[0].startswith("rlplane worker: skipped a line of metrics.jsonl, not JSON"), told
    assert told[1].startswith("rlplane worker: skipped a line of metrics.jsonl, step: Input should be greater than"), told
    assert told[2].startswith("rlplane worker: skipped a line of samples.jsonl, prompt: Field required"), told
    assert forwarder.last_step == 4


def test_the_attempts_tokens_are_its_trainers_last_count_not_an_earlier_attempts(client, tmp_path: Path) -> None:
    """perf/attempt_tokens lines the previous attempt wrote and no worker forwarded (it died first) are older than
    this forwarder: they are sent as points, but the attempt's tokens are its own trainer's last count."""
    run_id = create_run(client)["id"]
    sink = ControlPlaneSink("http://testserver", ADMIN_TOKEN, run_id, 0, client=client, backoff=0)
    forwarder = Forwarder(sink, tmp_path, f"runs/{run_id}", 2)
    now = time.time()
    rows = [
        {"key": "perf/attempt_tokens", "step": 9, "value": 9000.0, "time": now - 60},  # the lost attempt's
        {"key": "perf/attempt_tokens", "step": 5, "value": 1000.0, "time": now + 1},  # this one's, resumed at step 4
        {"key": "perf/attempt_tokens", "step": 6, "value": 2000.0, "time": now + 2},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert forwarder.poll() is True
    assert forwarder.tokens == 2000
