"""Our sft, reward and dpo recipes against TRL's SFTTrainer, RewardTrainer and DPOTrainer, on CPU.

A benchmark, not a test. Both sides get the same tiny Llama (built once with
`build_builtin("tiny-llama")`, saved to a temporary directory and loaded from there by both),
the same builtin:arithmetic rows in the same order (a JSONL file for rlplane, a
`datasets.Dataset` for TRL, shuffling off on both sides), the same batch size, max length,
step count, learning rate (constant, no warmup, no weight decay, grad-norm clip 1.0), fp32,
no gradient checkpointing, no eval, metrics logged every step, and the same thread count.

rlplane runs as `python -m trainer_core run SPEC.json --out DIR` with this interpreter; TRL runs
as `bench/trainersbench/trl_side.py` with the interpreter of a separate venv (--trl-python),
so TRL never enters the project's .venv:

    python3 -m venv bench/.venv-trl
    bench/.venv-trl/bin/pip install trl==1.16.0 torch==2.13.0 transformers==5.23.0 datasets
    .venv/bin/python bench/trainers.py                      # about 3.5 minutes on 2 cores
    .venv/bin/python bench/trainers.py --only dpo --steps 300 --json bench/results/trainers.json

Steps/s and tokens/s are measured end of step to end of step (data, forward, backward,
optimizer, logging), after --warmup steps. Tokens are the non-padding input tokens of a step
(both sides of every pair for reward and dpo).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRL_SIDE = ROOT / "bench" / "trainersbench" / "trl_side.py"
RECIPES = ("sft", "reward", "dpo")
KIND = {"sft": "sft", "reward": "preference", "dpo": "preference"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200, help="optimizer steps per run (default 200)")
    p.add_argument("--warmup", type=int, default=20, help="first steps left out of the timing (default 20)")
    p.add_argument("--batch", type=int, default=16, help="examples (pairs for reward/dpo) per step (default 16)")
    p.add_argument("--seq-len", type=int, default=64, help="max sequence length in tokens (default 64)")
    p.add_argument("--lr", type=float, default=5e-4, help="constant learning rate (default 5e-4; dpo uses lr/10)")
    p.add_argument("--beta", type=float, default=0.1, help="dpo beta (default 0.1)")
    p.add_argument("--repeat", type=int, default=3, help="runs per side, alternating; the median run is shown (default 3)")
    p.add_argument("--threads", type=int, default=1, help="torch threads on both sides (default 1)")
    p.add_argument("--only", default=",".join(RECIPES), help="comma-separated subset of sft,reward,dpo")
    p.add_argument("--trl-python", default=str(ROOT / "bench" / ".venv-trl" / "bin" / "python"), help="interpreter with trl")
    p.add_argument("--skip-trl", action="store_true", help="rlplane only")
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    p.add_argument("--keep", type=Path, help="keep the model, data and run directories here (default: a temp dir)")
    args = p.parse_args(argv)
    args.only = [r.strip() for r in args.only.split(",") if r.strip()]
    bad = [r for r in args.only if r not in RECIPES]
    if bad:
        p.error(f"--only: unknown recipe(s) {bad}; choose from {','.join(RECIPES)}")
    if args.warmup >= args.steps:
        p.error("--warmup must be smaller than --steps")
    return args


# --- shared inputs: one model directory per head, one data file per row kind ---


def prepare(work: Path, args: argparse.Namespace) -> dict[str, Path]:
    """Save the tiny Llama (causal and score head, seed 0) and the arithmetic rows; returns their paths."""
    from trainer_core.data import builtin_examples
    from trainer_core.models import build_builtin

    paths = {}
    for kind in ("causal", "score"):
        model, tokenizer = build_builtin("tiny-llama", kind, seed=0)
        model.config.use_cache = False
        out = work / f"tiny-llama-{kind}"
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        paths[kind] = out
    for kind in ("sft", "preference"):
        rows = builtin_examples("arithmetic", kind, seed=0, eval_fraction=0.0).train
        rows = rows[: len(rows) // args.batch * args.batch]  # whole batches only: TRL would end an epoch on a short one
        path = work / f"arithmetic-{kind}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        paths[kind] = path
    return paths


def env_for(args: argparse.Namespace) -> dict[str, str]:
    n = str(args.threads)
    return {
        **os.environ,
        "OMP_NUM_THREADS": n,
        "MKL_NUM_THREADS": n,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }


# --- rlplane ---


def rlplane_spec(recipe: str, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    spec = {
        "name": f"bench-{recipe}",
        "algorithm": recipe,
        "model": {"path": str(paths["score" if recipe == "reward" else "causal"]), "max_seq_len": args.seq_len, "dtype": "fp32"},
        "data": {"source": str(paths[KIND[recipe]]), "eval_fraction": 0.0, "shuffle": False},
        "backend": {"kind": "torch", "precision": "fp32"},
        "resources": {"queue": "cpu", "gpus": 0},
        "train": {
            "steps": args.steps,
            "batch_size": args.batch,
            "lr": lr_for(recipe, args),
            "warmup_steps": 0,
            "schedule": "constant",
            "weight_decay": 0.0,
            "max_grad_norm": 1.0,
            "log_every": 1,
        },
    }
    if recipe == "dpo":
        spec["dpo"] = {"beta": args.beta, "loss": "sigmoid", "label_smoothing": 0.0, "ref_model": None}
    spec["train"] |= getattr(args, "spec_train", {})  # bench/packing.py's padding_free and micro_batch_tokens
    return spec


def lr_for(recipe: str, args: argparse.Namespace) -> float:
    return args.lr / 10 if recipe == "dpo" else args.lr


def run_rlplane(recipe: str, work: Path, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    spec_path = work / f"rlplane-{recipe}.json"
    spec_path.write_text(json.dumps(rlplane_spec(recipe, paths, args)))
    out = work / f"rlplane-{recipe}-{time.time_ns()}"
    cmd = [sys.executable, "-m", "trainer_core", "run", str(spec_path), "--out", str(out)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env_for(args), capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"rlplane {recipe} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    by_step: dict[int, dict[str, float]] = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        by_step.setdefault(rec["step"], {})[rec["key"]] = rec["value"]
    steps = [by_step[s] for s in sorted(by_step) if "perf/step_s" in by_step[s]]
    return summarize(
        step_s=[s["perf/step_s"] for s in steps],
        tokens=[s["perf/tokens_per_s"] * s["perf/step_s"] for s in steps],
        losses=[s["train/loss"] for s in steps],
        warmup=args.warmup,
        wall=wall,
    )


# --- TRL ---


def run_trl(recipe: str, work: Path, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    config = {
        "recipe": recipe,
        "model": str(paths["score" if recipe == "reward" else "causal"]),
        "data": str(paths[KIND[recipe]]),
        "out": str(work / f"trl-{recipe}-{time.time_ns()}"),
        "steps": args.steps,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "lr": lr_for(recipe, args),
        "beta": args.beta,
        "threads": args.threads,
        "result": str(work / f"trl-{recipe}.json"),
        **getattr(args, "trl_extra", {}),  # bench/packing.py's padding_free
    }
    config_path = work / f"trl-{recipe}-config.json"
    config_path.write_text(json.dumps(config))
    started = time.perf_counter()
    proc = subprocess.run(
        [args.trl_python, str(TRL_SIDE), str(config_path)], cwd=work, env=env_for(args), capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"TRL {recipe} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    res = json.loads(Path(config["result"]).read_text())
    out = summarize(step_s=res["step_s"], tokens=res["tokens"], losses=res["losses"], warmup=args.warmup, wall=wall)
    out["versions"] = res["versions"]
    out["gradient_checkpointing"], out["optim"], out["bf16"] = res["gradient_checkpointing"], res["optim"], res["bf16"]
    return out


# --- numbers and the table ---


def summarize(step_s: list[float], tokens: list[float], losses: list[float], warmup: int, wall: float) -> dict:
    timed_s, timed_tok = step_s[warmup:], tokens[warmup:]
    seconds = sum(timed_s)
    tail = losses[-10:]
    return {
        "steps": len(step_s),
        "timed_steps": len(timed_s),
        "steps_per_s": len(timed_s) / seconds,
        "tokens_per_s": sum(timed_tok) / seconds,
        "tokens_per_step": sum(timed_tok) / len(timed_tok),
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "last10_loss": sum(tail) / len(tail),
        "process_wall_s": wall,
        "losses": losses,
    }


def table(results: dict[str, dict]) -> str:
    head = (
        "| recipe | rlplane steps/s | TRL steps/s | ratio | rlplane tok/s | TRL tok/s | "
        "loss@1 rlplane / TRL | final loss (mean last 10) rlplane / TRL | max abs loss diff, any step |"
    )
    lines = [head, "|" + "---|" * 9]
    for recipe, r in results.items():
        ours, trl = r["rlplane"], r.get("trl")
        if trl is None:
            lines.append(
                f"| {recipe} | {ours['steps_per_s']:.1f} | - | - | {ours['tokens_per_s']:,.0f} | - | "
                f"{ours['first_loss']:.4f} / - | {ours['last10_loss']:.4f} / - | - |"
            )
            continue
        lines.append(
            f"| {recipe} | {ours['steps_per_s']:.1f} | {trl['steps_per_s']:.1f} | "
            f"{ours['steps_per_s'] / trl['steps_per_s']:.2f}x | {ours['tokens_per_s']:,.0f} | {trl['tokens_per_s']:,.0f} | "
            f"{ours['first_loss']:.4f} / {trl['first_loss']:.4f} | {ours['last10_loss']:.4f} / {trl['last10_loss']:.4f} | "
            f"{max_loss_diff(ours['losses'], trl['losses']):.1e} |"
        )
    return "\n".join(lines)


def median_run(runs: list[dict]) -> dict:
    """The run with the median steps/s, with every run's steps/s beside it."""
    ordered = sorted(runs, key=lambda r: r["steps_per_s"])
    return {**ordered[(len(ordered) - 1) // 2], "all_steps_per_s": [r["steps_per_s"] for r in runs]}


def max_loss_diff(a: list[float], b: list[float]) -> float:
    """Same rows in the same order on both sides, so the per-step losses should agree step by step."""
    return max((abs(x - y) for x, y in zip(a, b, strict=False)), default=float("nan"))


def machine() -> dict:
    import torch
    import transformers

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if not args.skip_trl and not Path(args.trl_python).exists():
        print(f"no TRL interpreter at {args.trl_python}: create bench/.venv-trl (see the docstring) or pass --skip-trl")
        return 2
    tmp = None
    if args.keep:
        work = args.keep.resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="trainers-bench-")
        work = Path(tmp.name)
    try:
        paths = prepare(work, args)
        runs: dict[str, dict[str, list[dict]]] = {r: {"rlplane": [], "trl": []} for r in args.only}
        for i in range(args.repeat):  # alternate the sides so that drift on the machine hits both alike
            for recipe in args.only:
                sides = [("rlplane", run_rlplane)] + ([] if args.skip_trl else [("trl", run_trl)])
                for side, fn in sides if i % 2 == 0 else sides[::-1]:
                    runs[recipe][side].append(fn(recipe, work, paths, args))
                    rate = runs[recipe][side][-1]["steps_per_s"]
                    print(f"[{i + 1}/{args.repeat}] {recipe} {side}: {rate:.1f} steps/s", flush=True)
        results = {recipe: {side: median_run(rs) for side, rs in sides.items() if rs} for recipe, sides in runs.items()}
    finally:
        if tmp is not None:
            tmp.cleanup()
    info = machine()
    trl_versions = next((r["trl"]["versions"] for r in results.values() if "trl" in r), None)
    print()
    print(
        f"{info['cpu']}, {info['cores']} cores, {args.threads} torch thread(s); torch {info['torch']}, "
        f"transformers {info['transformers']}" + (f"; TRL side: {trl_versions}" if trl_versions else "")
    )
    trl_opts = next((r["trl"] for r in results.values() if "trl" in r), None)
    if trl_opts:
        print(
            f"TRL as run: optim {str(trl_opts['optim']).split('.')[-1].lower()}, bf16 {trl_opts['bf16']}, gradient checkpointing "
            f"{trl_opts['gradient_checkpointing']}; rlplane: torch.optim.AdamW(fused=True), fp32, no checkpointing"
        )
    print(
        f"tiny-llama, builtin:arithmetic, batch {args.batch}, max len {args.seq_len}, {args.steps} steps "
        f"({args.warmup} warm-up steps not timed), median of {args.repeat} alternating runs per side,\n"
        f"lr {args.lr:g} constant (dpo {args.lr / 10:g}, beta {args.beta:g}), fp32, no gradient checkpointing\n"
    )
    print(table(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "machine": info}
        payload["trl_versions"], payload["results"] = trl_versions, results
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
