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
import ctypes
import json
import math
import os
import platform
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MLFLOW_BIN = REPO / "bench" / ".venv-mlflow" / "bin" / "mlflow"
MLFLOW_INSTALL_HINT = (
    "install MLflow in its own venv (it must not share the project's):\n"
    "    python3 -m venv bench/.venv-mlflow\n"
    "    bench/.venv-mlflow/bin/pip install mlflow==3.17.2 psycopg2-binary\n"
    "or pass --mlflow-bin PATH, or --skip-mlflow"
)
TICKS = os.sysconf("SC_CLK_TCK")

# Targets from the performance issue (2-core machine).
TARGET_POINTS_PER_S = 20_000
TARGET_SINGLE_P99_MS = 10.0
TARGET_LIST_P99_MS = 200.0

KEYS_PER_BATCH = 10  # a 100-point batch is 10 keys x 10 consecutive steps, like a trainer logging every step
SEARCH_WORDS = [
    "amber",
    "birch",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "glacier",
    "harbor",
    "iris",
    "juniper",
    "kestrel",
    "lagoon",
    "meadow",
    "nebula",
    "onyx",
    "prairie",
    "quartz",
    "raven",
    "sierra",
    "tundra",
]
SEARCH_TERM = "glacier"  # 1 run in 20 has it in its name
# Status of seeded run i is STATUS_CYCLE[i % 10]: 1 in 10 is queued, like the `status=queued` filter.
STATUS_CYCLE = ["succeeded", "succeeded", "failed", "succeeded", "cancelled", "running", "succeeded", "queued", "failed", "lost"]
MLFLOW_STATUS = {
    "queued": "SCHEDULED",
    "running": "RUNNING",
    "succeeded": "FINISHED",
    "failed": "FAILED",
    "cancelled": "KILLED",
    "lost": "FAILED",
}
RUN_SPEC = {
    "name": "bench",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2"},
    "data": {"source": "builtin:tiny-sft"},
    "train": {"steps": 1_000_000, "batch_size": 4, "lr": 0.0001},
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# processes, CPUs, cleanup


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_setup(cpus: set[int] | None) -> Callable[[], None]:
    def setup() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        try:  # the server dies with us even if we are SIGKILLed (Linux only; best effort)
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass

    return setup


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    base_url: str
    log_path: Path

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def pids(self) -> list[int]:
        """The server and all its descendants (MLflow forks uvicorn and job runners)."""
        return sorted(descendants(self.proc.pid, {pid: info[0] for pid, info in process_table().items()}))

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after 15 s; then SIGKILL any descendant that left the group."""
        family = self.pids()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                log(f"{self.name}: did not stop in 15 s; killing it")
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in family:
            if pid != self.proc.pid and _read_stat(pid) is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if self.proc.poll() is None:
            self.proc.wait(timeout=5)


def start_server(
    name: str,
    argv: list[str],
    env: dict[str, str],
    ready_path: str,
    port: int,
    workdir: Path,
    cpus: set[int] | None,
    timeout: float,
    cwd: Path | None = None,
) -> Server:
    log_path = workdir / f"{name}.log"
    out = log_path.open("wb")
    proc = subprocess.Popen(
        argv,
        env={**os.environ, **env},
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=cwd or workdir,
        start_new_session=True,
        preexec_fn=_child_setup(cpus),
    )
    out.close()
    server = Server(name, proc, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} while starting:\n{server.tail()}")
            try:
                if client.get(server.base_url + ready_path).status_code == 200:
                    return server
            except httpx.TransportError:
                pass
            time.sleep(0.25)
    server.stop()
    raise RuntimeError(f"{name} was not ready after {timeout:.0f} s:\n{server.tail()}")


def _read_stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from `state` on: [0]=state, [1]=ppid, [11]=utime, [12]=stime


def process_table() -> dict[int, tuple[int, float, str]]:
    """pid -> (ppid, CPU seconds used so far, title) for every process we can see."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _read_stat(int(entry))
        if stat is None:
            continue
        title = ""
        try:
            if Path(f"/proc/{entry}/comm").read_text().strip() == "postgres":
                title = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            pass
        table[int(entry)] = (int(stat[1]), (int(stat[11]) + int(stat[12])) / TICKS, title)
    return table


def descendants(root: int, parents: dict[int, int]) -> set[int]:
    found, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found.add(pid)
                frontier.append(pid)
    return found


class CpuMeter:
    """CPU seconds used over a window, per process, summed into: the server (and its children), Postgres working
    for the benchmark database (its backends and the shared WAL writer, checkpointer, ...), the client (this
    process), and other processes: someone else's work on the machine, which makes the numbers noisy.

    From /proc/PID/stat, not /proc/stat: on this kind of VM /proc/stat shows about one core busy while
    no process runs. Processes that exit inside the window are missed (a short test run elsewhere)."""

    def __init__(self, server: Server, db: str) -> None:
        self.server, self.db = server, db

    def snapshot(self) -> tuple[float, dict[int, tuple[int, float, str]]]:
        return time.monotonic(), process_table()

    def shares(self, start: tuple, end: tuple) -> dict[str, float]:
        wall = end[0] - start[0]
        table, before = end[1], start[1]
        server = descendants(self.server.proc.pid, {pid: info[0] for pid, info in table.items()})
        me = os.getpid()
        totals = {"server": 0.0, "postgres": 0.0, "client": 0.0, "other": 0.0}
        for pid, (_ppid, cpu, title) in table.items():
            used = cpu - before[pid][1] if pid in before else cpu
            if pid in server:
                kind = "server"
            elif pid == me:
                kind = "client"
            elif title and ("(" not in title or f" {self.db} " in title):  # a backend's title names its database
                kind = "postgres"
            else:
                kind = "other"
            totals[kind] += max(0.0, used)
        return {k: round(v / wall, 3) for k, v in totals.items()}


# --------------------------------------------------------------------------------------------------
# Postgres


@dataclass
class Pg:
    url: str  # server URL without a database, e.g. postgresql://postgres@127.0.0.1:5432

    def db_url(self, db: str) -> str:
        return f"{self.url.rstrip('/')}/{db}"

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.db_url("postgres"), autocommit=True)

    def recreate(self, db: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{db}"')

    def drop(self, db: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

    def version(self) -> str:
        with self.admin() as conn:
            return conn.execute("SHOW server_version").fetchone()[0]

    def settings(self) -> dict[str, str]:
        with self.admin() as conn:
            names = ("shared_buffers", "synchronous_commit", "fsync", "max_connections")
            return {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}


# --------------------------------------------------------------------------------------------------
# the two systems under test: the same operations, each in its own API


@dataclass
class Request:
    method: str
    url: str
    body: bytes | None = None
    n: int = 0  # points it carries


class System:
    name: str
    health_path: str
    server: Server
    db: str

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server.base_url, headers=self.headers(), timeout=60)

    def headers(self) -> dict[str, str]:
        return {"content-type": "application/json"}

    def create_run(self, client: httpx.Client, name: str) -> str: ...
    def batch(self, run: str, points: list[tuple[str, int, float, float]]) -> Request: ...
    def single(self, run: str, point: tuple[str, int, float, float]) -> Request: ...
    def check_batch(self, response: httpx.Response, n: int) -> None: ...
    def list_requests(self) -> dict[str, Request]: ...
    def seed_sql(self, pg: Pg, n: int) -> None: ...
    def seed_api(self, pg: Pg, n: int, clients: int) -> None: ...
    def list_rows(self, response: httpx.Response) -> int: ...


def _expect(response: httpx.Response, status: int = 200) -> httpx.Response:
    if response.status_code != status:
        raise RuntimeError(f"{response.request.method} {response.request.url} -> {response.status_code}: {response.text[:500]}")
    return response


def _seed_names_sql(index: str) -> str:
    """SQL for the name of seeded run `index`: e.g. glacier-sft-04217; 1 in 20 names holds each word."""
    return f"(%(words)s::text[])[1 + mod({index} / 10, {len(SEARCH_WORDS)})] || '-sft-' || lpad({index}::text, 5, '0')"


class Rlplane(System):
    name = "rlplane"
    health_path = "/healthz"

    def __init__(self, server: Server, db: str, token: str) -> None:
        self.server, self.db, self.token = server, db, token

    def headers(self) -> dict[str, str]:
        return {"content-type": "application/json", "authorization": f"Bearer {self.token}"}

    def create_run(self, client: httpx.Client, name: str) -> str:
        return str(_expect(client.post("/api/v1/runs", content=orjson.dumps({**RUN_SPEC, "name": name})), 201).json()["id"])

    def batch(self, run, points):
        body = [{"key": k, "step": s, "value": v, "time": t} for k, s, v, t in points]
        return Request("POST", f"/api/v1/runs/{run}/metrics", orjson.dumps(body), len(points))

    def single(self, run, point):
        return self.batch(run, [point])

    def check_batch(self, response, n):
        _expect(response)
        got = response.json()
        if got != {"accepted": n, "duplicates": 0}:
            raise RuntimeError(f"rlplane ingest answered {got}, expected {n} accepted")

    def list_requests(self):
        return {
            "": Request("GET", "/api/v1/runs?limit=50"),
            "q": Request("GET", f"/api/v1/runs?limit=50&q={SEARCH_TERM}"),
            "status": Request("GET", "/api/v1/runs?limit=50&status=queued"),
        }

    def list_rows(self, response):
        return len(_expect(response).json()["data"])

    def seed_sql(self, pg, n):
        with self.client() as client:
            template = self.create_run(client, "seed-template")
        statuses = STATUS_CYCLE
        with psycopg.connect(pg.db_url(self.db), autocommit=True) as conn:
            conn.execute(
                f"""
                INSERT INTO runs (project_id, name, algorithm, backend, queue, status, status_reason, spec, total_steps,
                                  last_step, archived, created_by, created_at, updated_at, started_at, ended_at,
                                  lease_token_id, attempt_count)
                SELECT t.project_id, {_seed_names_sql("i")}, t.algorithm, t.backend, t.queue, s.status, '',
                       jsonb_set(t.spec, '{{name}}', to_jsonb({_seed_names_sql("i")})),
                       t.total_steps,
                       CASE WHEN s.status = 'queued' THEN NULL ELSE 1000 END, false, t.created_by,
                       t.created_at - i * interval '1 second', t.created_at - i * interval '1 second',
                       CASE WHEN s.status = 'queued' THEN NULL ELSE t.created_at - i * interval '1 second' END,
                       CASE WHEN s.status IN ('succeeded', 'failed', 'cancelled', 'lost')
                            THEN t.created_at - i * interval '1 second' + interval '10 minutes' END,
                       NULL, CASE WHEN s.status = 'queued' THEN 0 ELSE 1 END
                FROM runs t, generate_series(1, %(n)s) AS i,
                     LATERAL (SELECT (%(statuses)s::text[])[1 + mod(i, {len(statuses)})] AS status) s
                WHERE t.id = %(template)s
            """,
                {"n": n - 1, "words": SEARCH_WORDS, "statuses": statuses, "template": int(template)},
            )
            conn.execute("ANALYZE runs")

    def seed_api(self, pg, n, clients):
        _parallel_create(self, [f"seed-{i}" for i in range(n)], clients)
        with psycopg.connect(pg.db_url(self.db), autocommit=True) as conn:
            conn.execute(
                f"""
                UPDATE runs r
                SET name = {_seed_names_sql("x.i")}, status = (%(statuses)s::text[])[1 + mod(x.i, {len(STATUS_CYCLE)})],
                    spec = jsonb_set(spec, '{{name}}', to_jsonb({_seed_names_sql("x.i")}))
                FROM (SELECT id, row_number() OVER (ORDER BY id) AS i FROM runs WHERE name LIKE 'seed-%%') x WHERE r.id = x.id
            """,
                {"words": SEARCH_WORDS, "statuses": STATUS_CYCLE},
            )
            conn.execute("ANALYZE runs")


class Mlflow(System):
    name = "MLflow"
    health_path = "/health"

    def __init__(self, server: Server, db: str) -> None:
        self.server, self.db = server, db
        with self.client() as client:
            self.experiment = _expect(client.post("/api/2.0/mlflow/experiments/create", content=b'{"name": "bench"}')).json()[
                "experiment_id"
            ]

    def create_run(self, client, name):
        body = {"experiment_id": self.experiment, "run_name": name, "start_time": int(time.time() * 1000)}
        return _expect(client.post("/api/2.0/mlflow/runs/create", content=orjson.dumps(body))).json()["run"]["info"]["run_id"]

    def batch(self, run, points):
        metrics = [{"key": k, "value": v, "timestamp": int(t * 1000), "step": s} for k, s, v, t in points]
        return Request("POST", "/api/2.0/mlflow/runs/log-batch", orjson.dumps({"run_id": run, "metrics": metrics}), len(points))

    def single(self, run, point):
        k, s, v, t = point
        body = {"run_id": run, "key": k, "value": v, "timestamp": int(t * 1000), "step": s}
        return Request("POST", "/api/2.0/mlflow/runs/log-metric", orjson.dumps(body), 1)

    def check_batch(self, response, n):
        _expect(response)

    def list_requests(self):
        def search(filter_: str) -> Request:
            body = {"experiment_ids": [self.experiment], "max_results": 50, "order_by": ["attributes.start_time DESC"]}
            if filter_:
                body["filter"] = filter_
            return Request("POST", "/api/2.0/mlflow/runs/search", orjson.dumps(body))

        return {
            "": search(""),
            "q": search(f"attributes.run_name ILIKE '%{SEARCH_TERM}%'"),
            "status": search(f"attributes.status = '{MLFLOW_STATUS['queued']}'"),
        }

    def list_rows(self, response):
        return len(_expect(response).json().get("runs", []))

    def seed_sql(self, pg, n):
        with self.client() as client:
            template = self.create_run(client, "seed-template")
        statuses = [MLFLOW_STATUS[s] for s in STATUS_CYCLE]
        with psycopg.connect(pg.db_url(self.db), autocommit=True) as conn:
            conn.execute(
                f"""
                CREATE TEMP TABLE seeded AS
                SELECT md5(i::text || '-' || random()::text) AS run_uuid, {_seed_names_sql("i")} AS name,
                       (%(statuses)s::text[])[1 + mod(i, {len(statuses)})] AS status, i
                FROM generate_series(1, %(n)s) AS i
            """,
                {"n": n - 1, "words": SEARCH_WORDS, "statuses": statuses},
            )
            conn.execute(
                """
                INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, user_id, status, start_time,
                                  end_time, source_version, lifecycle_stage, artifact_uri, experiment_id, deleted_time)
                SELECT s.run_uuid, s.name, t.source_type, t.source_name, t.entry_point_name, t.user_id, s.status,
                       t.start_time - s.i * 1000,
                       CASE WHEN s.status IN ('FINISHED', 'FAILED', 'KILLED') THEN t.start_time - s.i * 1000 + 600000 END,
                       t.source_version, t.lifecycle_stage, replace(t.artifact_uri, t.run_uuid, s.run_uuid),
                       t.experiment_id, NULL
                FROM runs t, seeded s WHERE t.run_uuid = %(template)s
            """,
                {"template": template},
            )
            # MLflow keeps the run name in a tag too; copy every tag of the template, renamed where it is the name.
            conn.execute(
                """
                INSERT INTO tags (key, value, run_uuid)
                SELECT g.key, CASE WHEN g.key = 'mlflow.runName' THEN s.name ELSE g.value END, s.run_uuid
                FROM tags g, seeded s WHERE g.run_uuid = %(template)s
            """,
                {"template": template},
            )
            conn.execute("ANALYZE runs")
            conn.execute("ANALYZE tags")

    def seed_api(self, pg, n, clients):
        _parallel_create(self, [f"seed-{i}" for i in range(n)], clients)
        with psycopg.connect(pg.db_url(self.db), autocommit=True) as conn:
            for table in ("tags", "runs"):  # tags first: both find the runs by their `seed-` names
                column = "name" if table == "runs" else "value"
                extra = "" if table == "runs" else "AND t.key = 'mlflow.runName'"
                conn.execute(
                    f"""
                    UPDATE {table} t SET {column} = {_seed_names_sql("x.i")}
                    FROM (SELECT run_uuid, row_number() OVER (ORDER BY start_time, run_uuid) AS i
                          FROM runs WHERE name LIKE 'seed-%%') x
                    WHERE t.run_uuid = x.run_uuid {extra}
                """,
                    {"words": SEARCH_WORDS},
                )
            conn.execute(
                f"""
                UPDATE runs r SET status = (%(statuses)s::text[])[1 + mod(x.i, {len(STATUS_CYCLE)})]
                FROM (SELECT run_uuid, row_number() OVER (ORDER BY start_time, run_uuid) AS i FROM runs WHERE name ~ '-sft-') x
                WHERE r.run_uuid = x.run_uuid
            """,
                {"statuses": [MLFLOW_STATUS[s] for s in STATUS_CYCLE]},
            )
            conn.execute("ANALYZE runs")
            conn.execute("ANALYZE tags")


def _parallel_create(system: System, names: list[str], clients: int) -> None:
    chunks = [names[i::clients] for i in range(clients)]

    def work(chunk: list[str]) -> None:
        with system.client() as client:
            for name in chunk:
                system.create_run(client, name)

    run_threads([lambda c=c: work(c) for c in chunks])


# --------------------------------------------------------------------------------------------------
# workloads


def run_threads(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run the jobs on threads; re-raise the first failure. Daemon threads, so Ctrl-C is not held up."""
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def wrap(i: int, job: Callable[[], Any]) -> None:
        try:
            results[i] = job()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i, job), daemon=True) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already-sorted values."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def batches_for(points: int, batch: int, base_time: float) -> Iterator[list[tuple[str, int, float, float]]]:
    """Points of one run, as a trainer logs them: KEYS_PER_BATCH keys per step, steps increasing, cut into batches."""
    keys = [f"train/metric_{k}" for k in range(KEYS_PER_BATCH)]
    chunk: list[tuple[str, int, float, float]] = []
    for i in range(points):
        step, k = divmod(i, KEYS_PER_BATCH)
        chunk.append((keys[k], step, 1.0 / (step + 1) + 0.01 * k, base_time + step * 0.01))
        if len(chunk) == batch:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def ingest_throughput(system: System, points: int, clients: int, batch: int, tag: str) -> dict[str, Any]:
    """`clients` threads, each logging into its own fresh run over one keep-alive connection.

    Request bodies are encoded before the clock starts; the clock runs from a common start until the last
    response arrived.
    """
    per_client = points // clients
    with system.client() as client:
        runs = [system.create_run(client, f"ingest-{tag}-{c}") for c in range(clients)]
    now = time.time()
    bodies = [[system.batch(run, chunk) for chunk in batches_for(per_client, batch, now)] for run in runs]
    barrier = threading.Barrier(clients + 1)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    finished = [0.0] * clients
    errors: list[BaseException] = []

    def work(c: int) -> None:
        try:
            with system.client() as client:
                _expect(client.get(system.health_path))  # open the keep-alive connection before the clock starts
                barrier.wait(timeout=60)
                for request in bodies[c]:
                    t0 = time.perf_counter()
                    response = client.request(request.method, request.url, content=request.body)
                    latencies[c].append(time.perf_counter() - t0)
                    system.check_batch(response, request.n)
                finished[c] = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            barrier.abort()

    meter = CpuMeter(system.server, system.db)
    threads = [threading.Thread(target=work, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    try:
        barrier.wait(timeout=120)
    except threading.BrokenBarrierError:
        pass
    start = meter.snapshot()
    for t in threads:
        t.join()
    end = meter.snapshot()
    if errors:
        raise errors[0]
    elapsed = max(finished) - start[0]
    sent = per_client * clients
    flat = sorted(x for lat in latencies for x in lat)
    return {
        "points": sent,
        "seconds": round(elapsed, 3),
        "points_per_s": sent / elapsed,
        "batch_p50_ms": round(percentile(flat, 0.5) * 1000, 3),
        "batch_p99_ms": round(percentile(flat, 0.99) * 1000, 3),
        "cpu_cores_used": meter.shares(start, end),
    }


def sequential_latency(system: System, requests: list[Request], check: Callable[[httpx.Response], None]) -> dict[str, Any]:
    """One client, one keep-alive connection, one request at a time: the latency a caller sees with no queueing."""
    meter = CpuMeter(system.server, system.db)
    with system.client() as client:
        _expect(client.get(system.health_path))
        samples = []
        start = meter.snapshot()
        for request in requests:
            t0 = time.perf_counter()
            response = client.request(request.method, request.url, content=request.body)
            samples.append(time.perf_counter() - t0)
            check(response)
        end = meter.snapshot()
    samples.sort()
    return {
        "p50_ms": percentile(samples, 0.5) * 1000,
        "p99_ms": percentile(samples, 0.99) * 1000,
        "mean_ms": statistics.fmean(samples) * 1000,
        "n": len(samples),
        "cpu_cores_used": meter.shares(start, end),
    }


def single_point_latency(system: System, n: int, tag: str) -> dict[str, float]:
    with system.client() as client:
        run = system.create_run(client, f"latency-{tag}")
    now = time.time()
    requests = [system.single(run, ("train/loss", i, 1.0 / (i + 1), now + i * 0.01)) for i in range(n)]
    return sequential_latency(system, requests, lambda r: system.check_batch(r, 1))


def list_latency(system: System, variant: str, n: int) -> dict[str, float]:
    request = system.list_requests()[variant]
    return sequential_latency(system, [request] * n, lambda r: _expect(r))


def floor_latency(system: System, n: int) -> dict[str, float]:
    """A request that does no work: the client + HTTP stack floor under every latency above."""
    return sequential_latency(system, [Request("GET", system.health_path)] * n, lambda r: _expect(r))


# --------------------------------------------------------------------------------------------------
# all measurements


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


# --------------------------------------------------------------------------------------------------
# the report


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


def machine_info(pg: Pg, mlflow_version: str | None) -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    commit = _git("rev-parse", "--short", "HEAD")
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "loadavg_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgres": pg.version(),
        "postgres_settings": pg.settings(),
        "repo_head": commit,
        "mlflow": mlflow_version,
        "httpx": httpx.__version__,
    }


def _git(*argv: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), *argv], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def rlplane_source(rev: str | None, src: Path | None, workdir: Path) -> tuple[Path, str]:
    """Where the server's code comes from: the working tree, another checkout, or `git archive REV` in a temp dir."""
    if src is not None:
        if not (src / "api" / "app.py").exists():
            raise SystemExit(f"--src {src}: no api/app.py there")
        return src.resolve(), f"{src.resolve()}"
    if rev is None:
        dirty = _git("status", "--porcelain", "--", "api", "cli", "trainer_core", "migrations")
        return REPO, f"working tree at {_git('rev-parse', '--short', 'HEAD') or '?'}" + (
            " + uncommitted changes" if dirty else ""
        )
    sha = _git("rev-parse", "--short", f"{rev}^{{commit}}")
    if not sha:
        raise SystemExit(f"--rev {rev}: no such commit")
    src = workdir / "rlplane-src"
    src.mkdir()
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", sha], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(src)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {sha} failed")
    return src, f"git {rev} ({sha})"


def mlflow_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=120)
    return out.stdout.strip().rsplit(" ", 1)[-1] or "?"


