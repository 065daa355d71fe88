"""What a worker's trainer costs to start: as a new interpreter (`python -m trainer_core run`, as every trainer started
before the forkserver, and as a GPU run's still does) against forked from the worker's forkserver (worker/forks.py),
side by side in one run on the same short CPU run (examples/sft.yaml, 20 steps, its checkpoint and export). A
benchmark, not a test.

    .venv/bin/python bench/trainer_start.py [--trainers 4]

CPU is the children's (getrusage): each new interpreter's as it ends; the forkserver's, with every trainer it forked
and its own imports, once it is closed (so the forked column's CPU per trainer includes a share of those imports).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from worker.forks import ForkServer  # noqa: E402
from worker.launcher import Trainer  # noqa: E402


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def train(out: Path, forks: ForkServer | None) -> tuple[float, float]:
    """Seconds to the trainer's first step line and to its exit."""
    command = [sys.executable, "-m", "trainer_core", "run", str(ROOT / "examples/sft.yaml"), "--out", str(out)]
    command += ["--set", "train.steps=20", "--set", "train.eval_every=10", "--set", "train.checkpoint_every=20"]
    first: list[float] = []
    started = time.monotonic()

    def line(_rank: int, text: str) -> None:
        if not first and text.startswith("step 1 "):
            first.append(time.monotonic() - started)

    trainer = Trainer(command, out.parent, line, env={"OMP_NUM_THREADS": "1"}, forks=forks)
    while (code := trainer.wait(5)) is None:
        pass
    trainer.wait_output()
    if code != 0:
        raise SystemExit(f"the trainer exited {code}: {list(trainer.tail)[-5:]}")
    return first[0], time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trainers", type=int, default=4, help="trainers started each way")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"  # the forkserver's environment is the trainers'
    scratch = Path(tempfile.mkdtemp(prefix="trainer-start-"))
    try:
        results = {}
        before = children_cpu()
        runs = [train(scratch / f"new-{i}", None) for i in range(args.trainers)]
        results["a new interpreter each"] = (runs, children_cpu() - before)
        before = children_cpu()
        forks = ForkServer(sys.executable)
        runs = [train(scratch / f"forked-{i}", forks) for i in range(args.trainers)]
        forks.close()
        results["forked from the forkserver"] = (runs, children_cpu() - before)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{args.trainers} trainers each way, examples/sft.yaml for 20 steps, on {os.cpu_count()} cores\n")
    print("| trainers started | first step, median s | exit, median s | CPU s per trainer |")
    print("|---|---|---|---|")
    for name, (runs, cpu) in results.items():
        first, done = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        print(f"| {name} | {first:.2f} | {done:.2f} | {cpu / len(runs):.2f} |")


if __name__ == "__main__":
    main()
