#!/usr/bin/env python3
"""What spanning nodes costs: a 2-node gang against one node, on the same machine. A benchmark, not a test.

One `rlplane up --workers 2` (embedded SQLite database and broker, a fresh RLPLANE_HOME); its two workers are
the two "nodes" (both advertise 127.0.0.1, gloo on lo). Tiny SFT runs (builtin:tiny-gpt2), alternating:

    submit -> first step    POST /runs -> the first train/loss the trainer wrote (--runs of each): a 1-node run
                            of 1 rank (no launcher), of 2 ranks (torchrun on one node), and a 2-node run of 1 rank
                            per node (the gang is granted by the reconcile loop, node 0 publishes the rendezvous,
                            both nodes start torchrun)
    steps/s                 1 / the mean perf/step_s over --steps steps (--repeats of each): 1 node x 2 ranks
                            against 2 nodes x 1 rank, the same world of 2 ranks (torch DDP, gloo)

On one machine the "network" between the nodes is loopback: this measures the control plane's part (granting,
rendezvous, a launcher per node) and torchrun's multi-node rendezvous, not a cluster's interconnect.

    .venv/bin/python bench/multinode.py                    # about 4 minutes on 2 cores
    .venv/bin/python bench/multinode.py --runs 3 --repeats 1 --json bench/results/multinode.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dispatch import TINY, Up, first_step_time, mean_step_s, pct  # noqa: E402


def spec(name: str, nodes: int, processes: int, steps: int) -> dict:
    return {
        **TINY,
        "name": name,
        "train": {**TINY["train"], "steps": steps, "eval_every": None, "log_every": 1},
        "backend": {"kind": "torch", "precision": "fp32", "processes": processes},
        "resources": {"queue": "cpu", "nodes": nodes},
    }


def submit_to_first_step(up: Up, shape: dict) -> float:
    run_id, posted = up.run_to_end(shape)
    return first_step_time(up.home / "artifacts" / "runs" / str(run_id)) - posted


def steps_per_s(up: Up, shape: dict) -> float:
    run_id, _ = up.run_to_end(shape)
    return 1.0 / mean_step_s(up.home / "artifacts" / "runs" / str(run_id) / "metrics.jsonl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=8, help="submit-to-first-step runs of each shape (default %(default)s)")
    parser.add_argument("--steps", type=int, default=300, help="steps of each steps/s run (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="steps/s runs of each shape (default %(default)s)")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    args = parser.parse_args()

    latency: dict[str, list[float]] = {"1 node x 1 rank": [], "1 node x 2 ranks": [], "2 nodes x 1 rank": []}
    speed: dict[str, list[float]] = {"1 node x 2 ranks": [], "2 nodes x 1 rank": []}
    with tempfile.TemporaryDirectory(prefix="multinode-bench-") as tmp:
        up = Up(Path(tmp) / "home", None, workers=2)
        try:
            started = time.monotonic()
            for i in range(args.runs):  # alternating, so a slow spell on a shared machine hits both shapes
                latency["1 node x 1 rank"].append(submit_to_first_step(up, spec(f"one-{i}", 1, 1, 5)))
                latency["1 node x 2 ranks"].append(submit_to_first_step(up, spec(f"two-ranks-{i}", 1, 2, 5)))
                latency["2 nodes x 1 rank"].append(submit_to_first_step(up, spec(f"gang-{i}", 2, 1, 5)))
            for i in range(args.repeats):
                speed["1 node x 2 ranks"].append(steps_per_s(up, spec(f"speed-one-{i}", 1, 2, args.steps)))
                speed["2 nodes x 1 rank"].append(steps_per_s(up, spec(f"speed-gang-{i}", 2, 1, args.steps)))
            elapsed = time.monotonic() - started
        finally:
            up.stop()

    print(f"\n{os.cpu_count()} CPUs; {elapsed:.0f} s\n")
    print(f"Submit to first step ({args.runs} runs of each, seconds)\n")
    print("| run | p50 | p95 | max |\n|---|---:|---:|---:|")
    for shape, values in latency.items():
        print(f"| {shape} | {pct(values, 0.5):.2f} | {pct(values, 0.95):.2f} | {max(values):.2f} |")
    gang = pct(latency["2 nodes x 1 rank"], 0.5) - pct(latency["1 node x 2 ranks"], 0.5)
    print(f"\nthe gang's part (p50, 2 nodes x 1 rank against 1 node x 2 ranks): {gang:+.2f} s")
    print(f"\nSteps/s, {args.steps} steps, the same world of 2 ranks ({args.repeats} runs of each)\n")
    print("| run | median | runs |\n|---|---:|---|")
    for shape, values in speed.items():
        print(f"| {shape} | {statistics.median(values):.1f} | {', '.join(f'{v:.1f}' for v in values)} |")
    ratio = statistics.median(speed["2 nodes x 1 rank"]) / statistics.median(speed["1 node x 2 ranks"]) - 1
    print(f"\n2 nodes against 1 node: {ratio:+.1%} steps/s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"latency": latency, "steps_per_s": speed, "cpus": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
