"""Per-block summaries of each series, kept by ingest, so long series downsample without a full scan.

A chart asks for ~1500 points; a run may hold a million per key. Reading and grouping a million
rows takes seconds on SQLite, so every ingest also keeps, for blocks of WIDTHS steps, the count,
min and max (NaN skipped) and the last point. A long series is then downsampled from a few
thousand block rows. Shorter series, and any request with a step range, still read raw points.

Ingest is idempotent, so a block must count each point once: when the whole batch was new the
batch's own summary is merged into the stored one; when some of it was already stored (a replay,
a point twice in one batch) the touched blocks are recomputed from the points themselves.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select, text
from sqlalchemy.orm import Session

from api.metrics import schemas
from api.metrics.buckets import Buckets
from api.models import Metric, MetricRollup

WIDTHS = (32, 512)
RAW_LIMIT = 50_000  # up to this many points, grouping the raw points is fast enough and exact to the step

Block = tuple[int, str, int]  # (width, key, block)


@dataclass(frozen=True)
class Summary:
    count: int
    min: float | None
    max: float | None
    first_step: int
    last_step: int
    last_value: float
    last_is_nan: bool
    last_time: float


def summarise(rows: Iterable[dict[str, Any]]) -> dict[Block, Summary]:
    """Block summaries of a batch of metric rows (before they are stored: Postgres ingest rewrites inf in place)."""
    acc: dict[Block, list] = {}  # mutable [count, min, max, first, last, value, nan, time]: ingest's hot path
    for row in rows:
        step, nan, value = row["step"], row["is_nan"], row["value"]
        for width in WIDTHS:
            where = (width, row["key"], step // width)
            a = acc.get(where)
            if a is None:
                edge = None if nan else value
                acc[where] = [1, edge, edge, step, step, value, nan, row["time"]]
                continue
            a[0] += 1
            if not nan:
                if a[1] is None or value < a[1]:
                    a[1] = value
                if a[2] is None or value > a[2]:
                    a[2] = value
            if step < a[3]:
                a[3] = step
            if step > a[4]:
                a[4], a[5], a[6], a[7] = step, value, nan, row["time"]
    return {where: Summary(*a) for where, a in acc.items()}


def record(session: Session, run_id: int, batch: dict[Block, Summary], accepted: int, sent: int) -> None:
    """Bring the blocks a batch touched up to date, given how many of its `sent` rows were new."""
    if accepted == 0 or not batch:
        return
    if accepted == sent:  # merged into the stored blocks by the database: no read on the hot path
        _upsert(session, run_id, batch, merge=True)
    else:
        _upsert(session, run_id, _recomputed(session, run_id, batch.keys()), merge=False)


def _recomputed(session: Session, run_id: int, blocks: Iterable[Block]) -> dict[Block, Summary]:
    out: dict[Block, Summary] = {}
    for width, key, block in blocks:
        scope = [Metric.run_id == run_id, Metric.key == key, Metric.step >= block * width, Metric.step < (block + 1) * width]
        points = session.execute(select(Metric.step, Metric.value, Metric.is_nan, Metric.time).where(*scope))
        rows = [{"key": key, "step": s, "value": v, "is_nan": n, "time": t} for s, v, n, t in points]
        out[(width, key, block)] = summarise(rows)[(width, key, block)]
    return out


_COLUMNS = ("run_id", "key", "width", "block", "count", "min", "max", "first_step", "last_step", "last_value",
            "last_is_nan", "last_time")  # fmt: skip


def _assignment(column: str, merge: bool) -> str:
    """The new value of a column on conflict: the incoming one, or (merge) both combined: counts add,
    NULL min/max are skipped, the block's later point wins."""
    old, new = f'metric_rollups."{column}"', f'excluded."{column}"'
    if not merge:
        return new
    if column == "count":
        return f"{old} + {new}"
    if column in ("min", "max", "first_step"):
        better = "<" if column != "max" else ">"
        return f"CASE WHEN {old} IS NULL OR ({new} IS NOT NULL AND {new} {better} {old}) THEN {new} ELSE {old} END"
    return f'CASE WHEN excluded."last_step" > metric_rollups."last_step" THEN {new} ELSE {old} END'


