"""A tiny arithmetic task for the TRL examples: prompts like "3+4=" and a verifier that checks the answer.
Self-contained (no download), so the examples run anywhere; swap in your own dataset and reward."""

from __future__ import annotations

import argparse
import random
import re


def problems(count: int, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append({"prompt": f"{a}+{b}=", "answer": str(a + b)})
    return rows


def correct(completions: list[str], answer: list[str], **_: object) -> list[float]:
    """1.0 where the completion starts with the right number, else 0.0 (TRL passes dataset columns by name)."""
    scores = []
    for completion, expected in zip(completions, answer, strict=True):
        match = re.match(r"\s*(-?\d+)", completion)
        scores.append(1.0 if match and match.group(1) == expected else 0.0)
    return scores


def rl_arguments(description: str, output_dir: str) -> argparse.Namespace:
    """The command line of the RL examples (grpo.py, rloo.py)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", required=True, help="A Hugging Face id or a local model directory")
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--prompts-per-step", type=int, default=2)
    p.add_argument("--group", type=int, default=4, help="Completions per prompt")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--save-steps", type=int, default=50)
    p.add_argument("--output-dir", default=output_dir)
    p.add_argument("--project", default="default", help="Outside a worker: the project of the run it creates")
    return p.parse_args()
