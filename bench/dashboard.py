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
    fleet        500 runs x 300 keys x 1,000 steps (150 million points; Postgres only, written by SQL:
                 bench/fleet.py): a fresh browser opening the runs list (its rows drawn), a Compare of 20
                 runs (10 queued, 10 succeeded: reward/mean drawn with all 20 lines) and one run's page
                 (its first chart). Target: runs list and Compare under 1 s (p95). Then the Compare page
                 watched while the 10 active runs log a step of all 300 keys every 2 s: every API request it
                 makes is counted. Target: none per run (no /runs/<id>/...), and its lines reach the last
                 step logged (incremental fetches: a key cursor per run, a step cursor per run and key).

    make up   # once, or `cd frontend && npm run build`: the dashboard must be built
    .venv/bin/python bench/dashboard.py                    # about 5 minutes on 2 cores
    .venv/bin/python bench/dashboard.py --postgres --json bench/results/dashboard.json
    .venv/bin/python bench/dashboard.py --cases many --old-dist /tmp/old-dist   # before/after, many keys
    .venv/bin/python bench/dashboard.py --postgres --cases fleet --fleet-home /tmp/fleet   # the fill: 35-70 min, 35 GB
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fleet as fleet_data  # noqa: E402
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


FLEET_RUNS, FLEET_KEYS, COMPARED, ACTIVE = 500, 300, 20, 10
COMPARE_CHART = f'[data-chart="{FIRST_KEY}"][data-series="{COMPARED}"]'


def fleet(up: Up, dsn: str, base: str, token: str, args: argparse.Namespace, ids: list[int] | None) -> dict:
    """The fleet case on `up`; `ids`: the runs of a fleet made by an earlier bench run in the same home and database."""
    names = fleet_data.key_names(FLEET_KEYS, FIRST_KEY)
    repeats, runs = args.repeats, args.fleet_runs
    row: dict = {"runs": runs if ids is None else len(ids), "keys": FLEET_KEYS, "steps": MANY_STEPS, "fill_s": None}
    if ids is None:
        spec = {**LIVE_SPEC, "resources": {"queue": "bench-no-worker"}}
        made = (up.http.post("/runs", json={**spec, "name": f"fleet-{i:03d}"}) for i in range(runs))
        ids = [answer.raise_for_status().json()["id"] for answer in made]
        row["fill_s"] = fleet_data.fill(dsn, ids, names, MANY_STEPS, ACTIVE)
    row["ids"] = ids
    compared = ids[:ACTIVE] + ids[-(COMPARED - ACTIVE) :]
    runs_api, _ = timed_get(up, "/runs", {"limit": 50}, repeats)
    compare_api, _ = timed_get(up, "/compare", {"runs": ",".join(map(str, compared))}, repeats)
    pages = {
        "runs_list": ("/runs", "tr[data-run-id]"),
        "compare": (f"/compare?runs={','.join(map(str, compared))}", COMPARE_CHART),
        "run_page": (f"/runs/{ids[-1]}", f'[data-chart="{FIRST_KEY}"]'),
    }
    row |= {"api_runs_list_s": runs_api, "api_compare_s": compare_api}
    for name, (path, selector) in pages.items():
        browser("paint", base, token, path, selector, "1", timeout=120)  # warms the server, not counted
        opened = browser("paint", base, token, path, selector, str(repeats), timeout=600)
        row[f"browser_{name}_s"] = [t / 1000 for t in opened["open_ms"]]
        row[f"browser_{name}_timeline"] = opened["timeline"]
    row |= watch_compare(up, base, token, pages["compare"][0], compared[:ACTIVE], names, args.watch_seconds)
    return row


def fleet_case(args: argparse.Namespace) -> dict:
    """The fleet in its own database (rlplane_bench_fleet) and home: with --fleet-home, both are kept, and a later run
    with the same home measures the same fleet again instead of filling it for 30 minutes."""
    from ingestbench.postgres import Pg

    home = args.fleet_home or Path(tempfile.mkdtemp(prefix="rlplane-fleet-"))
    made = home / "fleet.json"
    if not made.exists():  # no fleet yet, or a fill that did not finish: from the start
        Pg("postgresql://postgres@127.0.0.1:5432").recreate("rlplane_bench_fleet")
        shutil.rmtree(home / "home", ignore_errors=True)
    up = Up(home / "home", None, "postgresql+psycopg://postgres@127.0.0.1:5432/rlplane_bench_fleet")
    try:
        base = f"http://127.0.0.1:{up.port}"
        token = (up.home / "admin.token").read_text().strip()
        ids = json.loads(made.read_text()) if made.exists() else None
        dsn = "postgresql://postgres@127.0.0.1:5432/rlplane_bench_fleet"
        row = fleet(up, dsn, base, token, args, ids)
        made.write_text(json.dumps(row["ids"]))
        return row
    finally:
        up.stop()