@functools.cache
def _upsert_statement(merge: bool):
    names = ", ".join(f'"{c}"' for c in _COLUMNS)
    values = ", ".join(f":{c}" for c in _COLUMNS)
    updates = ", ".join(f'"{c}" = {_assignment(c, merge)}' for c in _COLUMNS[4:])
    return text(
        f"INSERT INTO metric_rollups ({names}) VALUES ({values}) "
        f'ON CONFLICT ("run_id", "key", "width", "block") DO UPDATE SET {updates}'
    )


def _upsert(session: Session, run_id: int, blocks: dict[Block, Summary], merge: bool) -> None:
    """Write blocks; `merge`: add them to what is stored (a batch of new points), else replace (recomputed blocks)."""
    rows = [
        {"run_id": run_id, "key": key, "width": width, "block": block, **s.__dict__} for (width, key, block), s in blocks.items()
    ]
    if rows:
        session.connection().execute(_upsert_statement(merge), rows)


def series(session: Session, run_id: int, key: str, max_points: int) -> Buckets | None:
    """The series downsampled from its blocks, or None when it is short enough to read raw."""
    scope = [MetricRollup.run_id == run_id, MetricRollup.key == key]
    coarse = session.execute(
        select(func.count(), func.sum(MetricRollup.count)).where(*scope, MetricRollup.width == WIDTHS[-1])
    ).one()
    blocks, total = coarse[0], int(coarse[1] or 0)  # Postgres sums as numeric
    if total <= max(RAW_LIMIT, max_points):
        return None
    # The widest blocks that still give the chart its max_points buckets: fewer rows to group.
    wide = WIDTHS[-1]
    width = next((w for w in reversed(WIDTHS) if min(total, blocks * wide // w) >= max_points), WIDTHS[0])
    scope.append(MetricRollup.width == width)
    lo, hi = session.execute(select(func.min(MetricRollup.first_step), func.max(MetricRollup.last_step)).where(*scope)).one()
    bucket = ((MetricRollup.last_step - lo) * max_points) // (hi - lo + 1)
    grouped = (
        select(
            func.max(MetricRollup.last_step).label("last"),
            func.min(MetricRollup.min).label("lo"),
            func.max(MetricRollup.max).label("hi"),
            func.sum(MetricRollup.count).label("n"),
        )
        .where(*scope)
        .group_by(bucket)
        .subquery()
    )
    last = MetricRollup
    rows = session.execute(
        select(grouped.c.last, grouped.c.lo, grouped.c.hi, grouped.c.n, last.last_value, last.last_is_nan, last.last_time)
        # by primary key: the block holding a bucket's last step
        .join(last, and_(*scope, last.block == grouped.c.last // width))
        .order_by(grouped.c.last)
    )
    # Blocks do not count NaN points: only a NaN at the bucket's last step is known here.
    out = [
        (step, math.nan if nan else value, vmin, vmax, int(n), t, step if nan else None)
        for step, vmin, vmax, n, value, nan, t in rows
    ]
    return Buckets(key, total, True, out)


def key_summaries(session: Session, run_id: int) -> list[schemas.KeySummary]:
    """Every key's point count and last point, from the widest blocks (a run may hold millions of points)."""
    return [schemas.KeySummary(**dataclasses.asdict(row)) for row in key_summary_rows(session, [run_id]).get(run_id, [])]


@dataclass(frozen=True, slots=True)
class KeyRow:
    """A KeySummary's fields as read, for answers written straight to JSON (Compare's poll: a pydantic object for
    each of a 20-run Compare's 6,000 keys, and FastAPI's validation of them again, cost more than the query)."""

    key: str
    count: int
    last_step: int
    last_value: float
    last_time: float


def key_summary_rows(session: Session, run_ids: Iterable[int]) -> dict[int, list[KeyRow]]:
    """key_summaries of several runs in one query (Compare's poll): runs that logged nothing are absent."""
    width = WIDTHS[-1]
    scope = [MetricRollup.run_id.in_(list(run_ids)), MetricRollup.width == width]
    grouped = (
        select(
            MetricRollup.run_id,
            MetricRollup.key,
            func.sum(MetricRollup.count).label("n"),
            func.max(MetricRollup.last_step).label("last"),
        )
        .where(*scope)
        .group_by(MetricRollup.run_id, MetricRollup.key)
        .subquery()
    )
    last = MetricRollup
    rows = session.execute(
        select(grouped.c.run_id, grouped.c.key, grouped.c.n, grouped.c.last, last.last_value, last.last_is_nan, last.last_time)
        .join(last, _last_block(grouped, width))
        .order_by(grouped.c.run_id, grouped.c.key)
    )
    found: dict[int, list[KeyRow]] = {}
    for run_id, k, n, step, v, nan, t in rows:
        found.setdefault(run_id, []).append(KeyRow(k, int(n), int(step), math.nan if nan else float(v), float(t)))
    return found


def _last_block(grouped: Any, width: int) -> ColumnElement[bool]:
    """The join of a per-(run, key) grouping that has each series' `last` step to the block of that width holding it
    (where the last point's value is)."""
    last = MetricRollup
    return and_(
        last.run_id == grouped.c.run_id, last.width == width, last.key == grouped.c.key, last.block == grouped.c.last // width
    )


def latest_points(
    session: Session,
    run_ids: Iterable[int],
    *,
    keys: Iterable[str] = (),
    key_suffix: str | None = None,
    key_prefix: str | None = None,
) -> dict[int, dict[str, tuple[int, float]]]:
    """Each run's last (step, value) of the named keys, and of keys ending in `key_suffix` or starting with
    `key_prefix`, in one query.

    For a whole page of runs at once (the runs list). The suffix match is LIKE, which SQLite applies
    without regard to ASCII case: callers that care compare the keys again.
    """
    run_ids, keys = list(run_ids), list(keys)
    chosen = [MetricRollup.key.in_(keys)] if keys else []
    if key_suffix is not None:
        chosen.append(MetricRollup.key.endswith(key_suffix, autoescape=True))
    if key_prefix is not None:
        chosen.append(MetricRollup.key.startswith(key_prefix, autoescape=True))
    if not run_ids or not chosen:
        return {}
    width = WIDTHS[-1]
    scope = [MetricRollup.run_id.in_(run_ids), MetricRollup.width == width]
    grouped = (
        select(MetricRollup.run_id, MetricRollup.key, func.max(MetricRollup.last_step).label("last"))
        .where(*scope, or_(*chosen))
        .group_by(MetricRollup.run_id, MetricRollup.key)
        .subquery()
    )
    last = MetricRollup
    rows = session.execute(
        select(grouped.c.run_id, grouped.c.key, grouped.c.last, last.last_value, last.last_is_nan).join(
            last, _last_block(grouped, width)
        )
    )
    out: dict[int, dict[str, tuple[int, float]]] = {}
    for run_id, key, step, value, nan in rows:
        out.setdefault(run_id, {})[key] = (step, math.nan if nan else value)
    return out


def backfill_sql(width: int) -> str:
    """Summaries of every stored point at one width, for the migration that adds the table."""
    finite = "CASE WHEN m.is_nan THEN NULL ELSE m.value END"
    return f"""
        INSERT INTO metric_rollups (run_id, "key", width, block, "count", "min", "max", first_step, last_step,
                                    last_value, last_is_nan, last_time)
        SELECT g.run_id, g."key", {int(width)}, g.block, g.n, g.lo, g.hi, g.first_step, g.last_step,
               p.value, p.is_nan, p.time
        FROM (SELECT m.run_id, m."key", m.step / {int(width)} AS block, count(*) AS n, min({finite}) AS lo,
                     max({finite}) AS hi, min(m.step) AS first_step, max(m.step) AS last_step
              FROM metrics m GROUP BY m.run_id, m."key", m.step / {int(width)}) g
        JOIN metrics p ON p.run_id = g.run_id AND p."key" = g."key" AND p.step = g.last_step
    """
