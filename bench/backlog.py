"""What a backlog of queued runs costs the reconciler: its dispatch pass with N runs waiting. A benchmark, not a test.

Each API process runs the reconcile loop every 2 s (docs/workers.md); its dispatch pass reads every queued run. For
each N in --backlogs, N tiny SFT runs are submitted on a fresh database to a queue no worker serves, then the dispatch
pass runs --ticks times (redispatch_s 0, so every pass may send each run again: the worst case of the 30 s default),
its sender recording the messages it would put on the broker. No peer: this is the control plane's own upkeep.

    .venv/bin/python bench/backlog.py                          # SQLite, about a minute
    .venv/bin/python bench/backlog.py --postgres --backlogs 100,500,2000

Target: a pass with 500 runs waiting well under the 2 s between passes, and no message sent again to a queue that
no idle worker serves (its first message still waits in the broker).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from fastapi.testclient import TestClient  # noqa: E402
from ingestbench.postgres import Pg  # noqa: E402

from api.app import create_app  # noqa: E402
from api.auth.bootstrap import bootstrap_admin  # noqa: E402
from api.db import make_engine  # noqa: E402
from api.migrate import upgrade_to_head  # noqa: E402
from api.reconcile import Reconciler  # noqa: E402
from api.settings import Settings  # noqa: E402

PG = Pg("postgresql://postgres@127.0.0.1:5432")

TOKEN = "rlp_bench-backlog-0123456789abcdef"
SPEC = {
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2"},
    "data": {"source": "builtin:tiny-sft"},
    "train": {"steps": 20, "batch_size": 4},
    "resources": {"queue": "nobody-serves-this"},
}


def database(postgres: bool, home: Path) -> tuple[str, str | None]:
    """A fresh database's URL, and the Postgres database to drop after."""
    if not postgres:
        return f"sqlite:///{home / 'rlplane.db'}", None
    name = f"rlplane_bench_backlog_{uuid.uuid4().hex[:8]}"
    PG.recreate(name)
    return PG.db_url(name).replace("postgresql://", "postgresql+psycopg://"), name


def measure(backlog: int, ticks: int, postgres: bool) -> dict:
    home = Path(tempfile.mkdtemp(prefix="rlplane-backlog-"))
    url, dropped = database(postgres, home)
    try:
        engine = make_engine(url)
        upgrade_to_head(engine)
        engine.dispose()
        settings = Settings(home=home, database_url=url, artifacts=str(home / "artifacts"), bootstrap_token=TOKEN, dispatch=False)
        app = create_app(settings)
        with app.state.sessionmaker() as session:
            bootstrap_admin(session, home, TOKEN)
        sent: list[tuple] = []
        with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            for i in range(backlog):
                client.post("/api/v1/runs", json={**SPEC, "name": f"waiting-{i}"}).raise_for_status()
            reconciler = Reconciler(app.state.sessionmaker, lambda *message: sent.append(message), redispatch_s=0.0)
            passes = []
            for _ in range(ticks):
                started = time.perf_counter()
                reconciler.dispatch()
                passes.append(time.perf_counter() - started)
        app.state.engine.dispose()
        later = passes[1:] or passes  # the first pass sends each run its first message
        return {"backlog": backlog, "first_s": passes[0], "pass_s": statistics.median(later), "max_s": max(later),
                "messages": len(sent), "ticks": ticks}  # fmt: skip
    finally:
        if dropped is not None:
            PG.drop(dropped)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlogs", default="100,500", help="queued runs, comma-separated")
    parser.add_argument("--ticks", type=int, default=6, help="dispatch passes per backlog")
    parser.add_argument("--postgres", action="store_true", help="Postgres at 127.0.0.1:5432 instead of SQLite")
    args = parser.parse_args()
    rows = [measure(int(n), args.ticks, args.postgres) for n in args.backlogs.split(",")]
    print(f"\n{'queued runs':>12} | {'first pass':>10} | {'later passes (median, max)':>27} | messages in {args.ticks} passes")
    for r in rows:
        later = f"{r['pass_s'] * 1000:.0f} ms, {r['max_s'] * 1000:.0f} ms"
        print(f"{r['backlog']:>12} | {r['first_s'] * 1000:>7.0f} ms | {later:>27} | {r['messages']}")


if __name__ == "__main__":
    main()
