"""The arithmetic reward behind a verifier's latency (bench/rl.py's slow-reward rows): each answer waits
RLBENCH_REWARD_LATENCY_MS before it is scored, RLBENCH_REWARD_WORKERS answers at a time, as a scoring service or a
sandboxed test run answers; both sides of the bench call this one function. Pure Python (TRL's venv imports it too)."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # trainer_core, for the arithmetic task's own reward

from trainer_core.data.tasks.arithmetic import reward  # noqa: E402


def score(prompts: list[str], responses: list[str], metadata: list[dict]) -> list[float]:
    """rlplane's python reward signature: f(prompts, responses, metadata) -> one reward per response."""
    latency = float(os.environ.get("RLBENCH_REWARD_LATENCY_MS", "50")) / 1000
    workers = int(os.environ.get("RLBENCH_REWARD_WORKERS", "16"))

    def one(i: int) -> float:
        time.sleep(latency)
        return reward(prompts[i], responses[i], metadata[i].get("answer"))

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, range(len(prompts))))
