"""A downsampled series as plain tuples, shaped for the wire as points or as columns.

The bucketing (service.series_buckets, rollups.series) produces tuples; building a pydantic
object per point cost as much as reading the rows, so both shapes are written straight to JSON:
points (schemas.Series, what GET /metrics documents) and columns (schemas.SeriesColumns, one
list per field: half the bytes, what the dashboard's charts fetch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson

from rlplane.floats import encode

# step, value (NaN for a NaN point), min, max (None: no finite value), count, time, first NaN step
Bucket = tuple[int, float, float | None, float | None, int, float, int | None]


@dataclass(frozen=True)
class Buckets:
    key: str
    total_points: int
    downsampled: bool
    rows: list[Bucket]


def raw(step: int, value: float, nan: bool, time: float) -> Bucket:
    """One stored point as a bucket of its own."""
    edge = None if nan else value
    return (step, math.nan if nan else value, edge, edge, 1, time, step if nan else None)


def _wire(value: float | None) -> float | str | None:
    return value if value is None or math.isfinite(value) else encode(value)


def to_series_json(b: Buckets) -> bytes:
    """A Series document (schemas.Series), written without an object per point."""
    points = [
        {"step": s, "value": _wire(v), "min": _wire(lo), "max": _wire(hi), "count": n, "time": t, "first_nan_step": f}
        for s, v, lo, hi, n, t, f in b.rows
    ]
    return orjson.dumps({"key": b.key, "total_points": b.total_points, "downsampled": b.downsampled, "points": points})


def to_columns_json(b: Buckets) -> bytes:
    """A SeriesColumns document (JSON has no NaN or infinity: they travel as strings, as everywhere).

    A series that is not downsampled is its stored points, each a bucket of its own, whose min, max, count and first
    NaN step follow from its value and step (`raw`): those columns are left out, less than half the bytes of a
    1,000-point series, which is most of what a 20-run Compare waits for."""
    rows = b.rows
    document = {
        "key": b.key,
        "total_points": b.total_points,
        "downsampled": b.downsampled,
        "step": [r[0] for r in rows],
        "value": [_wire(r[1]) for r in rows],
        "time": [r[5] for r in rows],
    }
    if b.downsampled:
        document |= {
            "min": [_wire(r[2]) for r in rows],
            "max": [_wire(r[3]) for r in rows],
            "count": [r[4] for r in rows],
            "first_nan_step": [r[6] for r in rows],
        }
    return orjson.dumps(document)
