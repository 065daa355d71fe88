"""A script whose every rank saves its own shard of each checkpoint on its own node, as FSDP's sharded state does:
the tests' stand-in for a user's multi-node script (not a trainer of ours). Each rank writes shard-<rank>.json into
--out/ckpt-<step> (its node's disk), each node's first rank the same meta.json, and every rank hands them in with
run.log_checkpoint(..., sharded=True). A resumed attempt's ranks each read their own shard back from
run.resume_from. --crash-at: rank 1 of attempt 1 dies there (a node lost).

    (a command run of two nodes: torchrun starts it; a worker sets RLPLANE_RUN_DIR, RLPLANE_ATTEMPT, ...)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch.distributed as dist

import rlplane


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--crash-at", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    run = rlplane.init()
    step = 0
    if run.resume_from is not None:
        shard = json.loads((run.resume_from / f"shard-{rank}.json").read_text())
        assert shard["rank"] == rank, shard
        step = shard["step"]
        print(f"rank {rank} resumed at step {step} from its own shard", flush=True)
    while step < args.steps:
        step += 1
        run.log({"train/loss": 1.0 / step}, step=step)
        if step % args.checkpoint_every == 0:
            folder = Path(args.out) / f"ckpt-{step}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"shard-{rank}.json").write_text(json.dumps({"rank": rank, "step": step}))
            if int(os.environ["LOCAL_RANK"]) == 0:  # the same file on every node: one file of the checkpoint
                (folder / "meta.json").write_text(json.dumps({"step": step}))
            dist.barrier()
            run.log_checkpoint(folder, step=step, sharded=True)
        if rank == 1 and step == args.crash_at and os.environ.get("RLPLANE_ATTEMPT") == "1":
            os._exit(1)
        time.sleep(args.step_s)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
