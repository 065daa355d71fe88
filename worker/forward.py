"""Forwards what a trainer writes to its run directory (metrics.jsonl, samples.jsonl, events.jsonl)
and what it prints, to the API.

The JSONL files are the local channel and the first spool: only complete lines are read, and the
offsets read so far are kept in `.forwarded.json` beside them, so a restarted worker (or the next
attempt) goes on where the last one stopped. Requests the API does not take go to the sink's disk
spool, which is sent first next time. Ingest is idempotent, so sending a line twice is harmless.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from rlplane.layout import ENVIRONMENT_FILE, node_parts
from rlplane.reporting.events import LogLine, log_record
from rlplane.reports import ReportSender, report_requests
from rlplane.rows import ATTEMPT_TOKENS, MetricRow, SampleRow, row_problem
from worker.uploads import Uploads

logger = logging.getLogger("rlplane.worker")

FILES = ("metrics", "samples", "events")
ROWS = {"metrics": MetricRow, "samples": SampleRow}  # what each file's lines are, as the API takes them
OFFSETS = ".forwarded.json"


class Forwarder:
    def __init__(
        self,
        sink: ReportSender,
        out_dir: Path,
        artifact_prefix: str,
        attempt: int,
        publish: Callable[[str], bool | None] | None = None,
        uploaded: Callable[[dict[str, Any]], None] | None = None,
        reports: bool = True,
    ) -> None:
        """`publish(relative path)` runs before a checkpoint is registered (the worker uploads it to a remote
        root, in a thread of its own: see uploads.py); none for a directory root, where the API reads the
        trainer's files in place. `uploaded(event)` runs after each upload. Without `reports` only the printed
        lines are forwarded (a gang's node other than 0, whose run directory node 0 reads), and `publish` uploads the
        node's parts of checkpoints (a remote root, where each node has its own run directory)."""
        self.reports = reports
        self.sink, self.out_dir, self.prefix, self.attempt = sink, out_dir, artifact_prefix.rstrip("/"), attempt
        self.uploads = Uploads(publish, self.prefix, uploaded=uploaded) if publish is not None else None
        self.offsets: dict[str, int] = self._load_offsets() if reports else {}
        self.last_step: int | None = None  # of the metrics forwarded (logged every train.log_every steps)
        self.last_checkpoint: int | None = None  # the step of the newest checkpoint the trainer wrote
        self.trainer_failure: str | None = None  # the reason of the trainer's own "failed" status, if it sent one
        self.phase: str | None = None  # what the trainer says it is doing (a "running" status's reason): loading, ...
        self.tokens: int | None = None  # the attempt's trainer's input tokens so far (its last ATTEMPT_TOKENS)
        self._started = time.time()  # rows older than this are an earlier attempt's, forwarded late
        self._lines: list[dict[str, Any]] = []
        self._parts_seen: set[str] = set()
        self._seq: dict[int, int] = {}
        self._lock = threading.Lock()

    def add_line(self, rank: int, text: str) -> None:
        """A line the trainer printed: a log line of `rank` (thread-safe: called by the output reader)."""
        with self._lock:
            seq = self._seq.get(rank, 0)
            self._seq[rank] = seq + 1
            self._lines.append(log_record(LogLine(rank, seq, text, time.time()), self.attempt))  # a LogRow's JSON

    def poll(self) -> bool:
        """Send everything new; True when the API took all of it."""
        metrics, samples, events = (self._read_new(name) if self.reports else [] for name in FILES)
        for row in metrics:
            self.last_step = max(self.last_step or 0, int(row["step"]))
            if row["key"] == ATTEMPT_TOKENS and float(row.get("time") or self._started) >= self._started:
                self.tokens = max(self.tokens or 0, int(row["value"]))
        for event in events:
            if event.get("type") == "status" and event.get("status") == "failed":
                self.trainer_failure = str(event.get("reason") or "") or None
            elif event.get("type") == "status" and event.get("status") == "running" and event.get("reason"):
                self.phase = str(event["reason"])
        events = [e for e in events if e.get("type") == "checkpoint"]
        for event in events:
            if event["metadata"].get("kind") != "export":
                self.last_checkpoint = max(self.last_checkpoint or 0, int(event["step"]))
        if self.uploads is not None:
            self.uploads.add(events if self.reports else self._new_node_parts())
            uploaded = self.uploads.done()
            events = uploaded if self.reports else []  # a node part is registered with node 0's checkpoint
        with self._lock:
            logs, self._lines = self._lines, []
        requests = report_requests(metrics, [_without_time(s) for s in samples], logs)
        requests += self._environment()
        requests += [("checkpoints", orjson.dumps(self._checkpoint(e))) for e in events]
        delivered = self.sink.send(requests)  # with nothing new, it still retries the spool
        if self.reports:
            self._save_offsets()
        return delivered and (self.uploads is None or self.uploads.idle)

    @property
    def settled(self) -> bool:
        """Everything read so far is in the API and every upload is done: nothing here is needed any more."""
        return len(self.sink.spool) == 0 and (self.uploads is None or self.uploads.idle)

    @property
    def fenced(self) -> str | None:
        """Why this attempt's uploads stopped for good: another attempt owns the run on the remote root."""
        return self.uploads.fenced if self.uploads is not None else None

    @property
    def uploading(self) -> bool:
        """A checkpoint upload is under way and not failing."""
        return self.uploads is not None and self.uploads.progressing

    def close(self) -> None:
        if self.uploads is not None:
            self.uploads.close()

    def _checkpoint(self, event: dict[str, Any]) -> dict[str, Any]:
        record = {k: event[k] for k in ("step", "path", "size", "sha256", "metadata")}
        record["kind"] = "export" if event["metadata"].get("kind") == "export" else "checkpoint"
        record["path"] = f"{self.prefix}/{event['path']}"  # the API's paths are relative to the artifact root
        return record

    def _new_node_parts(self) -> list[dict[str, Any]]:
        """A gang node's parts of checkpoints its trainer finished since the last call, oldest first: this node's
        worker uploads them (uploads.py), node 0's registers the checkpoints."""
        new = [part.relative_to(self.out_dir).as_posix() for part in node_parts(self.out_dir)]
        new = [path for path in new if path not in self._parts_seen]
        self._parts_seen.update(new)
        return [{"path": path, "metadata": {"kind": "node-part"}} for path in new]

    def _environment(self) -> list[tuple[str, bytes]]:
        """A command run's environment record (the SDK writes it once per attempt), sent when it is new."""
        path = self.out_dir / ENVIRONMENT_FILE
        if not self.reports or not path.is_file():
            return []
        stamp = path.stat().st_mtime_ns
        if self.offsets.get(ENVIRONMENT_FILE) == stamp:
            return []
        self.offsets[ENVIRONMENT_FILE] = stamp
        return [("environment", path.read_bytes())]

    def _read_new(self, name: str) -> list[dict[str, Any]]:
        path = self.out_dir / f"{name}.jsonl"
        if not path.exists():
            return []
        start = self.offsets.get(name, 0)
        with path.open("rb") as file:
            file.seek(start)
            data = file.read()
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
        self.offsets[name] = start + end
        rows = []
        for line in data[:end].splitlines():
            if line.strip() and (row := self._row(name, line)) is not None:
                rows.append(row)
        return rows

    def _row(self, name: str, line: bytes) -> dict[str, Any] | None:
        """One line of `name`.jsonl, checked against the contract's row: a line that is not one (a script that wrote
        the file itself, a torn disk) is told in the run's logs and skipped, instead of costing its whole request
        (the API refuses a request with one bad row) or stopping the forwarding."""
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            problem = f"not JSON ({exc})"
        else:
            model = ROWS.get(name)
            if not isinstance(row, dict):
                problem = "not a JSON object"
            elif model is None:
                return row
            else:
                problem = row_problem(model, _without_time(row) if name == "samples" else row)
                if problem is None:
                    return row
        said = line[:200].decode("utf-8", "replace")
        self.add_line(0, f"rlplane worker: skipped a line of {name}.jsonl, {problem}: {said}")
        logger.warning("run dir %s: skipped a line of %s.jsonl: %s", self.out_dir, name, problem)
        return None

    def _load_offsets(self) -> dict[str, int]:
        try:
            return {k: int(v) for k, v in json.loads((self.out_dir / OFFSETS).read_text()).items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def _save_offsets(self) -> None:
        tmp = self.out_dir / f"{OFFSETS}.tmp"
        tmp.write_text(json.dumps(self.offsets))
        tmp.replace(self.out_dir / OFFSETS)


def _without_time(sample: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sample.items() if k != "time"}
