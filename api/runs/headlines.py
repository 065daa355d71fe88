"""The one metric the runs list shows beside each run, read for a whole page at once."""

from collections.abc import Sequence

from sqlalchemy.orm import Session

from api.metrics import rollups
from api.runs import schemas
from rlplane.spec.algorithms import TABLE

# What says most about a run of each algorithm, best first (the algorithm table's headlines).
HEADLINES: dict[str, tuple[str, ...]] = {a.name: a.headlines for a in TABLE if a.headlines}
# An algorithm the table does not know yet.
FALLBACK = ("eval/loss", "reward/mean", "train/loss", "loss")
# When none of its names was logged, the first key (by name) ending in this.
LAST_RESORT_SUFFIX = "loss"

_NAMED = sorted({name for names in (*HEADLINES.values(), FALLBACK) for name in names})

Latest = dict[str, tuple[int, float]]  # key -> (step, value) of its last point


def _named(latest: Latest, algorithm: str) -> schemas.HeadlineMetric | None:
    key = next((k for k in HEADLINES.get(algorithm, FALLBACK) if k in latest), None)
    return _headline(key, latest[key]) if key is not None else None


def _by_suffix(latest: Latest) -> schemas.HeadlineMetric | None:
    # Compared here, not only in the query: SQLite's LIKE ignores case.
    key = next((k for k in sorted(latest) if k.endswith(LAST_RESORT_SUFFIX)), None)
    return _headline(key, latest[key]) if key is not None else None


def _headline(key: str, point: tuple[int, float]) -> schemas.HeadlineMetric:
    step, value = point
    return schemas.HeadlineMetric(key=key, step=step, value=value)


def page_headlines(session: Session, runs: Sequence[tuple[int, str]]) -> dict[int, schemas.HeadlineMetric | None]:
    """The headline of each (run id, algorithm): its algorithm's first named key that it logged, else its first
    key (by name) ending in "loss". One query for the page's named keys, and a second only for the runs that
    logged none of theirs (matching a suffix reads every key of a run)."""
    named = rollups.latest_points(session, [run_id for run_id, _ in runs], keys=_NAMED)
    picked = {run_id: _named(named.get(run_id, {}), algorithm) for run_id, algorithm in runs}
    unnamed = [run_id for run_id, headline in picked.items() if headline is None]
    if unnamed:
        by_suffix = rollups.latest_points(session, unnamed, key_suffix=LAST_RESORT_SUFFIX)
        picked.update({run_id: _by_suffix(by_suffix.get(run_id, {})) for run_id in unnamed})
    return picked
