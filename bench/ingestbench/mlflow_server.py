"""MLflow as a system under test: its tracking server process and its REST API."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import orjson
import psycopg

from ingestbench import REPO, log
from ingestbench.postgres import Pg
from ingestbench.processes import Server, free_port, start_server
from ingestbench.systems import SEARCH_TERM, SEARCH_WORDS, STATUS_CYCLE, Request, System, expect, parallel_create, seed_names_sql

DEFAULT_MLFLOW_BIN = REPO / "bench" / ".venv-mlflow" / "bin" / "mlflow"
MLFLOW_INSTALL_HINT = (
    "install MLflow in its own venv (it must not share the project's):\n"
    "    python3 -m venv bench/.venv-mlflow\n"
    "    bench/.venv-mlflow/bin/pip install mlflow==3.17.2 psycopg2-binary\n"
    "or pass --mlflow-bin PATH, or --skip-mlflow"
)
# rlplane's run statuses as MLflow's, for the seeded runs and the status filter.
MLFLOW_STATUS = {
    "queued": "SCHEDULED",
    "running": "RUNNING",
    "succeeded": "FINISHED",
    "failed": "FAILED",
    "cancelled": "KILLED",
    "lost": "FAILED",
}


class Mlflow(System):
    name = "MLflow"
    health_path = "/health"

    def __init__(self, server: Server, db: str) -> None:
        self.server, self.db = server, db
        with self.client() as client:
            self.experiment = expect(client.post("/api/2.0/mlflow/experiments/create", content=b'{"name": "bench"}')).json()[
                "experiment_id"
            ]

    def create_run(self, client, name):
        body = {"experiment_id": self.experiment, "run_name": name, "start_time": int(time.time() * 1000)}
        return expect(client.post("/api/2.0/mlflow/runs/create", content=orjson.dumps(body))).json()["run"]["info"]["run_id"]

    def batch(self, run, points):
        metrics = [{"key": k, "value": v, "timestamp": int(t * 1000), "step": s} for k, s, v, t in points]
        return Request("POST", "/api/2.0/mlflow/runs/log-batch", orjson.dumps({"run_id": run, "metrics": metrics}), len(points))

    def single(self, run, point):
        k, s, v, t = point
        body = {"run_id": run, "key": k, "value": v, "timestamp": int(t * 1000), "step": s}
        return Request("POST", "/api/2.0/mlflow/runs/log-metric", orjson.dumps(body), 1)

    def check_batch(self, response, n):
        expect(response)

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
        return len(expect(response).json().get("runs", []))

    def seed_sql(self, pg, n):
        with self.client() as client:
            template = self.create_run(client, "seed-template")
        statuses = [MLFLOW_STATUS[s] for s in STATUS_CYCLE]
        with psycopg.connect(pg.db_url(self.db), autocommit=True) as conn:
            conn.execute(
                f"""
                CREATE TEMP TABLE seeded AS
                SELECT md5(i::text || '-' || random()::text) AS run_uuid, {seed_names_sql("i")} AS name,
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
        parallel_create(self, [f"seed-{i}" for i in range(n)], clients)
        with psycopg.connect(pg.db_url(self.db), autocommit=True) as conn:
            for table in ("tags", "runs"):  # tags first: both find the runs by their `seed-` names
                column = "name" if table == "runs" else "value"
                extra = "" if table == "runs" else "AND t.key = 'mlflow.runName'"
                conn.execute(
                    f"""
                    UPDATE {table} t SET {column} = {seed_names_sql("x.i")}
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


def mlflow_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=120)
    return out.stdout.strip().rsplit(" ", 1)[-1] or "?"


def start_mlflow(binary: Path, version: str | None, pg: Pg, db: str, workdir: Path, cpus: set[int] | None) -> Server:
    """`mlflow server --workers 1` on database `db` (its first start creates the schema), artifacts in `workdir`."""
    port = free_port()
    (workdir / "mlflow-artifacts").mkdir()
    log(f"starting mlflow server {version} on :{port} (database {db}; the first start creates its schema)")
    return start_server(
        "mlflow",
        [
            str(binary),
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
        cpus,
        timeout=300,
    )
