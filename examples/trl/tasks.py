"""A tiny arithmetic task for the TRL examples: prompts like "3+4=" and a verifier that checks the answer.
Self-contained (no download), so the examples run anywhere; swap in your own dataset and reward."""

from __future__ import annotations

import argparse
import random
import re
from typing import Any

MODEL_HELP = "A Hugging Face id, a local model directory, or builtin:tiny-llama (built here, no download)"


def load_model(name: str) -> tuple[Any, Any]:
    """(model, tokenizer) of `name`: a Hugging Face id or directory, or builtin:<name>, one of rlplane's tiny models
    built from a config by the worker's trainer stack (no download), so the examples run on a fresh machine."""
    if name.startswith("builtin:"):
        from trainer_core.models import build_builtin

        return build_builtin(name.removeprefix("builtin:"), "causal", seed=0)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32), AutoTokenizer.from_pretrained(name)


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
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--prompts-per-step", type=int, default=2)
    p.add_argument("--group", type=int, default=4, help="Completions per prompt")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--save-steps", type=int, default=50)
    p.add_argument("--output-dir", default=output_dir)
    p.add_argument("--project", default="default", help="Outside a worker: the project of the run it creates")
    return p.parse_args()
