"""Read a run's tables past a cursor and shape the rows as SSE messages, encoded once for every stream."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.events.cursor import Cursor
from api.models import LogLine, Metric, Run, RunEvent, Sample
from rlplane.floats import encode

BATCH = 1000  # rows per message
READ_ROWS = 10_000  # rows per table per read: a busy run's points go out in a few large writes, not many small ones
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


@dataclass(frozen=True)
class Table:
    event: str
    field: str  # the Cursor field that counts this table's ids
    model: type
    columns: tuple[Any, ...]
    encode: Callable[[Sequence[Any]], bytes]  # rows, as the columns listed, id first -> the message's data


def each(shape: Callable[[Any], dict[str, Any]]) -> Callable[[Sequence[Any]], bytes]:
    """A message that is a list of one object per row."""
    return lambda rows: orjson.dumps([shape(r) for r in rows])


def metric_columns(rows: Sequence[Any]) -> bytes:
    """Metrics as one entry per key, its points as columns in id order:
    [{key, step: [..], value: [..], time0, time_ms: [..]}], a point's time being time0 + time_ms / 1000 seconds.

    Every open dashboard gets every point, so the bytes are what the fan-out pays for, in the API's socket
    writes and in every browser: a point as its own object repeats its key and four field names (about 90
    bytes); as columns it is its three numbers (about 45), and its time as milliseconds after the key's first
    one (a wall-clock time repeats its ten leading digits in every point) about 27. A chart's time axis needs
    no finer time than a millisecond; the /metrics/columns history keeps the stored one."""
    series: dict[str, tuple[float, list, list, list]] = {}
    for _, key, step, value, is_nan, time in rows:
        columns = series.get(key)
        if columns is None:
            columns = series[key] = (time, [], [], [])
        columns[1].append(step)
        columns[2].append("NaN" if is_nan else encode(value))
        columns[3].append(round((time - columns[0]) * 1000))
    return orjson.dumps([{"key": k, "step": s, "value": v, "time0": t0, "time_ms": t} for k, (t0, s, v, t) in series.items()])


# Only what a view reads (frontend/src/pages/run): samples just say that the samples tab should refetch, so
# their prompts and responses (up to 65,536 characters each) are not copied to every open dashboard.
TABLES = (
    Table(
        "status",
        "event",
        RunEvent,
        (RunEvent.id, RunEvent.payload, RunEvent.created_at),
        each(lambda r: {"id": r[0], **r[1], "time": r[2].isoformat()}),
    ),
    Table(
        "metrics",
        "metric",
        Metric,
        (Metric.id, Metric.key, Metric.step, Metric.value, Metric.is_nan, Metric.time),
        metric_columns,
    ),
    Table(
        "logs",
        "log",
        LogLine,
        (LogLine.id, LogLine.rank, LogLine.text, LogLine.time),
        each(lambda r: {"id": r[0], "rank": r[1], "text": r[2], "time": r[3]}),
    ),
    Table("samples", "sample", Sample, (Sample.id, Sample.step), each(lambda r: {"id": r[0], "step": r[1]})),
)


@dataclass(frozen=True)
class Part:
    """Up to BATCH new rows of one table, with their ids, so a stream can skip rows it has already."""

    table: Table
    ids: tuple[int, ...]
    rows: tuple[Any, ...]  # as the table's columns


@dataclass(frozen=True)
class Batch:
    """What one read found past `before`: the cursor after it, and the messages for a stream that was at `before`."""

    before: Cursor
    after: Cursor
    parts: tuple[Part, ...]
    full: bool  # a table had more rows than one read takes
    wire: bytes

    @property
    def rows(self) -> int:
        return sum(len(p.ids) for p in self.parts)

    def for_stream(self, cursor: Cursor) -> tuple[bytes, Cursor]:
        """The messages for a stream at `cursor`, and its cursor after them: the shared bytes when it was at
        `before` (every stream that follows the feed), else only the rows past its own cursor."""
        if cursor == self.before:
            return self.wire, self.after
        out = []
        for part in self.parts:
            seen = getattr(cursor, part.table.field)
            fresh = [i for i, row_id in enumerate(part.ids) if row_id > seen]
            if fresh:
                cursor = cursor.advanced(**{part.table.field: part.ids[fresh[-1]]})
                out.append(message(part.table.event, part.table.encode([part.rows[i] for i in fresh]), cursor))
        return b"".join(out), cursor


def read(session: Session, run_id: int, cursor: Cursor) -> Batch | None:
    """The rows past `cursor`, or None when the run is gone."""
    if session.get(Run, run_id) is None:
        return None
    before, parts, wire, full = cursor, [], [], False
    connection = session.connection()  # Core rows: the ORM's loading costs more than the rest of a read
    for table in TABLES:
        found = connection.execute(
            select(*table.columns)
            .where(table.model.run_id == run_id, table.model.id > getattr(cursor, table.field))
            .order_by(table.model.id)
            .limit(READ_ROWS)
        ).all()
        full |= len(found) == READ_ROWS
        for start in range(0, len(found), BATCH):
            chunk = found[start : start + BATCH]
            part = Part(table, tuple(r[0] for r in chunk), tuple(chunk))
            cursor = cursor.advanced(**{table.field: part.ids[-1]})
            parts.append(part)
            wire.append(message(table.event, table.encode(chunk), cursor))
    return Batch(before, cursor, tuple(parts), full, b"".join(wire))


def message(event: str, data: bytes, cursor: Cursor) -> bytes:
    return b"id: %s\nevent: %s\ndata: %s\n\n" % (cursor.encode().encode(), event.encode(), data)


def hello(run_id: int, status: str, last_step: int | None, cursor: Cursor) -> bytes:
    return message("hello", orjson.dumps({"run_id": run_id, "status": status, "last_step": last_step}), cursor)


def deleted(run_id: int, cursor: Cursor) -> bytes:
    return message("deleted", orjson.dumps({"run_id": run_id}), cursor)
