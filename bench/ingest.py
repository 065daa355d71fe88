#!/usr/bin/env python3
"""Ingest and listing benchmark: rlplane's HTTP API against MLflow's tracking server, both on Postgres.

Measures, through the real HTTP APIs of real server processes:

  * metric ingest throughput with 100-point batches (points/s, one API process);
  * single-point ingest latency (p50/p99, one client, sequential requests);
  * runs listing latency with --runs runs in the database (p50/p99): the first page of 50,
    a name search and a status filter.

rlplane (`rlplane api`, 1 process) and MLflow (`mlflow server --workers 1`) get the same Postgres server
(each its own database), the same points, the same client and the same CPU pinning. The table shows
both, the ratio rlplane/MLflow, the targets of the performance issue and pass/fail.

    .venv/bin/python bench/ingest.py                      # both systems, about 4-5 minutes on 2 cores
    .venv/bin/python bench/ingest.py --skip-mlflow        # rlplane only, about 1.5 minutes
    .venv/bin/python bench/ingest.py --rev HEAD           # the committed code, not the working tree
    .venv/bin/python bench/ingest.py --src /other/checkout --skip-mlflow   # try a change without committing it
    .venv/bin/python bench/ingest.py --json bench/results/ingest.json

Fairness on a small shared machine: both servers run from the start and the repetitions are
interleaved (rlplane, MLflow, rlplane, ...), so a slow spell hits both; each server is pinned to
--server-cpus and this process, the load generator, to --client-cpus (Postgres floats); every value
is the median of --repeat repetitions after a warm-up. The report says how busy each part was
(server, its Postgres backends, client, everything else) and warns when other processes ran.
See docs/benchmarks.md for results and how to read them.

MLflow lives in its own virtual environment so that its dependencies never touch the project's:

    python3 -m venv bench/.venv-mlflow
    bench/.venv-mlflow/bin/pip install mlflow==3.17.2 psycopg2-binary

(or point --mlflow-bin at any `mlflow` executable). Postgres: --pg names a server where the `postgres`
role may create databases; the databases --db and --db + "_mlflow" are dropped and re-created
(default rlplane_bench, rlplane_bench_mlflow) and dropped again at the end unless --keep.

This is a benchmark, not a test: it prints numbers, and exits non-zero only when something broke
(a server did not start, a request failed), never because a target was missed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import httpx
import psycopg

# bench/ is not an installed package: find ingestbench beside this file however the script is started.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingestbench import REPO, log
from ingestbench.machine import machine_info, rlplane_source
from ingestbench.measure import measure_all
from ingestbench.mlflow_server import DEFAULT_MLFLOW_BIN, MLFLOW_INSTALL_HINT, Mlflow, mlflow_version, start_mlflow
from ingestbench.postgres import Pg
from ingestbench.report import report_text
from ingestbench.rlplane_api import Rlplane, start_rlplane
from ingestbench.systems import System


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=MLFLOW_INSTALL_HINT
    )
    p.add_argument("--points", type=int, default=60_000, help="points per ingest repetition, per system (default 60000)")
    p.add_argument("--batch", type=int, default=100, help="points per ingest request (default 100)")
    p.add_argument("--clients", type=int, default=4, help="concurrent ingest clients, each with its own run (default 4)")
    p.add_argument(
        "--runs", type=int, default=10_000, help="runs in the database for the listing test; 0 skips it (default 10000)"
    )
    p.add_argument(
        "--seed",
        choices=("sql", "api"),
        default="sql",
        help="how the runs are made: sql copies a run created through the API (fast, default); "
        "api POSTs them concurrently (statuses are then spread with SQL)",
    )
    p.add_argument("--repeat", type=int, default=3, help="repetitions of each measurement; the median is reported (default 3)")
    p.add_argument(
        "--latency-requests", type=int, default=500, help="sequential single-point requests per repetition (default 500)"
    )
    p.add_argument(
        "--list-requests", type=int, default=100, help="sequential listing requests per variant and repetition (default 100)"
    )
    p.add_argument("--skip-mlflow", action="store_true", help="measure rlplane only")
    p.add_argument(
        "--mlflow-bin",
        type=Path,
        default=DEFAULT_MLFLOW_BIN,
        help=f"mlflow executable (default {DEFAULT_MLFLOW_BIN.relative_to(REPO)})",
    )
    p.add_argument("--rev", help="benchmark this git revision of rlplane (exported with git archive) instead of the working tree")
    p.add_argument("--src", type=Path, help="benchmark the rlplane code in this directory (a checkout with api/, cli/) instead")
    p.add_argument(
        "--pg", default="postgresql://postgres@127.0.0.1:5432", help="Postgres server URL, no database (default %(default)s)"
    )
    p.add_argument("--db", default="rlplane_bench", help="database for rlplane; MLflow gets DB_mlflow (default %(default)s)")
    p.add_argument("--keep", action="store_true", help="keep both databases afterwards")
    p.add_argument("--server-cpus", default="0", help="CPUs the server under test is pinned to (default 0)")
    p.add_argument("--client-cpus", default="1", help="CPUs this process (the load generator) is pinned to (default 1)")
    p.add_argument("--no-pin", action="store_true", help="pin nothing: servers, clients and Postgres share every CPU")
    p.add_argument("--json", type=Path, help="also write the results here as JSON")
    args = p.parse_args(argv)
    if args.rev and args.src:
        p.error("--rev and --src exclude each other")
    if args.points < args.clients * args.batch:
        p.error("--points must be at least --clients x --batch")
    if args.batch > 1000:
        p.error("--batch: MLflow's log-batch takes at most 1000 metrics")
    return args


def cpu_set(spec: str) -> set[int]:
    cpus: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pg = Pg(args.pg)
    try:
        pg.version()
    except psycopg.Error as exc:
        print(f"cannot reach Postgres at {args.pg}: {exc}", file=sys.stderr)
        return 2
    ml_version = None
    if not args.skip_mlflow:
        if not args.mlflow_bin.exists():
            print(f"MLflow not found at {args.mlflow_bin}: {MLFLOW_INSTALL_HINT}", file=sys.stderr)
            return 2
        ml_version = mlflow_version(args.mlflow_bin)

    available = os.sched_getaffinity(0)
    server_cpus = client_cpus = None
    if not args.no_pin:
        server_cpus, client_cpus = cpu_set(args.server_cpus), cpu_set(args.client_cpus)
        if not (server_cpus | client_cpus) <= available:
            print(f"--server-cpus/--client-cpus must be within {sorted(available)} (or use --no-pin)", file=sys.stderr)
            return 2

    # SIGTERM/SIGHUP unwind like Ctrl-C, so the ExitStack below stops the servers and drops the databases.
    def _unwind(signum, _frame):
        log(f"{signal.Signals(signum).name}: stopping servers" + ("" if args.keep else " and dropping the databases"))
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _unwind)
    signal.signal(signal.SIGHUP, _unwind)

    info = machine_info(pg, ml_version)
    token = secrets.token_hex(24)  # rlplane's first admin
    results: dict[str, dict] = {}
    dbs: list[str] = []
    with ExitStack() as stack:
        # Unwound in reverse: servers stop, then the databases go, then the temp dir (logs, artifacts, exported code).
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rlplane-bench-")))

        def cleanup_dbs() -> None:
            if args.keep:
                for db in dbs:
                    log(f"kept database {pg.db_url(db)}")
                if dbs:
                    log(f"rlplane's admin token there: {token} (start: RLPLANE_DATABASE_URL={pg.db_url(args.db)} rlplane api)")
                return
            for db in dbs:
                try:
                    pg.drop(db)
                except psycopg.Error as exc:
                    log(f"could not drop {db}: {exc}")

        stack.callback(cleanup_dbs)
        try:
            if client_cpus:
                os.sched_setaffinity(0, client_cpus)  # servers get their CPUs in the child, before exec

            systems: list[System] = []
            dbs.append(args.db)
            pg.recreate(args.db)
            src, info["rlplane_code"] = rlplane_source(args.rev, args.src, workdir)
            server = start_rlplane(pg, args.db, token, src, info["rlplane_code"], workdir, server_cpus)
            stack.callback(server.stop)
            systems.append(Rlplane(server, args.db, token))

            if not args.skip_mlflow:
                db = f"{args.db}_mlflow"
                dbs.append(db)
                pg.recreate(db)
                server = start_mlflow(args.mlflow_bin, ml_version, pg, db, workdir, server_cpus)
                stack.callback(server.stop)
                systems.append(Mlflow(server, db))

            results = measure_all(systems, args, pg)
        except KeyboardInterrupt:
            log("interrupted: stopping servers" + ("" if args.keep else " and dropping the databases"))
            return 130
        except (RuntimeError, httpx.HTTPError, psycopg.Error) as exc:
            log(f"failed: {type(exc).__name__}: {exc}")
            return 1

    text, records = report_text(args, info, results)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        args.json.write_text(
            json.dumps({"machine": info, "config": config, "rows": records, "systems": results}, indent=2) + "\n"
        )
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
