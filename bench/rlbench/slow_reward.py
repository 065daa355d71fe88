"""The arithmetic reward behind a verifier's latency (bench/rl.py's slow-reward rows): each answer takes
RLBENCH_REWARD_LATENCY_MS to check, RLBENCH_REWARD_WORKERS answers at a time, as a scoring service or a sandboxed test
run does elsewhere; the caller waits for the batch (one sleep: the waiting, not a thread per answer, which would
measure Python's interpreter lock instead) and the answers are then scored here. Both sides of the bench call this
one function. Pure Python (TRL's venv imports it too)."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # trainer_core, for the arithmetic task's own reward

from trainer_core.data.tasks.arithmetic import reward  # noqa: E402


def score(prompts: list[str], responses: list[str], metadata: list[dict]) -> list[float]:
    """rlplane's python reward signature: f(prompts, responses, metadata) -> one reward per response."""
    latency = float(os.environ.get("RLBENCH_REWARD_LATENCY_MS", "50")) / 1000
    workers = int(os.environ.get("RLBENCH_REWARD_WORKERS", "64"))
    time.sleep(latency * math.ceil(len(prompts) / workers))  # the verifier's rounds of `workers` answers each
    return [reward(p, r, m.get("answer")) for p, r, m in zip(prompts, responses, metadata, strict=True)]
