"""The schedule of measurements: warm-ups, then repetitions interleaved across the systems, then the medians."""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from ingestbench import log
from ingestbench.load import floor_latency, ingest_throughput, list_latency, single_point_latency
from ingestbench.postgres import Pg
from ingestbench.systems import System


def measure_all(systems: list[System], args: argparse.Namespace, pg: Pg) -> dict[str, dict[str, Any]]:
    """Every measurement, repetitions interleaved across the systems (rlplane, MLflow, rlplane, ...), so that a
    slow spell of a shared machine hits both rather than one of them."""
    results: dict[str, dict[str, Any]] = {s.name: {"reps": {}, "cpu": {}} for s in systems}
    reps = args.repeat

    def record(system: System, name: str, value: float, cpu: dict[str, float] | None = None) -> None:
        results[system.name]["reps"].setdefault(name, []).append(round(value, 3))
        if cpu is not None:
            results[system.name]["cpu"].setdefault(name, []).append(cpu)

    for system in systems:
        log(f"{system.name}: warm-up")
        ingest_throughput(system, max(args.clients * args.batch * 5, args.points // 4), args.clients, args.batch, "warmup")
        single_point_latency(system, min(100, args.latency_requests), "warmup")
        results[system.name]["floor_p50_ms"] = round(floor_latency(system, 200)["p50_ms"], 3)

    for rep in range(reps):
        for system in systems:
            r = ingest_throughput(system, args.points, args.clients, args.batch, f"rep{rep}")
            record(system, "ingest_points_per_s", r["points_per_s"], r["cpu_cores_used"])
            record(system, "ingest_batch_p50_ms", r["batch_p50_ms"])
            record(system, "ingest_batch_p99_ms", r["batch_p99_ms"])
            log(
                f"{system.name}: ingest {rep + 1}/{reps}: {r['points_per_s']:,.0f} points/s "
                f"({r['points']:,} points in {r['seconds']:.2f} s; CPU cores busy {r['cpu_cores_used']})"
            )
    for rep in range(reps):
        for system in systems:
            r = single_point_latency(system, args.latency_requests, f"rep{rep}")
            record(system, "single_p50_ms", r["p50_ms"])
            record(system, "single_p99_ms", r["p99_ms"], r["cpu_cores_used"])
            log(
                f"{system.name}: single point {rep + 1}/{reps}: p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms "
                f"(CPU cores busy {r['cpu_cores_used']})"
            )

    if args.runs > 0:
        for system in systems:
            log(f"{system.name}: seeding {args.runs:,} runs ({args.seed})")
            t0 = time.monotonic()
            if args.seed == "sql":
                system.seed_sql(pg, args.runs)
            else:
                system.seed_api(pg, args.runs, args.clients)
            results[system.name]["seed_seconds"] = round(time.monotonic() - t0, 1)
            with system.client() as client:
                results[system.name]["list_rows"] = {
                    v or "plain": system.list_rows(client.request(r.method, r.url, content=r.body))
                    for v, r in system.list_requests().items()
                }
            short = {v: n for v, n in results[system.name]["list_rows"].items() if n < 50}
            if short and args.runs >= 1000:
                log(f"{system.name}: WARNING: listing returned fewer than 50 runs: {short}")
            for variant in system.list_requests():
                list_latency(system, variant, 20)  # warm-up
        for rep in range(reps):
            for system in systems:
                for variant in system.list_requests():
                    r = list_latency(system, variant, args.list_requests)
                    record(system, f"list{variant}_p50_ms", r["p50_ms"])
                    record(system, f"list{variant}_p99_ms", r["p99_ms"], r["cpu_cores_used"])
                log(
                    f"{system.name}: listing {rep + 1}/{reps}: "
                    + ", ".join(
                        f"{v or 'plain'} p99 {results[system.name]['reps'][f'list{v}_p99_ms'][-1]:.1f} ms"
                        for v in system.list_requests()
                    )
                )
    for res in results.values():
        res["median"] = {k: round(statistics.median(v), 3) for k, v in res["reps"].items()}
    return results
