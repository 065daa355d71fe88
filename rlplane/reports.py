"""Sends reports to the API's run endpoints, surviving an API that is down for minutes.

Each batch becomes one `reports` request (metrics, samples and logs together: the API's cost is
mostly per request) or, when that would be too big, one request per kind; then checkpoints, then
status, in that order.
A request that still fails after the retries goes to a spool, oldest first, and the spool is sent
before anything new. The API ingests idempotently, so a request sent twice stores nothing twice.
The trainer (trainer_core.reporting) and the worker's forwarder both send through `ReportSender`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson

from rlplane.client import ApiError, Client, Unreachable
from rlplane.limits import MAX_ROWS, SEND_BODY_BYTES

logger = logging.getLogger("rlplane.reporting")

Request = tuple[str, bytes]  # (endpoint under /runs/{id}/, JSON body)
JSON = {"Content-Type": "application/json"}


class ReportSender:
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
        """`client`: the transport to send over instead of a new one (tests pass an in-process TestClient)."""
        self._api = Client(api_url, token, timeout=timeout, http=client)
        self._path = f"/runs/{run_id}"
        self.attempt = attempt
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.spool = Spool(spool_dir)
        self._unknown: set[str] = set()  # row fields the API refused as unknown, said once each

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
        self._api.close()

    def _send(self, endpoint: str, body: bytes, trimmed: bool = False) -> bool:
        """True once the API has answered for good (stored, or rejected for a reason a retry won't fix)."""
        problem = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(self.backoff * 2 ** (attempt - 1), self.max_backoff))
            try:
                self._api.request("POST", f"{self._path}/{endpoint}", content=body, headers=JSON, retries=0)
                return True
            except Unreachable as exc:
                problem = str(exc)
                continue
            except ApiError as exc:
                if endpoint == "reports" and exc.status in (404, 405) and "run" not in str(exc.detail).lower():
                    # an API older than this endpoint (a worker upgraded first): the same rows, one request per kind
                    # (the API's own 404 of a missing run names the run)
                    return all(self._send(*request) for request in split_report(body))
                if exc.status == 422 and not trimmed and (known := without_unknown_fields(endpoint, body, exc.detail)):
                    fields = known[1]
                    if not fields <= self._unknown:
                        self._unknown |= fields
                        logger.warning(
                            "reporting: the API does not take %s (it is older): sent without", ", ".join(sorted(fields))
                        )
                    return self._send(endpoint, known[0], trimmed=True)
                if exc.status == 422 and endpoint == "reports":
                    # one kind's refused row costs that kind's rows only, not the others': each kind on its own
                    return all(self._send(*request) for request in split_report(body))
                if exc.status == 429 or exc.status >= 500:
                    problem = f"HTTP {exc.status}"
                    continue
                logger.error("reporting endpoint=%s rejected status=%d detail=%s", endpoint, exc.status, str(exc.detail)[:1000])
                return True
        logger.warning("reporting endpoint=%s unreachable after %d tries (%s); spooled", endpoint, self.max_retries + 1, problem)
        return False


def report_requests(
    metrics: Sequence[dict[str, Any]], samples: Sequence[dict[str, Any]], logs: Sequence[dict[str, Any]]
) -> list[Request]:
    """One `reports` request holding all three kinds when it fits the limits, else row_requests per kind."""
    kinds = {"metrics": metrics, "samples": samples, "logs": logs}
    if not any(kinds.values()):
        return []
    if all(len(rows) <= MAX_ROWS[kind] for kind, rows in kinds.items()):
        body = orjson.dumps({kind: rows for kind, rows in kinds.items() if rows})
        if len(body) <= SEND_BODY_BYTES:
            return [("reports", body)]
    return [request for kind, rows in kinds.items() for request in row_requests(kind, rows)]


def without_unknown_fields(endpoint: str, body: bytes, detail: Any) -> tuple[bytes, set[str]] | None:
    """`body` without the row fields a 422 refused as unknown (an API older than the sender: a newer trainer's or SDK's
    optional field), and their names as `kind.field`; None where the 422 refused anything else."""
    errors = detail if isinstance(detail, list) and detail else None
    if errors is None or any(not isinstance(e, dict) or e.get("type") != "extra_forbidden" for e in errors):
        return None
    document = orjson.loads(body)
    fields: set[str] = set()
    for error in errors:
        loc = list(error.get("loc") or [])[1:]  # after "body"
        if endpoint == "reports" and len(loc) == 3 and isinstance(loc[0], str) and isinstance(loc[1], int):
            kind, rows, field = loc[0], document.get(loc[0]), loc[2]
        elif endpoint != "reports" and len(loc) == 2 and isinstance(loc[0], int):
            kind, rows, field = endpoint, document, loc[1]
        else:
            return None  # not a row's own field
        if not isinstance(rows, list) or not isinstance(field, str):
            return None
        for row in rows:
            if isinstance(row, dict):
                row.pop(field, None)
        fields.add(f"{kind}.{field}")
    return orjson.dumps(document), fields


def split_report(body: bytes) -> list[Request]:
    """A `reports` body as per-kind requests."""
    report = orjson.loads(body)
    return [request for kind in ("metrics", "samples", "logs") for request in row_requests(kind, report.get(kind, []))]


def row_requests(endpoint: str, rows: Sequence[dict[str, Any]]) -> Iterator[Request]:
    """JSON arrays of at most MAX_ROWS[endpoint] rows and about SEND_BODY_BYTES each."""
    parts: list[bytes] = []
    size = 0
    for row in rows:
        encoded = orjson.dumps(row)
        if parts and (len(parts) >= MAX_ROWS[endpoint] or size + len(encoded) > SEND_BODY_BYTES):
            yield endpoint, b"[" + b",".join(parts) + b"]"
            parts, size = [], 0
        parts.append(encoded)
        size += len(encoded) + 1
    if parts:
        yield endpoint, b"[" + b",".join(parts) + b"]"


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
        return sorted(self.directory.glob("[0-9]*.json"))  # type: ignore[union-attr]  (NNN.endpoint.json only)
