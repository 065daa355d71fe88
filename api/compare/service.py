"""Compare's two requests: every compared run's detail and metric keys since the client's cursor, and the charts'
series of many runs, each from where the client's copy ends. A page of 20 runs then costs one request per poll and
one per batch of charts, whatever the number of runs, and an active run's poll carries only what changed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson
from sqlalchemy.orm import Session, sessionmaker

from api.auth.principal import Principal
from api.compare import schemas
from api.exceptions import Forbidden, NotFound, Unprocessable
from api.metrics import buckets, rollups, series_batch
from api.metrics.rollups import KeyRow
from api.metrics.service import series_buckets
from api.runs import repository, views
from api.runs.service import readable_run
from rlplane.floats import encode

Cursor = tuple[int, int]  # the run's point count and its keys' highest last step, as the client last saw them


def parse_cursors(text: str | None) -> dict[int, Cursor]:
    """`run:count:step,...` (what each run's KeyDelta.cursor said, prefixed with the run's id)."""
    cursors: dict[int, Cursor] = {}
    for part in (text or "").split(","):
        if not part:
            continue
        fields = part.split(":")
        try:
            run_id, count, step = (int(field) for field in fields)
        except ValueError:
            run_id = count = step = -2
        if len(fields) != 3 or run_id < 1 or count < 0 or step < -1:
            said = "the run's id, then its keys' cursor as the last answer gave it"
            raise Unprocessable(["query", "cursors"], f"{part!r} is not RUN:COUNT:STEP ({said})")
        cursors[run_id] = (count, step)
    return cursors


def compare(session: Session, principal: Principal, run_ids: Sequence[int], cursors: dict[int, Cursor]) -> bytes:
    """A Comparison document: each run's detail and key delta; a run the caller may not read, or that does not exist,
    carries its reason instead (the page shows it in the legend, the others still load). Written straight to JSON,
    as the series are: building and validating a pydantic object per key was most of a 20-run poll's time."""
    if len(run_ids) > schemas.MAX_RUNS:
        raise Unprocessable(["query", "runs"], f"at most {schemas.MAX_RUNS} runs a request: ask for the rest in another")
    shown: list[dict[str, Any]] = []
    asked = list(dict.fromkeys(run_ids))
    rows = repository.run_rows_by_id(session, asked)  # readable_run below finds these Runs in the session
    for run_id in asked:
        try:
            readable_run(session, principal, run_id)
        except (NotFound, Forbidden) as refused:
            problem = schemas.RunProblem(status=refused.status_code, detail=str(refused.detail))
            shown.append({"id": run_id, "run": None, "error": problem.model_dump(), "keys": None})
            continue
        shown.append({"id": run_id, "run": None, "error": None, "keys": None})
    readable = {entry["id"]: rows[entry["id"]] for entry in shown if entry["error"] is None}
    details = views.run_details(session, readable, principal)
    summaries = rollups.key_summary_rows(session, list(readable)) if readable else {}
    for entry in shown:
        if entry["error"] is None:
            entry["run"] = details[entry["id"]].model_dump(mode="json")
            entry["keys"] = key_delta(summaries.get(entry["id"], []), cursors.get(entry["id"]))
    return orjson.dumps({"runs": shown})


def key_delta(summaries: list[KeyRow], cursor: Cursor | None) -> dict[str, Any]:
    """A KeyDelta document."""
    count = sum(summary.count for summary in summaries)
    top = max((summary.last_step for summary in summaries), default=-1)
    now = f"{count}:{top}"
    if cursor is None:
        return {"cursor": now, "full": True, "count": count, "data": _summaries(summaries)}
    was_count, was_step = cursor
    changed = [] if count == was_count else [summary for summary in summaries if summary.last_step > was_step]
    return {"cursor": now, "full": False, "count": count, "data": _summaries(changed)}


def _summaries(rows: list[KeyRow]) -> list[dict[str, Any]]:
    return [
        {"key": r.key, "count": r.count, "last_step": r.last_step, "last_value": encode(r.last_value), "last_time": r.last_time}
        for r in rows
    ]


def check_readable(session: Session, principal: Principal, query: schemas.SeriesQuery) -> None:
    for run_id in dict.fromkeys(wanted.run_id for wanted in query.series):
        readable_run(session, principal, run_id)


def series_document(factory: sessionmaker[Session], query: schemas.SeriesQuery) -> Iterator[bytes]:
    """A RunsColumnsResponse, written as it is read: the series that fit in max_points read together
    (api/metrics/series_batch.py), the others one by one. A series asked from `after_step` is its points after it,
    or the whole series, downsampled, when more than max_points arrived."""
    yield f'{{"max_points":{query.max_points},"series":['.encode()
    asked = [series_batch.Wanted(w.run_id, w.key, None if w.after_step is None else w.after_step + 1) for w in query.series]
    with factory() as session:
        read = series_batch.in_chunks(session, asked, query.max_points)
        for i, (wanted, (_, found)) in enumerate(zip(query.series, read, strict=True)):
            after = wanted.after_step
            if found is None:
                after, found = _one_series(session, wanted, query.max_points)
                session.rollback()  # no read snapshot held while the client takes its time
            head = f'{{"run_id":{wanted.run_id},"after_step":{"null" if after is None else after},'.encode()
            text = head + buckets.to_columns_json(found)[1:]
            yield text if i == 0 else b"," + text
    yield b"]}"


def _one_series(session: Session, wanted: schemas.SeriesWanted, max_points: int) -> tuple[int | None, buckets.Buckets]:
    """A series too long to send raw: downsampled, and whole when more than max_points arrived after `after_step`."""
    after = wanted.after_step
    start = None if after is None else after + 1
    found = series_buckets(session, wanted.run_id, wanted.key, max_points, start, None)
    if found.downsampled and start is not None:  # too many to append: the whole series instead
        after = None
        found = series_buckets(session, wanted.run_id, wanted.key, max_points, None, None)
    return after, found
