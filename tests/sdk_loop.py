"""A plain training loop that reports through the SDK (the tests' script, not a trainer of ours): it fits y = 2x
with one weight by SGD, logs its loss every step, a checkpoint every --checkpoint-every steps and when asked to
stop, and stops when run.should_stop() says so (cancel, hand-back) or after --steps; it resumes from
run.resume_from.

    python tests/sdk_loop.py --steps 300 --step-s 0.1 --out DIR   # alone: RLPLANE_URL / RLPLANE_TOKEN name the API
    (as a command run, a worker sets RLPLANE_RUN_ID, RLPLANE_RUN_DIR, ... and it attaches to that run)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import rlplane


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--name", default="plain-loop")
    args = p.parse_args()
    run = rlplane.init(project="default", name=args.name, config={"lr": 0.05}, steps=args.steps)
    print(f"run {run.id} started", flush=True)
    out = Path(args.out)
    weight, step = 0.0, 0
    if run.resume_from is not None:  # a retried or handed-back attempt goes on where the last one saved
        saved = json.loads((run.resume_from / "weight.json").read_text())
        weight, step = saved["weight"], saved["step"]
        print(f"resumed at step {step}", flush=True)
    while step < args.steps:
        step += 1
        x = (step % 7) / 7 + 0.1
        grad = 2 * (weight * x - 2 * x) * x
        weight -= 0.5 * grad
        run.log({"train/loss": (weight * x - 2 * x) ** 2, "train/weight": weight}, step=step)
        if step % 10 == 0:
            run.log_samples([{"prompt": f"{x:.2f}*2=", "response": f"{weight * x:.2f}", "reward": -abs(weight - 2)}])
        stopping = run.should_stop()
        if stopping or (args.checkpoint_every and step % args.checkpoint_every == 0):
            folder = out / f"ckpt-{step}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "weight.json").write_text(json.dumps({"weight": weight, "step": step}))
            run.log_checkpoint(folder, step=step)
        if stopping:
            print(f"asked to stop at step {step}: saved", flush=True)
            break
        time.sleep(args.step_s)
    run.finish()


if __name__ == "__main__":
    main()
