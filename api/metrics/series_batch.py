"""Many short series read together: a Compare chart's key across 20 runs, or a poll's new points of every run.

Read one at a time (series_buckets), each series costs two or three round trips to the database (its size, then its
points), which for a 20-run Compare's first chart was most of the answer's time (bench/dashboard.py's fleet: 48
queries for 24 series). Here a batch costs at most three whatever its length: the sizes of the whole series (from
the rollups' widest blocks, which count every point), the sizes of the appends (their points after a step), and the
points of every series that fits in max_points. A series with more points than that is left to the caller, which
downsamples it on its own (its size known, nothing of it was read).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from sqlalchemy import and_, func, or_, select, tuple_
from sqlalchemy.orm import Session

from api.metrics import buckets, rollups
from api.models import Metric, MetricRollup

# Series per statement: bounds the statement's size (an OR of this many conditions, three parameters each), within
# SQLite's limits on both, and the points held in memory between two writes of the answer.
CHUNK = 100


class Wanted(NamedTuple):
    run_id: int
    key: str
    start: int | None  # the first step wanted; None: the whole series


def in_chunks(session: Session, wanted: Sequence[Wanted], max_points: int) -> Iterator[tuple[Wanted, buckets.Buckets | None]]:
    """raw_series of CHUNK series at a time, each answered as it is read; no read snapshot is held between chunks
    (the caller writes them to a client, which takes its time)."""
    for first in range(0, len(wanted), CHUNK):
        chunk = wanted[first : first + CHUNK]
        read = raw_series(session, chunk, max_points)
        session.rollback()
        yield from zip(chunk, read, strict=True)


def raw_series(session: Session, wanted: Sequence[Wanted], max_points: int) -> list[buckets.Buckets | None]:
    """Each wanted series' points from its start, as raw buckets, when it holds at most max_points of them; None
    for the others, and for a (run, key) asked twice in one batch (its two starts would share one count)."""
    twice = {pair for pair, n in Counter((w.run_id, w.key) for w in wanted).items() if n > 1}
    single = [w for w in wanted if (w.run_id, w.key) not in twice]
    sizes = _whole_sizes(session, [w for w in single if w.start is None])
    sizes.update(_append_sizes(session, [w for w in single if w.start is not None]))
    fitting = [w for w in single if sizes.get((w.run_id, w.key), 0) <= max_points]
    points: dict[tuple[int, str], list[buckets.Bucket]] = {(w.run_id, w.key): [] for w in fitting}
    if nonempty := [w for w in fitting if (w.run_id, w.key) in sizes]:
        rows = session.execute(
            select(Metric.run_id, Metric.key, Metric.step, Metric.value, Metric.is_nan, Metric.time)
            .where(or_(*map(_scope, nonempty)))
            .order_by(Metric.run_id, Metric.key, Metric.step)
        )
        for run_id, key, step, value, nan, time in rows:
            points[(run_id, key)].append(buckets.raw(step, value, nan, time))
    out: list[buckets.Buckets | None] = []
    for w in wanted:
        held = points.get((w.run_id, w.key))
        out.append(None if held is None else buckets.Buckets(w.key, len(held), False, held))
    return out


def _scope(w: Wanted):
    where = [Metric.run_id == w.run_id, Metric.key == w.key]
    if w.start is not None:
        where.append(Metric.step >= w.start)
    return and_(*where)


def _whole_sizes(session: Session, wholes: list[Wanted]) -> dict[tuple[int, str], int]:
    if not wholes:
        return {}
    pairs = [(w.run_id, w.key) for w in wholes]
    rows = session.execute(
        select(MetricRollup.run_id, MetricRollup.key, func.sum(MetricRollup.count))
        .where(MetricRollup.width == rollups.WIDTHS[-1], tuple_(MetricRollup.run_id, MetricRollup.key).in_(pairs))
        .group_by(MetricRollup.run_id, MetricRollup.key)
    )
    return {(run_id, key): int(total) for run_id, key, total in rows}  # Postgres sums as numeric


def _append_sizes(session: Session, appends: list[Wanted]) -> dict[tuple[int, str], int]:
    if not appends:
        return {}
    rows = session.execute(
        select(Metric.run_id, Metric.key, func.count()).where(or_(*map(_scope, appends))).group_by(Metric.run_id, Metric.key)
    )
    return {(run_id, key): total for run_id, key, total in rows}
