"""Sends reports to the control plane's REST API, surviving an API that is down for minutes.

Each batch becomes one `reports` request (metrics, samples and logs together: the API's cost is
mostly per request) or, when that would be too big, one request per kind; then checkpoints, then
status, in that order.
A request that still fails after the retries goes to a spool, oldest first, and the spool is sent
before anything new. The API ingests idempotently, so a request sent twice stores nothing twice.
"""

import logging
import time
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson

from trainer_core.reporting.events import Batch, checkpoint_record, json_float, sample_record

logger = logging.getLogger("rlplane.reporting")

MAX_ROWS = {"metrics": 10_000, "logs": 10_000, "samples": 5_000}
MAX_BODY_BYTES = 8 * 1024 * 1024  # half the API's default body limit
MAX_LOG_CHARS = 65_536
MAX_REASON_CHARS = 2_000

Request = tuple[str, bytes]  # (endpoint under /runs/{id}/, JSON body)


class ControlPlaneSink:
    def __init__(
        self,
        api_url: str,
        token: str,
        run_id: int,
        attempt: int,
        *,
        client: httpx.Client | None = None,
        spool_dir: Path | None = None,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        timeout: float = 30.0,
    ) -> None:
        base = api_url.rstrip("/")
        base = base if base.endswith("/api/v1") else f"{base}/api/v1"
        self._url = f"{base}/runs/{run_id}"
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self._client = client or httpx.Client(timeout=timeout)
        self._owns_client = client is None
        self.attempt = attempt
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.spool = Spool(spool_dir)

    def write(self, batch: Batch) -> None:
        self.send(list(self._requests(batch)))

    def send(self, requests: Sequence[Request]) -> bool:
        """Deliver the spool, then `requests`; what cannot be delivered now is spooled. True: nothing left over."""
        while (oldest := self.spool.peek()) is not None:
            if not self._send(*oldest):
                self.spool.extend(requests)
                return False
            self.spool.pop()
        for i, request in enumerate(requests):
            if not self._send(*request):
                self.spool.extend(requests[i:])
                return False
        return True

    def close(self) -> None:
        if len(self.spool):
            logger.warning(
                "reporting spool=%s requests=%d not delivered; the next sink on this spool sends them",
                self.spool.where,
                len(self.spool),
            )
        if self._owns_client:
            self._client.close()

    def _send(self, endpoint: str, body: bytes) -> bool:
        """True once the API has answered for good (stored, or rejected for a reason a retry won't fix)."""
        problem = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(self.backoff * 2 ** (attempt - 1), self.max_backoff))
            try:
                response = self._client.post(f"{self._url}/{endpoint}", content=body, headers=self._headers)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code < 400:
                return True
            if endpoint == "reports" and response.status_code in (404, 405) and not _names_the_run(response):
                # an API older than this endpoint (a worker upgraded first): the same rows, one request per kind
                return all(self._send(*request) for request in split_report(body))
            if response.status_code == 429 or response.status_code >= 500:
                problem = f"HTTP {response.status_code}"
                continue
            logger.error("reporting endpoint=%s rejected status=%d detail=%s", endpoint, response.status_code, _detail(response))
            return True
        logger.warning("reporting endpoint=%s unreachable after %d tries (%s); spooled", endpoint, self.max_retries + 1, problem)
        return False

    def _requests(self, batch: Batch) -> Iterator[Request]:
        metrics = [{"key": p.key, "step": p.step, "value": json_float(p.value), "time": p.time} for p in batch.metrics]
        logs = [
            {"attempt": self.attempt, "rank": line.rank, "seq": line.seq, "text": line.text[:MAX_LOG_CHARS], "time": line.time}
            for line in batch.logs
        ]
        yield from report_requests(metrics, [sample_record(s) for s in batch.samples], logs)
        for event in batch.checkpoints:
            yield "checkpoints", orjson.dumps(checkpoint_record(event))
        for status in batch.statuses:
            body = {"attempt": self.attempt, "status": status.status, "reason": status.reason[:MAX_REASON_CHARS]}
            if status.last_step is not None:
                body["last_step"] = status.last_step
            yield "status", orjson.dumps(body)


def report_requests(
    metrics: Sequence[dict[str, Any]], samples: Sequence[dict[str, Any]], logs: Sequence[dict[str, Any]]
) -> list[Request]:
    """One `reports` request holding all three kinds when it fits the limits, else row_requests per kind."""
    kinds = {"metrics": metrics, "samples": samples, "logs": logs}
    if not any(kinds.values()):
        return []
    if all(len(rows) <= MAX_ROWS[kind] for kind, rows in kinds.items()):
        body = orjson.dumps({kind: rows for kind, rows in kinds.items() if rows})
        if len(body) <= MAX_BODY_BYTES:
            return [("reports", body)]
    return [request for kind, rows in kinds.items() for request in row_requests(kind, rows)]


def _names_the_run(response: httpx.Response) -> bool:
    """True for the API's own 404 of a missing run, as against the 404 of a path it does not know."""
    return "run" in _detail(response).lower()


def split_report(body: bytes) -> list[Request]:
    """A `reports` body as per-kind requests."""
    report = orjson.loads(body)
    return [request for kind in ("metrics", "samples", "logs") for request in row_requests(kind, report.get(kind, []))]


def row_requests(endpoint: str, rows: Sequence[dict[str, Any]]) -> Iterator[Request]:
    """JSON arrays of at most MAX_ROWS[endpoint] rows and about MAX_BODY_BYTES each."""
    parts: list[bytes] = []
    size = 0
    for row in rows:
        encoded = orjson.dumps(row)
        if parts and (len(parts) >= MAX_ROWS[endpoint] or size + len(encoded) > MAX_BODY_BYTES):
            yield endpoint, b"[" + b",".join(parts) + b"]"
            parts, size = [], 0
        parts.append(encoded)
        size += len(encoded) + 1
    if parts:
        yield endpoint, b"[" + b",".join(parts) + b"]"


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail"))[:1000]
    except (ValueError, AttributeError):
        return response.text[:1000]


class Spool:
    """Requests not yet delivered, oldest first: one JSON file each in `directory` (survives a restart), else in memory."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self._memory: deque[Request] = deque()
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            existing = self._files()
            self._next = int(existing[-1].name.split(".")[0]) + 1 if existing else 0

    @property
    def where(self) -> str:
        return str(self.directory) if self.directory is not None else "memory"

    def __len__(self) -> int:
        return len(self._files()) if self.directory is not None else len(self._memory)

    def extend(self, requests: Sequence[Request]) -> None:
        if self.directory is None:
            self._memory.extend(requests)
            return
        for endpoint, body in requests:
            path = self.directory / f"{self._next:012d}.{endpoint}.json"
            partial = path.with_suffix(".partial")
            partial.write_bytes(body)
            partial.replace(path)  # a crash mid-write never leaves a half file that looks complete
            self._next += 1

    def peek(self) -> Request | None:
        if self.directory is None:
            return self._memory[0] if self._memory else None
        files = self._files()
        return (files[0].name.split(".")[1], files[0].read_bytes()) if files else None

    def pop(self) -> None:
        if self.directory is None:
            self._memory.popleft()
        else:
            self._files()[0].unlink()

    def _files(self) -> list[Path]:
        return sorted(self.directory.glob("*.json"))  # type: ignore[union-attr]
