"""The fleet of bench/dashboard.py's fleet case: many runs x many keys x many steps (500 x 300 x 1,000, 150 million
points) in Postgres, for the runs list, a 20-run Compare and a run page to be opened against.

The runs are made through the API (POST /runs, on a queue no worker serves); their points are written by SQL
(INSERT ... SELECT over generate_series), and their rollups by one grouped INSERT per slice of runs, as ingest would
have kept them (api/metrics/rollups.py): ingest through the API takes about 10 s a million points here, a day for the
fleet. The values follow bench/dashboard.py's many-keys runs (key i at step s: i + sin(s / 50)), shifted per run so
that compared lines differ. Most runs end succeeded; the first `active` stay queued (active: Compare polls them).
"""

from __future__ import annotations

import time

import psycopg

WIDTHS = (32, 512)  # api/metrics/rollups.py WIDTHS
SLICE = 10  # runs per INSERT: about 3 million rows, a progress line each


def key_names(keys: int, first: str) -> list[str]:
    return [first, "ppo/kl", "train/loss", *(f"layers/{i:04d}/grad_norm" for i in range(keys - 3))]


def fill(dsn: str, run_ids: list[int], names: list[str], steps: int, active: int, say=print) -> float:
    """Write every run's points and rollups; mark all but the first `active` runs succeeded. Returns the seconds."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("CREATE TEMP TABLE fleet_keys (i int, key text)")
        with db.cursor().copy("COPY fleet_keys (i, key) FROM STDIN") as copy:
            for i, name in enumerate(names):
                copy.write_row((i, name))
        for first in range(0, len(run_ids), SLICE):
            ids = run_ids[first : first + SLICE]
            db.execute(
                "INSERT INTO metrics (run_id, key, step, value, is_nan, time) "
                "SELECT r, k.key, s, k.i + sin(s / 50.0 + r / 7.0), false, 1.7e9 + s "
                "FROM unnest(%s::int[]) r, fleet_keys k, generate_series(0, %s) s ORDER BY r, k.key, s",
                (ids, steps - 1),
            )
            for width in WIDTHS:
                db.execute(
                    "INSERT INTO metric_rollups (run_id, key, width, block, count, min, max, first_step, last_step, "
                    "last_value, last_is_nan, last_time) "
                    "SELECT run_id, key, %s, step / %s, count(*), min(value), max(value), min(step), max(step), "
                    "(array_agg(value ORDER BY step DESC))[1], false, (array_agg(time ORDER BY step DESC))[1] "
                    "FROM metrics WHERE run_id = ANY(%s) GROUP BY 1, 2, 4",
                    (width, width, ids),
                )
            done = first + len(ids)
            took = time.perf_counter() - started
            say(f"  fleet: {done}/{len(run_ids)} runs, {done * len(names) * steps:,} points, {took:.0f} s")
        ended = run_ids[active:]
        db.execute(
            "UPDATE runs SET status = 'succeeded', last_step = %s, started_at = now() - interval '2 hours', "
            "ended_at = now() - interval '1 hour' WHERE id = ANY(%s)",
            (steps - 1, ended),
        )
        db.execute("ANALYZE metrics")
        db.execute("ANALYZE metric_rollups")
    return time.perf_counter() - started
