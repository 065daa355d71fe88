"""The report: the results table with targets and pass/fail, and the lines about setup and CPU use around it."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Any

from ingestbench.load import KEYS_PER_BATCH
from ingestbench.systems import SEARCH_TERM

# Targets from the performance issue (2-core machine).
TARGET_POINTS_PER_S = 20_000
TARGET_SINGLE_P99_MS = 10.0
TARGET_LIST_P99_MS = 200.0


@dataclass
class Row:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    target: float | None = None


def rows_for(args: argparse.Namespace) -> list[Row]:
    rows = [
        Row(
            "ingest_points_per_s",
            f"ingest, {args.batch}-point batches, {args.clients} clients",
            "pts/s",
            True,
            TARGET_POINTS_PER_S,
        ),
        Row("ingest_batch_p50_ms", f"  {args.batch}-point request p50 under that load", "ms", False),
        Row("ingest_batch_p99_ms", f"  {args.batch}-point request p99 under that load", "ms", False),
        Row("single_p50_ms", "single-point ingest p50", "ms", False),
        Row("single_p99_ms", "single-point ingest p99", "ms", False, TARGET_SINGLE_P99_MS),
    ]
    if args.runs > 0:
        for variant, label in (
            ("", "list runs limit=50"),
            ("q", f"list runs q={SEARCH_TERM}"),
            ("status", "list runs status=queued"),
        ):
            rows.append(Row(f"list{variant}_p50_ms", f"{label} p50", "ms", False))
            rows.append(Row(f"list{variant}_p99_ms", f"{label} p99", "ms", False, TARGET_LIST_P99_MS))
    return rows


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "pts/s":
        return f"{value:,.0f}"
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def table(rows: list[Row], results: dict[str, dict]) -> tuple[str, list[dict]]:
    rl, ml = results.get("rlplane", {}).get("median", {}), results.get("MLflow", {}).get("median", {})
    header = ("metric", "unit", "rlplane", "MLflow", "rl/ML", "speed-up", "target", "pass")
    lines, records = [], []
    for row in rows:
        a, b = rl.get(row.key), ml.get(row.key)
        ratio = a / b if a is not None and b else None
        speedup = None if ratio is None or ratio == 0 else (ratio if row.higher_is_better else 1 / ratio)
        if row.target is None or a is None:
            target, passed = "-", "-"
        else:
            target = (">= " if row.higher_is_better else "<= ") + fmt(row.target, row.unit)
            passed = "PASS" if (a >= row.target if row.higher_is_better else a <= row.target) else "FAIL"
        lines.append(
            (
                row.label,
                row.unit,
                fmt(a, row.unit),
                fmt(b, row.unit),
                "-" if ratio is None else f"{ratio:.2f}",
                "-" if speedup is None else f"{speedup:.1f}x",
                target,
                passed,
            )
        )
        records.append(
            {
                "metric": row.key,
                "label": row.label,
                "unit": row.unit,
                "rlplane": a,
                "mlflow": b,
                "ratio_rlplane_over_mlflow": None if ratio is None else round(ratio, 4),
                "rlplane_speedup": None if speedup is None else round(speedup, 2),
                "target": row.target,
                "pass": None if passed == "-" else passed == "PASS",
            }
        )
    widths = [max(len(str(x[i])) for x in [header, *lines]) for i in range(len(header))]
    right = {2, 3, 4, 5, 6}

    def render(cells) -> str:
        return "  ".join(
            str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    out = [render(header), render(["-" * w for w in widths]), *(render(line) for line in lines)]
    return "\n".join(out), records


def report_text(args: argparse.Namespace, info: dict[str, Any], results: dict[str, dict]) -> tuple[str, list[dict]]:
    """The whole printed report (setup lines, the table, CPU lines) and the table's rows as records for the JSON."""
    text, records = table(rows_for(args), results)
    return "\n".join(header_lines(args, info)) + "\n\n" + text + "\n\n" + "\n".join(footer_lines(results)), records


def header_lines(args: argparse.Namespace, info: dict[str, Any]) -> list[str]:
    pin = (
        "not pinned: servers, clients and Postgres share all CPUs"
        if args.no_pin
        else f"server under test pinned to CPU {args.server_cpus}, load generator (this process) to CPU {args.client_cpus}, "
        "Postgres not pinned"
    )
    header = [
        "rlplane ingest benchmark (bench/ingest.py)",
        f"machine: {info['cpus']} CPUs ({info['cpu_model']}), {info['memory']}, Linux {info['kernel']}; "
        f"load average at start {info['loadavg_at_start']}",
        f"software: Python {info['python']}, PostgreSQL {info['postgres']} "
        f"(shared_buffers {info['postgres_settings']['shared_buffers']}, "
        f"synchronous_commit {info['postgres_settings']['synchronous_commit']}), MLflow {info['mlflow'] or '-'}",
        f"servers: `rlplane api` (1 process; code: {info.get('rlplane_code', '-')}) | `mlflow server --workers 1` "
        "(job runner off); "
        "same Postgres server, one database each",
        f"CPUs: {pin}. The client shares this machine's cores with the servers and Postgres.",
        f"client: httpx {info['httpx']}, keep-alive; ingest: {args.clients} threads, each into its own run; "
        "latencies: 1 client, sequential requests",
        f"ingest: {args.points:,} points per repetition in {args.batch}-point batches ({KEYS_PER_BATCH} keys x "
        f"{max(1, args.batch // KEYS_PER_BATCH)} steps); rlplane POST /api/v1/runs/{{id}}/metrics, MLflow POST runs/log-batch",
        f"single point: {args.latency_requests} sequential requests; rlplane 1-point batch, MLflow POST runs/log-metric",
    ]
    if args.runs:
        header.append(
            f"listing: {args.runs:,} runs made by "
            f"{'SQL copies of a run created through the API' if args.seed == 'sql' else 'concurrent API POSTs'}; "
            f"{args.list_requests} sequential requests per variant; "
            "rlplane GET /api/v1/runs, MLflow POST runs/search max_results=50"
        )
    header.append(
        f"each value: median of {args.repeat} repetitions after a warm-up; rl/ML = rlplane / MLflow; "
        "speed-up = how many times faster rlplane is"
    )
    return header


def footer_lines(results: dict[str, dict]) -> list[str]:
    floors = ", ".join(f"{name} {r['floor_p50_ms']:.2f} ms" for name, r in results.items())
    footer = [f"latency floor (GET /healthz | /health, p50, same client, no database): {floors}"]
    for name, r in results.items():
        cores = r["cpu"].get("ingest_points_per_s", [])
        if cores:
            mid = sorted(cores, key=lambda c: c["server"])[len(cores) // 2]
            footer.append(
                f"{name} during ingest, CPU cores busy: server {mid['server']:.2f}, postgres {mid['postgres']:.2f}, "
                f"client {mid['client']:.2f}, other processes {mid['other']:.2f}"
            )
    others = [c["other"] for r in results.values() for phase in r["cpu"].values() for c in phase]
    if others:
        footer.append(
            f"other processes on the machine while measuring (not the servers, their Postgres or the client): "
            f"median {statistics.median(others):.2f} cores, max {max(others):.2f}"
        )
        if statistics.median(others) > 0.1 or max(others) > 0.3:
            footer.append("WARNING: the machine was not idle while measuring; these numbers are noisy. Run again when it is.")
    return footer
