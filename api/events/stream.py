"""Poll the run's tables for rows past the cursor and shape them as SSE messages."""

import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.events.cursor import Cursor
from api.floats import encode
from api.models import LogLine, Metric, Run, RunEvent, Sample

BATCH = 1000


RECENT_IDS = 200_000


def current_cursor(session: Session, run_id: int) -> Cursor:
    def top(column, run_column) -> int:
        # A run's rows are found through an index on run_id, so max(id) over a run of a million
        # points reads them all. A run being written to has its newest row among the table's
        # newest ids: look there first (a range of the primary key). The answer is exact: the
        # run's max id is at most the table's, so if the run has a row in the window, its max is there.
        newest = session.scalar(select(func.max(column)))
        if newest is None:
            return 0
        # `run_id + 0`: keeps SQLite off the run_id index, so it walks the primary key range instead.
        recent = session.scalar(select(func.max(column)).where(run_column + 0 == run_id, column > newest - RECENT_IDS))
        if recent is not None:
            return recent
        return session.scalar(select(func.coalesce(func.max(column), 0)).where(run_column == run_id)) or 0

    return Cursor(
        event=top(RunEvent.id, RunEvent.run_id),
        metric=top(Metric.id, Metric.run_id),
        log=top(LogLine.id, LogLine.run_id),
        sample=top(Sample.id, Sample.run_id),
    )


def _metric(m: Metric) -> dict[str, Any]:
    return {"key": m.key, "step": m.step, "value": "NaN" if m.is_nan else encode(m.value), "time": m.time}


def _log(line: LogLine) -> dict[str, Any]:
    return {"id": line.id, "attempt": line.attempt, "rank": line.rank, "seq": line.seq, "text": line.text, "time": line.time}


def _sample(s: Sample) -> dict[str, Any]:
    return {
        "id": s.id,
        "step": s.step,
        "index": s.index,
        "prompt": s.prompt,
        "prompt_hash": s.prompt_hash,
        "response": s.response,
        "reward": "NaN" if s.reward_is_nan else encode(s.reward),
        "kl": "NaN" if s.kl_is_nan else encode(s.kl),
        "scores": s.scores,
    }


_TABLES: list[tuple[str, type, str, Callable[[Any], dict[str, Any]]]] = [
    ("status", RunEvent, "event", lambda e: {"id": e.id, **e.payload, "time": e.created_at.isoformat()}),
    ("metrics", Metric, "metric", _metric),
    ("logs", LogLine, "log", _log),
    ("samples", Sample, "sample", _sample),
]


def poll(session: Session, run_id: int, cursor: Cursor) -> tuple[list[str], Cursor, bool]:
    """SSE messages for new rows, the advanced cursor, and whether the run still exists."""
    if session.get(Run, run_id) is None:
        return [_message("deleted", {"run_id": run_id}, cursor)], cursor, False
    messages = []
    for event, model, field, shape in _TABLES:
        rows = session.scalars(
            select(model).where(model.run_id == run_id, model.id > getattr(cursor, field)).order_by(model.id).limit(BATCH)
        ).all()
        if rows:
            cursor = cursor.advanced(**{field: rows[-1].id})
            messages.append(_message(event, [shape(r) for r in rows], cursor))
    return messages, cursor, True


def _message(event: str, data: Any, cursor: Cursor) -> str:
    return f"id: {cursor.encode()}\nevent: {event}\ndata: {json.dumps(data, allow_nan=False, separators=(',', ':'))}\n\n"


def hello(run: Run, cursor: Cursor) -> str:
    return _message("hello", {"run_id": run.id, "status": run.status, "last_step": run.last_step}, cursor)