# --------------------------------------------------------------------------------------------------
# main


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

    # SIGTERM/SIGHUP unwind like Ctrl-C, so the `finally` below stops the servers and drops the databases.
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
            port = free_port()
            src, info["rlplane_code"] = rlplane_source(args.rev, args.src, workdir)
            log(f"starting rlplane api on :{port} (database {args.db}; code: {info['rlplane_code']})")
            server = start_server(
                "rlplane",
                [sys.executable, "-m", "cli.main", "api", "--port", str(port), "--log-level", "warning"],
                {
                    "RLPLANE_DATABASE_URL": pg.db_url(args.db),
                    "RLPLANE_HOME": str(workdir / "rlplane-home"),
                    "RLPLANE_BOOTSTRAP_TOKEN": token,
                    "PYTHONPATH": str(src),
                },
                "/readyz",
                port,
                workdir,
                server_cpus,
                timeout=120,
                cwd=src,
            )
            stack.callback(server.stop)
            systems.append(Rlplane(server, args.db, token))

            if not args.skip_mlflow:
                db = f"{args.db}_mlflow"
                dbs.append(db)
                pg.recreate(db)
                port = free_port()
                (workdir / "mlflow-artifacts").mkdir()
                log(f"starting mlflow server {ml_version} on :{port} (database {db}; the first start creates its schema)")
                server = start_server(
                    "mlflow",
                    [
                        str(args.mlflow_bin),
                        "server",
                        "--backend-store-uri",
                        pg.db_url(db).replace("postgresql://", "postgresql+psycopg2://", 1),
                        "--default-artifact-root",
                        str(workdir / "mlflow-artifacts"),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--workers",
                        "1",
                    ],
                    # MLflow 3's job runner (8 huey processes for GenAI jobs) plays no part in tracking; left on, it
                    # would share the server's pinned CPU.
                    {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                    "/health",
                    port,
                    workdir,
                    server_cpus,
                    timeout=300,
                )
                stack.callback(server.stop)
                systems.append(Mlflow(server, db))

            results = measure_all(systems, args, pg)
        except KeyboardInterrupt:
            log("interrupted: stopping servers" + ("" if args.keep else " and dropping the databases"))
            return 130
        except (RuntimeError, httpx.HTTPError, psycopg.Error) as exc:
            log(f"failed: {type(exc).__name__}: {exc}")
            return 1

    rows = rows_for(args)
    text, records = table(rows, results)
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
        f"synchronous_commit {info['postgres_settings']['synchronous_commit']}), MLflow {ml_version or '-'}",
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
    print("\n".join(header) + "\n\n" + text + "\n\n" + "\n".join(footer))
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
