"""The dashboard's two speed targets, in a real browser. A benchmark, not a test.

One `rlplane up --workers 1` (embedded SQLite by default; --postgres for Postgres at 127.0.0.1:5432,
database rlplane_bench_dashboard, re-created) serving the built dashboard, and headless Chromium
driven by bench/dashboard_browser.mjs.

    big chart    a run holding 1,000,000 points of train/loss (with spikes) and a few small keys:
                 the API's downsampled answer (what the chart requests), and a fresh browser opening
                 /runs/<id> until the train/loss chart has drawn (a new browser context each time:
                 cold HTTP cache, sign-in token preset; one uncounted open first warms the server).
                 Target: opens in < 1 s (p95). The spikes must survive downsampling (bucket min/max).
    live latency a real tiny SFT run training through the worker: for every step reported while the
                 page is open, the trainer's report time (the point's `time`) -> the step drawn on
                 the canvas (data-last-step, set one frame after uPlot's setData).
                 Target: p95 <= 2 s.
    many keys    runs holding 300 and 2,000 keys x 1,000 steps (RL runs log hundreds): a fresh browser
                 opening /runs/<id> until the first chart (reward/mean, first in reading order) has
                 drawn. Target: < 1 s at 2,000 keys. With --old-dist, the same opens of a dashboard
                 built before charts were fetched as they scroll into view, served by a second API
                 process on the same database, side by side.

    make up   # once, or `cd frontend && npm run build`: the dashboard must be built
    .venv/bin/python bench/dashboard.py                    # about 5 minutes on 2 cores
    .venv/bin/python bench/dashboard.py --postgres --json bench/results/dashboard.json
    .venv/bin/python bench/dashboard.py --cases many --old-dist /tmp/old-dist   # before/after, many keys
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dispatch import Up  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BROWSER = ROOT / "bench" / "dashboard_browser.mjs"
BIG_KEY = "train/loss"
SPIKE = 1000.0
CHART_POINTS = 1500  # what the dashboard's charts tab asks for (frontend/src/pages/run/ChartsTab.tsx)
LIVE_SPEC = {
    "name": "dashboard-live-bench",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": {"source": "builtin:arithmetic", "eval_fraction": 0.1},
    "train": {"steps": 1_000_000, "batch_size": 4, "lr": 1e-3, "eval_every": 1_000_000, "log_every": 1},
    "resources": {"queue": "cpu"},
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1)]


def browser(*args: str, timeout: float) -> dict:
    done = subprocess.run(["node", str(BROWSER), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"browser: {done.stderr.strip() or done.stdout.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def worker_client(up: Up) -> httpx.Client:
    up.http.post("/users", json={"name": "bench-writer"}).raise_for_status()
    made = up.http.post("/tokens", json={"name": "bench", "scopes": ["worker"], "user": "bench-writer"})
    made.raise_for_status()
    return httpx.Client(base_url=str(up.http.base_url), headers={"Authorization": f"Bearer {made.json()['token']}"}, timeout=60)


def big_run(up: Up, points: int, batch: int = 10_000) -> tuple[int, float]:
    """A run on a queue no worker serves, leased by the bench, holding `points` train/loss points."""
    spec = {**LIVE_SPEC, "name": "dashboard-big-chart", "resources": {"queue": "bench-no-worker"}}
    run_id = up.http.post("/runs", json=spec).raise_for_status().json()["id"]
    writer = worker_client(up)
    writer.post(f"/runs/{run_id}/lease", json={"worker": "bench"}).raise_for_status()
    started = time.perf_counter()
    t0 = time.time() - points
    for first in range(0, points, batch):
        rows = [
            {"key": BIG_KEY, "step": s, "value": SPIKE if s % 250_000 == 123 else 2.0 / (1 + s / 50_000), "time": t0 + s}
            for s in range(first, min(points, first + batch))
        ]
        answer = writer.post(f"/runs/{run_id}/metrics", json=rows).raise_for_status().json()
        if answer["accepted"] != len(rows):
            raise RuntimeError(f"ingest accepted {answer}")
    small = [
        {"key": key, "step": s * 1000, "value": float(i + s % 7), "time": t0 + s * 1000}
        for i, key in enumerate(("train/lr", "train/grad_norm", "eval/loss", "perf/tokens_per_s"))
        for s in range(1000)
    ]
    writer.post(f"/runs/{run_id}/metrics", json=small).raise_for_status()
    return run_id, time.perf_counter() - started


MANY_STEPS = 1000
FIRST_KEY = "reward/mean"  # the first chart in reading order (frontend/src/charts/panels.ts)


def many_keys_run(up: Up, keys: int) -> tuple[int, float]:
    """A run logging `keys` keys at each of 1,000 steps, as an RL trainer does (a few headline keys, then per-layer ones).
    Written by the admin (a project writer may report without the lease), on a queue no worker serves."""
    spec = {**LIVE_SPEC, "name": f"dashboard-{keys}-keys", "resources": {"queue": "bench-no-worker"}}
    run_id = up.http.post("/runs", json=spec).raise_for_status().json()["id"]
    names = [FIRST_KEY, "ppo/kl", "train/loss", *(f"layers/{i:04d}/grad_norm" for i in range(keys - 3))]
    started = time.perf_counter()
    rows: list[dict] = []
    for step in range(MANY_STEPS):
        rows += [{"key": k, "step": step, "value": i + math.sin(step / 50), "time": 1.7e9 + step} for i, k in enumerate(names)]
        if len(rows) + len(names) > 10_000 or step == MANY_STEPS - 1:
            up.http.post(f"/runs/{run_id}/metrics", json=rows, timeout=120).raise_for_status()
            rows = []
    return run_id, time.perf_counter() - started


class OldDashboard:
    """A second API process on the same home and database, serving an older dashboard build."""

    def __init__(self, up: Up, dist: Path, database: str | None) -> None:
        self.port = up.port + 1 if up.port < 65000 else up.port - 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLPLANE_")}
        env.update({"RLPLANE_HOME": str(up.home), "RLPLANE_FRONTEND_DIR": str(dist), "RLPLANE_DISPATCH": "false"})
        if database:
            env["RLPLANE_DATABASE_URL"] = database
        command = [sys.executable, "-m", "cli.main", "api", "--port", str(self.port), "--log-level", "warning"]
        self.process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the API serving {dist} did not start")
            time.sleep(0.3)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def many_keys(up: Up, base: str, token: str, counts: list[int], repeats: int, old: OldDashboard | None) -> list[dict]:
    out = []
    for keys in counts:
        run_id, ingest_s = many_keys_run(up, keys)
        listed, _ = timed_get(up, f"/runs/{run_id}/metrics/keys", {}, repeats)
        browser("open", base, token, str(run_id), FIRST_KEY, "1", timeout=120)  # warms the server, not counted
        opened = browser("open", base, token, str(run_id), FIRST_KEY, str(repeats), timeout=600)["open_ms"]
        row = {
            "keys": keys,
            "steps": MANY_STEPS,
            "ingest_s": ingest_s,
            "api_keys_s": listed,
            "browser_first_chart_s": [ms / 1000 for ms in opened],
        }
        if old is not None:
            old_base = f"http://127.0.0.1:{old.port}"
            try:
                before = browser("open", old_base, token, str(run_id), FIRST_KEY, str(min(repeats, 3)), timeout=1800)["open_ms"]
                row["old_first_chart_s"] = [ms / 1000 for ms in before]
            except RuntimeError as error:  # dashboard_browser.mjs gives a page 30 s
                if "Timeout" not in str(error):
                    raise
                row["old_first_chart_s"] = None
        out.append(row)
    return out


def timed_get(up: Up, path: str, params: dict, repeats: int) -> tuple[list[float], dict]:
    times, body = [], {}
    for _ in range(repeats):
        started = time.perf_counter()
        body = up.http.get(path, params=params, timeout=60).raise_for_status().json()
        times.append(time.perf_counter() - started)
    return times, body


def big_chart(up: Up, base: str, token: str, points: int, repeats: int) -> dict:
    run_id, ingest_s = big_run(up, points)
    one_key, body = timed_get(up, f"/runs/{run_id}/metrics", {"keys": BIG_KEY, "max_points": CHART_POINTS}, repeats)
    series = body["series"][0]
    if series["total_points"] != points:
        raise RuntimeError(f"{BIG_KEY}: {series['total_points']} points stored, expected {points}")
    spikes_kept = sum(1 for p in series["points"] if p["max"] == SPIKE)
    all_keys, _ = timed_get(up, f"/runs/{run_id}/metrics", {"max_points": CHART_POINTS}, repeats)
    # One page open first, not counted: the server's first answers warm its caches (SQLite pages, Python).
    browser("open", base, token, str(run_id), BIG_KEY, "1", timeout=120)
    opened = browser("open", base, token, str(run_id), BIG_KEY, str(repeats), timeout=300)["open_ms"]
    return {
        "points": points,
        "ingest_s": ingest_s,
        "returned_points": len(series["points"]),
        "spikes": math.ceil(points / 250_000),
        "spikes_kept": spikes_kept,
        "api_one_key_s": one_key,
        "api_all_keys_s": all_keys,
        "browser_open_s": [ms / 1000 for ms in opened],
    }


def live_latency(up: Up, base: str, token: str, seconds: float) -> dict:
    run_id = up.http.post("/runs", json=LIVE_SPEC).raise_for_status().json()["id"]
    deadline = time.monotonic() + 180
    while not any(k["key"] == BIG_KEY for k in up.http.get(f"/runs/{run_id}/metrics/keys").json()["data"]):
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} reported no {BIG_KEY} in 180 s")
        time.sleep(0.5)
    try:
        drawn = browser("live", base, token, str(run_id), BIG_KEY, str(seconds), timeout=seconds + 120)["drawn"]
    finally:
        up.http.post(f"/runs/{run_id}/cancel")
    first, last = drawn[0][1], drawn[-1][1]
    reported = up.http.get(
        f"/runs/{run_id}/metrics",
        params={"keys": BIG_KEY, "max_points": 20_000, "step_min": first + 1, "step_max": last},
    ).json()["series"][0]
    if reported["downsampled"]:
        raise RuntimeError("too many steps for one raw read; shorten --live-seconds")
    latencies = []
    for point in reported["points"]:
        when = next(ms for ms, step in drawn if step >= point["step"])
        latencies.append(when / 1000 - point["time"])
    return {"run_id": run_id, "steps": len(latencies), "draws": len(drawn) - 1, "latency_s": latencies}


def table(rows: list[tuple[str, str, str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:.0f} ms, p95 {pct(values, 95) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1_000_000, help="points of the big chart's key")
    parser.add_argument("--repeats", type=int, default=5, help="API requests and browser page opens each")
    parser.add_argument("--live-seconds", type=float, default=30.0, help="how long the live page is watched")
    parser.add_argument("--postgres", action="store_true", help="Postgres at 127.0.0.1:5432 instead of SQLite")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    parser.add_argument("--cases", default="big,live,many", help="which measurements: big, live, many (comma-separated)")
    parser.add_argument("--many-keys", default="300,2000", help="key counts of the many-keys runs")
    parser.add_argument("--old-dist", type=Path, help="an older dashboard build to time the many-keys opens against")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    if not (ROOT / "frontend" / "dist" / "index.html").exists():
        parser.error("the dashboard is not built: run `make up` once, or `cd frontend && npm run build`")

    database = None
    if args.postgres:
        from ingestbench.postgres import Pg

        pg = Pg("postgresql://postgres@127.0.0.1:5432")
        pg.recreate("rlplane_bench_dashboard")
        database = "postgresql+psycopg://postgres@127.0.0.1:5432/rlplane_bench_dashboard"
    with tempfile.TemporaryDirectory(prefix="rlplane-dash-bench-") as tmp:
        up = Up(Path(tmp) / "home", None, database)
        try:
            base = f"http://127.0.0.1:{up.port}"
            token = (up.home / "admin.token").read_text().strip()
            big = big_chart(up, base, token, args.points, args.repeats) if "big" in cases else None
            live = live_latency(up, base, token, args.live_seconds) if "live" in cases else None
            old = OldDashboard(up, args.old_dist.resolve(), database) if "many" in cases and args.old_dist else None
            try:
                counts = [int(n) for n in args.many_keys.split(",")]
                many = many_keys(up, base, token, counts, args.repeats, old) if "many" in cases else []
            finally:
                if old is not None:
                    old.stop()
        finally:
            up.stop()

    rows = [("measurement", "result", "target")]
    verdict = True
    if big:
        opened = big["browser_open_s"]
        rows += [
            (f"ingest {big['points']:,} points (10k batches)", f"{big['ingest_s']:.1f} s", "-"),
            (f"API: {BIG_KEY} downsampled to {CHART_POINTS}", ms(big["api_one_key_s"]), "-"),
            ("API: every key of that run", ms(big["api_all_keys_s"]), "-"),
            ("spikes kept by downsampling", f"{big['spikes_kept']} of {big['spikes']}", "all"),
            ("browser: /runs/<id> to the chart drawn", ms(opened), "< 1 s"),
        ]
        verdict &= pct(opened, 95) < 1.0 and big["spikes_kept"] == big["spikes"]
    if live:
        lat = live["latency_s"]
        rows.append((f"live: report -> drawn ({live['steps']} steps, {live['draws']} draws)", ms(lat), "p95 <= 2 s"))
        verdict &= pct(lat, 95) <= 2.0
    for m in many:
        name = f"{m['keys']:,} keys x {m['steps']:,} steps"
        rows += [
            (f"ingest {name}", f"{m['ingest_s']:.1f} s", "-"),
            (f"API: key list of {m['keys']:,} keys", ms(m["api_keys_s"]), "-"),
            (f"browser: first chart, {name}", ms(m["browser_first_chart_s"]), "< 1 s" if m["keys"] >= 2000 else "-"),
        ]
        if "old_first_chart_s" in m:
            before = ms(m["old_first_chart_s"]) if m["old_first_chart_s"] else "over 30 s (the browser script's limit)"
            rows.append((f"  before (--old-dist), {name}", before, "-"))
        if m["keys"] >= 2000:
            verdict &= pct(m["browser_first_chart_s"], 95) < 1.0
    print(f"\n{platform.node()} · {'Postgres' if args.postgres else 'SQLite (embedded)'} · chromium headless\n")
    print(table(rows))
    print(f"\ntargets {'met' if verdict else 'NOT met'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        database_name = "postgres" if args.postgres else "sqlite"
        args.json.write_text(json.dumps({"database": database_name, "big": big, "live": live, "many": many}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
