"""What the series requests cost the API on the 500-run fleet (bench/dashboard.py's fleet case, kept with
--fleet-home): a 20-run Compare's first chart (24 whole series of 1,000 points), a Compare poll's appends (200
series of a few points) and a run page's request of all its 300 keys, each timed over HTTP against `rlplane up`.
With --old, the same requests against a second checkout's server (the code before a change), the two taking turns,
so both are measured on the same machine in the same minutes (a browser's open of the same pages varied by half
between runs on one VM; the API's answers, measured so, by a tenth). A benchmark, not a test.

    .venv/bin/python bench/dashboard.py --postgres --cases fleet --fleet-home /tmp/fleet   # the fleet, once
    git worktree add /tmp/before <commit> && .venv/bin/python bench/series_batch.py --fleet-home /tmp/fleet --old /tmp/before
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATABASE = "postgresql+psycopg://postgres@127.0.0.1:5432/rlplane_bench_fleet"

# One checkout's server: the measured requests, as JSON lines of (name, milliseconds, bytes).
SERVE = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, str(Path.cwd() / "bench"))
from dispatch import Up
from fleet import key_names
home, ids, repeats = Path(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
compared = ids[:10] + ids[-10:]
keys = key_names(300, "reward/mean")[:10]
asks = {
    "Compare's first chart: 24 whole series": ("post", "/compare/series", {"json": {"max_points": 1500, "series":
        [{"run_id": r, "key": "reward/mean"} for r in compared] + [{"run_id": r, "key": "ppo/kl"} for r in compared[:4]]}}),
    "a Compare poll's appends: 200 series": ("post", "/compare/series", {"json": {"max_points": 1500, "series":
        [{"run_id": r, "key": k, "after_step": 990} for r in compared for k in keys]}}),
    "a run page's 300 keys": ("get", f"/runs/{ids[-1]}/metrics/columns", {"params": {"max_points": 1500}}),
}
up = Up(home, None, sys.argv[4])
try:
    for name, (method, path, kwargs) in asks.items():
        for i in range(repeats + 2):
            started = time.perf_counter()
            answer = getattr(up.http, method)(path, timeout=120, **kwargs)
            answer.raise_for_status()
            if i >= 2:  # the first two warm the server
                print(json.dumps([name, (time.perf_counter() - started) * 1000, len(answer.content)]), flush=True)
finally:
    up.stop()
"""


def measure(checkout: Path, home: Path, ids: list[int], repeats: int) -> list[tuple[str, float, int]]:
    out = subprocess.run(
        [sys.executable, "-c", SERVE, str(home), json.dumps(ids), str(repeats), DATABASE],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [tuple(json.loads(line)) for line in out.splitlines() if line.startswith("[")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleet-home", type=Path, required=True, help="bench/dashboard.py's --fleet-home of a filled fleet")
    parser.add_argument("--old", type=Path, help="another checkout (the code before a change), measured in turns with this one")
    parser.add_argument("--rounds", type=int, default=2, help="turns of each checkout (default 2)")
    parser.add_argument("--repeats", type=int, default=10, help="timed requests of each kind a turn (default 10)")
    args = parser.parse_args()
    ids = json.loads((args.fleet_home / "fleet.json").read_text())
    home = args.fleet_home / "home"
    checkouts = {"this": ROOT, **({"old": args.old} if args.old else {})}
    times: dict[tuple[str, str], list[float]] = {}
    sizes: dict[str, int] = {}
    for _ in range(args.rounds):
        for label, checkout in checkouts.items():
            for name, ms, size in measure(checkout, home, ids, args.repeats):
                times.setdefault((name, label), []).append(ms)
                sizes[name] = size
    heads = " | ".join(f"{label + ' p50 / p95 ms':>22s}" for label in checkouts)
    print(f"\n{'request (500-run fleet)':42s} | {'bytes':>9s} | {heads}")
    for name, size in sizes.items():
        cells = []
        for label in checkouts:
            got = sorted(times[(name, label)])
            cells.append(f"{statistics.median(got):>10.0f} / {got[int(0.95 * (len(got) - 1))]:>9.0f}")
        print(f"{name:42s} | {size:>9,d} | " + " | ".join(f"{c:>22s}" for c in cells))


if __name__ == "__main__":
    main()
