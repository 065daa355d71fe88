"""Padded against padding-free SFT steps, ours and TRL's, on rows whose lengths spread widely, on CPU.

A benchmark, not a test. Every run trains the same tiny Llama (bench/trainers.py's: `build_builtin("tiny-llama")`
saved once) on the same rows in the same order: prompt/completion rows whose completions are digit strings with
lengths drawn log-uniformly from --min-len to --seq-len tokens (the builtin tokenizer makes one token of each digit),
so a padded batch is mostly padding. Like bench/trainers.py: the same batch, step count, constant lr, grad clip 1.0,
fp32, no gradient checkpointing, loss on the completion only, the same thread count; tokens are the real (non-pad)
input tokens of a step, so tokens/s compares the useful work done.

Ours: `train.padding_free` off and on, each with one micro-batch of the whole batch and with a token budget
(`train.micro_batch_tokens`: rows x longest row when padded, real tokens when padding-free). TRL: SFTTrainer with
`padding_free` off and on (its DataCollatorForLanguageModeling flattens the batch into one row with position ids,
as ours does; transformers' masking keeps the sequences apart under sdpa). Runs with the same rows and the same
micro-batching give the same losses (printed: the largest per-step difference from our padded run).

    .venv/bin/python bench/packing.py                   # about 4 minutes on 2 cores
    .venv/bin/python bench/packing.py --json bench/results/packing.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from trainers import machine, max_loss_diff, run_rlplane, run_trl  # noqa: E402  (bench/trainers.py: one way to run each side)

# name: (side, padding_free, token budget or None)
VARIANTS = {
    "rlplane padded": ("rlplane", False, None),
    "rlplane padded + budget": ("rlplane", False, "padded"),
    "rlplane padding-free": ("rlplane", True, None),
    "rlplane padding-free + budget": ("rlplane", True, "free"),
    "TRL padded": ("trl", False, None),
    "TRL padding-free": ("trl", True, None),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40, help="optimizer steps per run (default 40)")
    p.add_argument("--warmup", type=int, default=5, help="first steps left out of the timing (default 5)")
    p.add_argument("--batch", type=int, default=16, help="rows per step (default 16)")
    p.add_argument("--seq-len", type=int, default=256, help="longest row in tokens (default 256: the builtin model's positions)")
    p.add_argument("--min-len", type=int, default=8, help="shortest completion in tokens (default 8)")
    p.add_argument("--budget", type=int, default=1024, help="train.micro_batch_tokens of the budgeted runs (default 1024)")
    p.add_argument("--lr", type=float, default=5e-4, help="constant learning rate (default 5e-4)")
    p.add_argument("--threads", type=int, default=2, help="torch threads on each side (default 2)")
    p.add_argument("--only", default=",".join(VARIANTS), help="comma-separated variants (default: all)")
    p.add_argument("--trl-python", default=sys.executable, help="the interpreter with trl (default: this one)")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--beta", type=float, default=0.1, help=argparse.SUPPRESS)  # bench/trainers.py's runners read it
    return p.parse_args(argv)


def prepare(work: Path, args: argparse.Namespace) -> dict[str, Path]:
    """The tiny Llama and the rows: lengths log-uniform in [min_len, seq_len - prompt], seeded."""
    from trainer_core.models import build_builtin

    model, tokenizer = build_builtin("tiny-llama", "causal", seed=0)
    model.config.use_cache = False
    model.save_pretrained(work / "tiny-llama")
    tokenizer.save_pretrained(work / "tiny-llama")
    rng = random.Random(0)
    rows = []
    longest = args.seq_len - 8  # room for the prompt and eos
    for i in range(args.steps * args.batch):
        length = round(math.exp(rng.uniform(math.log(args.min_len), math.log(longest))))
        rows.append({"prompt": f"{i % 97}+{i % 89}=", "completion": "".join(rng.choice("0123456789") for _ in range(length))})
    (work / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"causal": work / "tiny-llama", "sft": work / "rows.jsonl"}


def run(name: str, work: Path, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    side, padding_free, budget = VARIANTS[name]
    if side == "trl":
        args.trl_extra = {"padding_free": padding_free}
        return run_trl("sft", work, paths, args)
    train = {"padding_free": padding_free}
    if budget is not None:
        train["micro_batch_tokens"] = args.budget
    args.spec_train = train
    return run_rlplane("sft", work, paths, args)


def table(results: dict[str, dict]) -> str:
    base = results.get("rlplane padded")
    lines = [
        "| run | steps/s | real tokens/s | vs padded (same side) | loss@1 | final loss (mean last 10) | "
        "max abs loss diff from rlplane padded |",
        "|" + "---|" * 7,
    ]
    for name, r in results.items():
        padded = results.get("TRL padded" if VARIANTS[name][0] == "trl" else "rlplane padded")
        speedup = f"{r['tokens_per_s'] / padded['tokens_per_s']:.2f}x" if padded else "-"
        diff = f"{max_loss_diff(base['losses'], r['losses']):.1e}" if base else "-"
        lines.append(
            f"| {name} | {r['steps_per_s']:.2f} | {r['tokens_per_s']:,.0f} | {speedup} | {r['first_loss']:.4f} | "
            f"{r['last10_loss']:.4f} | {diff} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        print(f"unknown variant(s) {unknown}: choose from {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-packing-") as tmp:
        work = Path(tmp)
        paths = prepare(work, args)
        results = {}
        for name in names:
            results[name] = r = run(name, work, paths, args)
            # as each run ends, so that a bench cut at a time limit still reports the runs it finished
            print(f"{name}: {r['steps_per_s']:.2f} steps/s, {r['tokens_per_s']:,.0f} tokens/s", flush=True)
    print(f"machine: {machine()}")
    print(
        f"{args.steps} steps of {args.batch} rows, lengths log-uniform in [{args.min_len}, {args.seq_len}] tokens, "
        f"token budget {args.budget}, {args.threads} threads\n"
    )
    print(table(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"machine": machine(), "args": vars(args) | {"json": str(args.json)}, "results": results}, default=str)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
