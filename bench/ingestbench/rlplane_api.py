"""rlplane as a system under test: its server process and its HTTP API."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import orjson
import psycopg

from ingestbench import log
from ingestbench.postgres import Pg
from ingestbench.processes import Server, free_port, start_server
from ingestbench.systems import SEARCH_TERM, SEARCH_WORDS, STATUS_CYCLE, Request, System, expect, parallel_create, seed_names_sql

RUN_SPEC = {
    "name": "bench",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2"},
    "data": {"source": "builtin:tiny-sft"},
    "train": {"steps": 1_000_000, "batch_size": 4, "lr": 0.0001},
}


class Rlplane(System):
    name = "rlplane"
    health_path = "/healthz"

    def __init__(self, server: Server, db: str, token: str) -> None:
        self.server, self.db, self.token = server, db, token

    def headers(self) -> dict[str, str]:
        return {"content-type": "application/json", "authorization": f"Bearer {self.token}"}

    def create_run(self, client: httpx.Client, name: str) -> str:
        return str(expect(client.post("/api/v1/runs", content=orjson.dumps({**RUN_SPEC, "name": name})), 201).json()["id"])

    def batch(self, run, points):
        body = [{"key": k, "step": s, "value": v, "time": t} for k, s, v, t in points]
        return Request("POST", f"/api/v1/runs/{run}/metrics", orjson.dumps(body), len(points))

    def single(self, run, point):
        return self.batch(run, [point])

    def check_batch(self, response, n):
        expect(response)
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
        return len(expect(response).json()["data"])

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
                SELECT t.project_id, {seed_names_sql("i")}, t.algorithm, t.backend, t.queue, s.status, '',
                       jsonb_set(t.spec, '{{name}}', to_jsonb({seed_names_sql("i")})),
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
        parallel_create(self, [f"seed-{i}" for i in range(n)], clients)
        with psycopg.connect(pg.db_url(self.db), autocommit=True) as conn:
            conn.execute(
                f"""
                UPDATE runs r
                SET name = {seed_names_sql("x.i")}, status = (%(statuses)s::text[])[1 + mod(x.i, {len(STATUS_CYCLE)})],
                    spec = jsonb_set(spec, '{{name}}', to_jsonb({seed_names_sql("x.i")}))
                FROM (SELECT id, row_number() OVER (ORDER BY id) AS i FROM runs WHERE name LIKE 'seed-%%') x WHERE r.id = x.id
            """,
                {"words": SEARCH_WORDS, "statuses": STATUS_CYCLE},
            )
            conn.execute("ANALYZE runs")


def start_rlplane(pg: Pg, db: str, token: str, src: Path, code: str, workdir: Path, cpus: set[int] | None) -> Server:
    """`rlplane api` from the code in `src`, on database `db`, with `token` as its first admin's."""
    port = free_port()
    log(f"starting rlplane api on :{port} (database {db}; code: {code})")
    return start_server(
        "rlplane",
        [sys.executable, "-m", "cli.main", "api", "--port", str(port), "--log-level", "warning"],
        {
            "RLPLANE_DATABASE_URL": pg.db_url(db),
            "RLPLANE_HOME": str(workdir / "rlplane-home"),
            "RLPLANE_BOOTSTRAP_TOKEN": token,
            "PYTHONPATH": str(src),
        },
        "/readyz",
        port,
        workdir,
        cpus,
        timeout=120,
        cwd=src,
    )
