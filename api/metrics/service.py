"""Idempotent ingest and deterministic bucketed downsampling (min/max/last per bucket; long series via rollups)."""

import math
import time
from collections.abc import Iterator

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session, sessionmaker

from api.auth.principal import Principal
from api.inserts import IngestResult, ingest_rows
from api.metrics import buckets, rollups, schemas, series_batch
from api.models import Metric
from api.runs.service import claim_for_report
from rlplane.rows import MetricRow


def ingest(session: Session, principal: Principal, run_id: int, points: list[MetricRow]) -> IngestResult:
    claim_for_report(session, principal, run_id, top_step(points))
    return store(session, run_id, points)


def top_step(points: list[MetricRow]) -> int | None:
    return max((p.step for p in points), default=None)


def store(session: Session, run_id: int, points: list[MetricRow]) -> IngestResult:
    """Insert points and keep the rollups; the caller has claimed the run (claim_for_report)."""
    now = time.time()
    rows = [
        {
            "run_id": run_id,
            "key": p.key,
            "step": p.step,
            "value": 0.0 if math.isnan(p.value) else p.value,
            "is_nan": math.isnan(p.value),
            "time": p.time if p.time is not None else now,
        }
        for p in points
    ]
    blocks = rollups.summarise(rows)
    result = ingest_rows(session, Metric, rows, ["run_id", "key", "step"])
    rollups.record(session, run_id, blocks, result.accepted, len(rows))
    return result


def _value_or_null():
    """The value, or NULL for NaN points, so min/max skip NaN the same way on every backend."""
    return case((Metric.is_nan, None), else_=Metric.value)


def key_summaries(session: Session, run_id: int) -> list[schemas.KeySummary]:
    return rollups.key_summaries(session, run_id)


def series_buckets(
    session: Session, run_id: int, key: str, max_points: int, step_min: int | None, step_max: int | None
) -> buckets.Buckets:
    if step_min is None and step_max is None and (summarised := rollups.series(session, run_id, key, max_points)):
        return summarised
    scope = [Metric.run_id == run_id, Metric.key == key]
    if step_min is not None:
        scope.append(Metric.step >= step_min)
    if step_max is not None:
        scope.append(Metric.step <= step_max)
    total, lo, hi = session.execute(select(func.count(), func.min(Metric.step), func.max(Metric.step)).where(*scope)).one()
    if total == 0:
        return buckets.Buckets(key, 0, False, [])
    if total <= max_points:
        rows = session.execute(select(Metric.step, Metric.value, Metric.is_nan, Metric.time).where(*scope).order_by(Metric.step))
        return buckets.Buckets(key, total, False, [buckets.raw(*row) for row in rows])
    span = hi - lo + 1
    # Equal-width step buckets: the same points always give the same buckets, whatever order they arrived in.
    bucket = ((Metric.step - lo) * max_points) // span
    finite = _value_or_null()
    grouped = (
        select(
            func.max(Metric.step).label("last"),
            func.min(finite).label("lo"),
            func.max(finite).label("hi"),
            func.count().label("n"),
            func.min(case((Metric.is_nan, Metric.step), else_=None)).label("nan_from"),
        )
        .where(*scope)
        .group_by(bucket)
        .subquery()
    )
    rows = session.execute(
        select(
            grouped.c.last, grouped.c.lo, grouped.c.hi, grouped.c.n, Metric.value, Metric.is_nan, Metric.time, grouped.c.nan_from
        )
        .join(Metric, and_(*scope, Metric.step == grouped.c.last))
        .order_by(grouped.c.last)
    )
    out = [
        (last, math.nan if nan else value, vmin, vmax, n, t, nan_from) for last, vmin, vmax, n, value, nan, t, nan_from in rows
    ]
    return buckets.Buckets(key, total, True, out)


def series_document(
    factory: sessionmaker[Session],
    run_id: int,
    keys: list[str],
    max_points: int,
    step_min: int | None,
    step_max: int | None,
    columns: bool = False,
) -> Iterator[bytes]:
    """A SeriesResponse (or, with `columns`, a ColumnsResponse) as JSON, written one series at a time.

    A run may log thousands of keys: read whole, every key's series is built and serialised before
    the first byte (seconds, and a copy in memory). Written as they are read, the work stops with
    the series in hand when the client hangs up (the dashboard drops index.html's early all-keys
    request of a run with many keys).
    """
    yield f'{{"run_id":{run_id},"max_points":{max_points},"series":['.encode()
    # Without an upper step, the keys that fit in max_points are read together (a run page's first request: all
    # its keys); a range, and a longer series, one key at a time.
    asked = [series_batch.Wanted(run_id, key, step_min) for key in keys]
    with factory() as session:
        read = series_batch.in_chunks(session, asked, max_points) if step_max is None else ((w, None) for w in asked)
        for i, (wanted, found) in enumerate(read):
            if found is None:
                found = series_buckets(session, run_id, wanted.key, max_points, step_min, step_max)
                session.rollback()  # no read snapshot held while the client takes its time
            text = buckets.to_columns_json(found) if columns else buckets.to_series_json(found)
            yield text if i == 0 else b"," + text
    yield b"]}"


def last_value(session: Session, run_id: int, key: str) -> float | None:
    """The value at the highest step of `key` in run `run_id`; None if it never logged it or it is NaN."""
    row = session.execute(
        select(Metric.value, Metric.is_nan)
        .where(Metric.run_id == run_id, Metric.key == key)
        .order_by(Metric.step.desc())
        .limit(1)
    ).first()
    return None if row is None or row.is_nan else row.value