def watch_compare(up: Up, base: str, token: str, path: str, active: list[int], names: list[str], seconds: float) -> dict:
    """The Compare page watched for `seconds` while the active runs log a step of every key every 2 s."""
    stop = threading.Event()
    logged = [max(k["last_step"] for k in up.http.get(f"/runs/{active[0]}/metrics/keys").json()["data"])]

    def log_steps() -> None:
        while not stop.wait(2.0):
            step = logged[0] + 1
            for run_id in active:
                now = time.time()
                rows = [{"key": k, "step": step, "value": i + math.sin(step / 50), "time": now} for i, k in enumerate(names)]
                up.http.post(f"/runs/{run_id}/metrics", json=rows, timeout=60).raise_for_status()
            logged[0] = step

    writer = threading.Thread(target=log_steps, daemon=True)
    writer.start()
    try:
        watched = browser("watch", base, token, path, COMPARE_CHART, str(seconds), timeout=seconds + 120)
    finally:
        stop.set()
        writer.join(30)
    requests = watched["requests"]
    per_run = [r for r in requests if re.match(r"/api/v1/runs/\d+", r[2])]
    return {
        "watch_s": seconds,
        "requests": len(requests),
        "compare_polls": sum(1 for r in requests if r[1] == "GET" and r[2].startswith("/api/v1/compare?")),
        "series_fetches": sum(1 for r in requests if r[2] == "/api/v1/compare/series"),
        "per_run_requests": len(per_run),
        "per_run_examples": [r[2] for r in per_run[:5]],
        "last_step_logged": logged[0],
        "last_step_drawn": watched["last_step"],
    }


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


def fleet_rows(rows: list[tuple[str, str, str]], f: dict) -> bool:
    """The fleet case's lines of the table; whether its targets were met."""
    name = f"{f['runs']} runs x {f['keys']} keys x {f['steps']:,} steps"
    watched = f"Compare watched {f['watch_s']:.0f} s, 10 runs logging"
    rows += [
        (f"fill {name} (SQL)", "kept (--fleet-home)" if f["fill_s"] is None else f"{f['fill_s'] / 60:.1f} min", "-"),
        ("API: runs list, first 50", ms(f["api_runs_list_s"]), "-"),
        (f"API: compare poll of {COMPARED} runs", ms(f["api_compare_s"]), "-"),
        ("browser: runs list, rows drawn", ms(f["browser_runs_list_s"]), "< 1 s"),
        (f"browser: Compare of {COMPARED} runs, first chart drawn", ms(f["browser_compare_s"]), "< 1 s"),
        ("browser: a run's page, first chart drawn", ms(f["browser_run_page_s"]), "-"),
        (f"{watched}: API requests", f"{f['requests']} ({f['compare_polls']} polls, {f['series_fetches']} series)", "-"),
        (f"{watched}: requests per run", str(f["per_run_requests"]), "0"),
        (f"{watched}: last step drawn / logged", f"{f['last_step_drawn']} / {f['last_step_logged']}", "within 1 poll"),
    ]
    caught_up = f["last_step_drawn"] >= f["last_step_logged"] - 6  # a poll every 10 s, a step every 2 s
    fast = pct(f["browser_runs_list_s"], 95) < 1.0 and pct(f["browser_compare_s"], 95) < 1.0
    return fast and f["per_run_requests"] == 0 and caught_up


def first_cases(args: argparse.Namespace, cases: set[str]) -> tuple[dict | None, dict | None, list[dict]]:
    """big, live and many, on one `rlplane up` (Postgres: database rlplane_bench_dashboard, re-created)."""
    database = None
    if args.postgres:
        from ingestbench.postgres import Pg

        Pg("postgresql://postgres@127.0.0.1:5432").recreate("rlplane_bench_dashboard")
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
    return big, live, many


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1_000_000, help="points of the big chart's key")
    parser.add_argument("--repeats", type=int, default=5, help="API requests and browser page opens each")
    parser.add_argument("--live-seconds", type=float, default=30.0, help="how long the live page is watched")
    parser.add_argument("--postgres", action="store_true", help="Postgres at 127.0.0.1:5432 instead of SQLite")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    parser.add_argument(
        "--cases", default="big,live,many", help="which measurements: big, live, many, fleet (comma-separated; fleet: --postgres)"
    )
    parser.add_argument("--watch-seconds", type=float, default=40.0, help="how long the fleet's Compare page is watched")
    parser.add_argument("--fleet-home", type=Path, help="keep the fleet (its home here, its database) for later runs")
    parser.add_argument(
        "--fleet-runs",
        type=int,
        default=FLEET_RUNS,
        help=f"runs in a new fleet (default {FLEET_RUNS}, the target's; fewer fill faster while a change is being tried: "
        f"a Compare reads only its {COMPARED} runs)",
    )
    parser.add_argument("--many-keys", default="300,2000", help="key counts of the many-keys runs")
    parser.add_argument("--old-dist", type=Path, help="an older dashboard build to time the many-keys opens against")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    if not (ROOT / "frontend" / "dist" / "index.html").exists():
        parser.error("the dashboard is not built: run `make up` once, or `cd frontend && npm run build`")
    if "fleet" in cases and not args.postgres:
        parser.error("--cases fleet needs --postgres: its 150 million points are written by Postgres's own SQL")
    if args.fleet_runs < COMPARED:
        parser.error(f"--fleet-runs {args.fleet_runs}: a fleet needs at least the {COMPARED} runs its Compare opens")

    big, live, many = first_cases(args, cases) if cases - {"fleet"} else (None, None, [])
    fleet_row = fleet_case(args) if "fleet" in cases else None

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
    if fleet_row:
        verdict &= fleet_rows(rows, fleet_row)
    print(f"\n{platform.node()} · {'Postgres' if args.postgres else 'SQLite (embedded)'} · chromium headless\n")
    print(table(rows))
    print(f"\ntargets {'met' if verdict else 'NOT met'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        database_name = "postgres" if args.postgres else "sqlite"
        document = {"database": database_name, "big": big, "live": live, "many": many, "fleet": fleet_row}
        args.json.write_text(json.dumps(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
