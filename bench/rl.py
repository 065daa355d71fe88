"""Our grpo and ppo recipes against TRL's GRPOTrainer (TRL 1.16 has no PPOTrainer), on CPU.

A benchmark, not a test. GRPO, like with like: the same tiny Llama (built once with
`build_builtin("tiny-llama")`, saved to a temporary directory and loaded from there by both), the
same builtin:arithmetic prompts in the same order (shuffling off on both sides) scored by the same
reward (`trainer_core.data.tasks.arithmetic.reward`; TRL gets it wrapped as a reward function),
--prompts prompts x --group responses per step, --max-new-tokens, temperature 1 (no top-k, no
top-p), one generation and one optimizer update per step (TRL: num_iterations 1,
steps_per_generation 1, gradient_accumulation_steps 1), the same loss aggregation (per-response
mean, then over responses: TRL's loss_type "grpo"), group-std advantage scaling, clip 0.2,
beta (KL coefficient) > 0 so both compute reference log-probs, a constant lr without warmup or
weight decay, grad-norm clip 1.0, fp32, no gradient checkpointing (TRL defaults to on), no vLLM,
no eval during training, metrics logged every step, the same torch thread count.

PPO: ours only, an examples/ppo.yaml-like run (builtin:randomwalks, builtin tiny-gpt2, value head,
4 epochs of 2 minibatches per step). TRL 1.16 removed PPOTrainer (not in `trl`, not in
`trl.experimental`); the bench asks the TRL venv and prints the answer in the table.

The GRPO family's variants run on both sides with the same settings (GRPO_VARIANTS): grpo (TRL loss_type grpo),
grpo-dr_grpo (Dr. GRPO: loss dr_grpo without std scaling; TRL loss_type dr_grpo, scale_rewards none), grpo-dapo
(DAPO's token-level loss with clip-higher 0.28; TRL loss_type dapo, epsilon_high 0.28). With --sft-steps both start
from our SFT of the builtin model (--model), so that the learning curves (mean reward over the first and last 20
steps) mean something.

rlplane runs as `python -m trainer_core run SPEC.json --out DIR` with this interpreter; TRL runs as
`bench/rlbench/trl_side.py` with the interpreter given by --trl-python: the project's dev venv holds trl 1.16
(tests/test_command_runs.py runs it), or a venv of its own:

    python3 -m venv bench/.venv-trl
    bench/.venv-trl/bin/pip install trl==1.16.0 torch==2.13.0 transformers==5.23.0 datasets
    .venv/bin/python bench/rl.py                        # about 3 minutes on 2 cores
    .venv/bin/python bench/rl.py --only grpo,grpo-dr_grpo,grpo-dapo --sft-steps 250 --steps 40 --lr 2e-4 \
        --repeat 1 --trl-python .venv/bin/python --json bench/results/rl-variants.json

Steps/s is measured end of step to end of step after --warmup steps (rlplane: the "time" of
consecutive metrics rows, log_every 1; TRL: a callback's on_step_end). A step splits into
generation (rlplane: perf/gen_s; TRL: its `_generate`, timed by a subclass), training (rlplane:
perf/train_s, the update; TRL: the step less `_generate_and_score_completions`) and the rest
(rewards, advantages, reference log-probs, bookkeeping).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # trainer_core
sys.path.insert(0, str(ROOT / "bench"))

from trainers import env_for, machine  # noqa: E402  (the trainers bench's environment and machine facts)

TRL_SIDE = ROOT / "bench" / "rlbench" / "trl_side.py"
# The GRPO family, each variant as both sides set it: (our grpo section's overrides, TRL's GRPOConfig overrides).
GRPO_VARIANTS: dict[str, tuple[dict, dict]] = {
    "grpo": ({}, {"loss_type": "grpo", "epsilon_high": 0.2, "scale_rewards": "group"}),
    "grpo-dr_grpo": ({"loss": "dr_grpo", "normalize_std": False}, {"loss_type": "dr_grpo", "scale_rewards": "none"}),
    "grpo-dapo": ({"loss": "dapo", "clip_high": 0.28}, {"loss_type": "dapo", "epsilon_high": 0.28}),
    # grpo with each side's continuous-batching generation (transformers' paged KV cache): our gen.engine continuous,
    # TRL's use_transformers_continuous_batching. TRL's cache is sized as ours sizes itself on a CPU (pages of 32 tokens,
    # enough for every answer of a step at once): transformers' own sizing reads the machine's memory, 11 s a call here.
    "grpo-continuous": (
        {"gen": {"engine": "continuous"}},
        {
            "loss_type": "grpo",
            "epsilon_high": 0.2,
            "scale_rewards": "group",
            "use_transformers_continuous_batching": True,
            "transformers_continuous_batching_config": {"page_size": 32, "num_blocks": 256, "max_batch_tokens": 512},
        },
    ),
    # grpo scored by the arithmetic reward behind a verifier's latency (bench/rlbench/slow_reward.py: --reward-latency-ms
    # per answer, --reward-workers at a time), synchronous on both sides; and ours asynchronous (grpo.max_staleness 1:
    # the generator samples and scores the next step's groups while the trainer trains), with no TRL side
    "grpo-slow-reward": ({}, {"loss_type": "grpo", "epsilon_high": 0.2, "scale_rewards": "group"}),
    "grpo-async-slow-reward": ({"max_staleness": 1}, {}),
    # the same with the generator in a process of its own (grpo.generator: process): no interpreter lock shared
    "grpo-async-process-slow-reward": ({"max_staleness": 1, "generator": "process"}, {}),
}
SLOW_REWARD = {"grpo-slow-reward", "grpo-async-slow-reward", "grpo-async-process-slow-reward"}
OURS_ONLY = {"grpo-async-slow-reward", "grpo-async-process-slow-reward"}  # TRL's GRPOTrainer samples in step
ALGORITHMS = (*GRPO_VARIANTS, "ppo")
TRL_PPO_PROBE = """
import importlib.util, trl
print("trl.PPOTrainer:", "present" if hasattr(trl, "PPOTrainer") else "absent")
print("trl.experimental.ppo:", "present" if importlib.util.find_spec("trl.experimental.ppo") else "absent")
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30, help="GRPO steps per run (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="first steps left out of the timing (default 5)")
    p.add_argument("--prompts", type=int, default=8, help="GRPO prompts per step (default 8)")
    p.add_argument("--group", type=int, default=8, help="GRPO responses per prompt (default 8)")
    p.add_argument("--max-new-tokens", type=int, default=8, help="GRPO response length limit (default 8)")
    p.add_argument("--lr", type=float, default=1e-5, help="GRPO constant learning rate (default 1e-5)")
    p.add_argument(
        "--sft-steps", type=int, default=0, help="SFT the starting model for this many steps first (default 0: random)"
    )
    p.add_argument(
        "--model", default="tiny-llama", choices=("tiny-llama", "tiny-gpt2"), help="builtin model (default tiny-llama)"
    )
    p.add_argument("--beta", type=float, default=0.04, help="GRPO KL coefficient, > 0 (default 0.04)")
    p.add_argument("--ppo-steps", type=int, default=20, help="PPO steps per run (default 20)")
    p.add_argument("--ppo-batch", type=int, default=32, help="PPO rollouts per step (default 32)")
    p.add_argument(
        "--reward-latency-ms", type=float, default=50, help="slow-reward rows: each answer's wait before its score (default 50)"
    )
    p.add_argument("--reward-workers", type=int, default=64, help="slow-reward rows: answers scored at a time (default 64)")
    p.add_argument("--repeat", type=int, default=3, help="runs per side, alternating; the median run is shown (default 3)")
    p.add_argument("--threads", type=int, default=1, help="torch threads on both sides (default 1)")
    p.add_argument("--only", default=",".join(ALGORITHMS), help=f"comma-separated subset of {','.join(ALGORITHMS)}")
    p.add_argument("--trl-python", default=str(ROOT / "bench" / ".venv-trl" / "bin" / "python"), help="interpreter with trl")
    p.add_argument("--skip-trl", action="store_true", help="rlplane only")
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    p.add_argument("--keep", type=Path, help="keep the model, prompts and run directories here (default: a temp dir)")
    args = p.parse_args(argv)
    args.only = [a.strip() for a in args.only.split(",") if a.strip()]
    args.trl_python = os.path.abspath(args.trl_python)  # TRL runs in the work directory; not resolved: a venv's link
    bad = [a for a in args.only if a not in ALGORITHMS]
    if bad:
        p.error(f"--only: unknown algorithm(s) {bad}; choose from {','.join(ALGORITHMS)}")
    if args.warmup >= min(args.steps, args.ppo_steps):
        p.error("--warmup must be smaller than --steps and --ppo-steps")
    if args.beta <= 0:
        p.error("--beta must be > 0: the comparison includes the reference model's forward")
    return args


def prepare(work: Path, args: argparse.Namespace) -> dict[str, Path]:
    """The starting model both sides load and the builtin:arithmetic training prompts; returns their paths. The model
    is the tiny Llama (seed 0), SFT'd by our recipe for --sft-steps first, so that its answers are right often enough
    for rewards to differ within a group (from random weights every reward is 0 and nothing is learned)."""
    from trainer_core.data import load_examples
    from trainer_core.models import build_builtin

    model, tokenizer = build_builtin(args.model, "causal", seed=0)
    model_dir = work / args.model
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    if args.sft_steps:
        spec = {
            "name": "bench-sft",
            "algorithm": "sft",
            "model": {"path": str(model_dir), "max_seq_len": 32},
            "data": {"source": "builtin:arithmetic", "eval_fraction": 0.1},
            "train": {"steps": args.sft_steps, "batch_size": 32, "lr": 3e-3, "warmup_steps": 20, "eval_every": None},
        }
        spec_path = work / "sft.json"
        spec_path.write_text(json.dumps(spec))
        cmd = [sys.executable, "-m", "trainer_core", "run", str(spec_path), "--out", str(work / "sft")]
        proc = subprocess.run(cmd, cwd=ROOT, env=env_for(args), capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"the SFT start failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        model_dir = work / "sft" / "final"
    rows = load_examples({"source": "builtin:arithmetic"}, "prompts", seed=0).train
    prompts = work / "arithmetic-prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": r["prompt"], "answer": r["answer"]}) + "\n" for r in rows))
    return {"model": model_dir, "prompts": prompts}


# --- rlplane ---


def rlplane_spec(algorithm: str, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    common = {
        "backend": {"kind": "torch", "precision": "fp32"},
        "resources": {"queue": "cpu", "gpus": 0},
    }
    train = {"schedule": "constant", "warmup_steps": 0, "weight_decay": 0.0, "max_grad_norm": 1.0, "log_every": 1}
    if algorithm in GRPO_VARIANTS:
        slow = {"kind": "python", "entrypoint": "slow_reward:score"}
        return {
            "name": f"bench-{algorithm}",
            "algorithm": "grpo",
            "model": {"path": str(paths["model"]), "max_seq_len": 32, "dtype": "fp32"},
            "reward": slow if algorithm in SLOW_REWARD else {"kind": "builtin", "name": "arithmetic"},
            "data": {"source": "builtin:arithmetic", "shuffle": False},
            **common,
            "train": {**train, "steps": args.steps, "batch_size": args.prompts * args.group, "lr": args.lr},
            "grpo": {
                "group_size": args.group,
                "beta": args.beta,
                "kl_estimator": "k3",
                "epochs": 1,
                "baseline": "group_mean",
                "normalize_std": True,
                "cliprange": 0.2,
                "samples_to_log": 0,
                **GRPO_VARIANTS[algorithm][0],
                "gen": {
                    "max_new_tokens": args.max_new_tokens,
                    "temperature": 1.0,
                    "top_k": 0,
                    "top_p": 1.0,
                    **GRPO_VARIANTS[algorithm][0].get("gen", {}),
                },
            },
        }
    return {  # examples/ppo.yaml from the builtin model instead of the sft-randomwalks run
        "name": "bench-ppo",
        "algorithm": "ppo",
        "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32, "dtype": "fp32"},
        "reward": {"kind": "builtin", "name": "randomwalks"},
        "data": {"source": "builtin:randomwalks", "eval_fraction": 0.0, "shuffle": False},
        **common,
        "train": {**train, "steps": args.ppo_steps, "batch_size": args.ppo_batch, "lr": 3e-4},
        "ppo": {
            "kl_coef": 0.05,
            "target_kl": 6,
            "epochs": 4,
            "minibatch_size": args.ppo_batch // 2,
            "samples_to_log": 0,
            "gen": {"max_new_tokens": 10, "temperature": 1.0, "top_k": 0, "top_p": 1.0},
        },
    }


def run_rlplane(algorithm: str, work: Path, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    spec_path = work / f"rlplane-{algorithm}.json"
    spec_path.write_text(json.dumps(rlplane_spec(algorithm, paths, args)))
    out = work / f"rlplane-{algorithm}-{time.time_ns()}"
    cmd = [sys.executable, "-m", "trainer_core", "run", str(spec_path), "--out", str(out)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=slow_reward_env(args), capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"rlplane {algorithm} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    by_step: dict[int, dict[str, float]] = {}
    times: dict[int, float] = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        by_step.setdefault(rec["step"], {})[rec["key"]] = rec["value"]
        times.setdefault(rec["step"], rec["time"])  # the first row of a step: its training metrics, before any eval
    steps = sorted(s for s in by_step if "perf/gen_s" in by_step[s])
    step_s = [times[s] - times[s - 1] for s in steps]  # step 0 is the evaluation before training
    return summarize(
        step_s=step_s,
        gen_s=[by_step[s]["perf/gen_s"] for s in steps],
        train_s=[by_step[s]["perf/train_s"] for s in steps],
        response_length=[by_step[s]["gen/response_length"] for s in steps],
        reward=[by_step[s]["reward/mean"] for s in steps],
        warmup=args.warmup,
        wall=wall,
    )


def slow_reward_env(args: argparse.Namespace) -> dict[str, str]:
    """env_for, with the slow reward importable and allowed (RLPLANE_REWARD_ENTRYPOINTS) and its latency set."""
    env = env_for(args)
    path = [str(ROOT / "bench" / "rlbench"), env.get("PYTHONPATH", "")]
    return env | {
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "RLPLANE_REWARD_ENTRYPOINTS": "slow_reward:score",
        "RLBENCH_REWARD_LATENCY_MS": str(args.reward_latency_ms),
        "RLBENCH_REWARD_WORKERS": str(args.reward_workers),
    }


# --- TRL ---


def run_trl(algorithm: str, work: Path, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    config = {
        "model": str(paths["model"]),
        "prompts": str(paths["prompts"]),
        "out": str(work / f"trl-{algorithm}-{time.time_ns()}"),
        "steps": args.steps,
        "prompts_per_step": args.prompts,
        "group": args.group,
        "max_new_tokens": args.max_new_tokens,
        "lr": args.lr,
        "beta": args.beta,
        "threads": args.threads,
        "root": str(ROOT),
        "result": str(work / f"trl-{algorithm}.json"),
        "variant": GRPO_VARIANTS[algorithm][1],
        "slow_reward": algorithm in SLOW_REWARD,
    }
    config_path = work / f"trl-{algorithm}-config.json"
    config_path.write_text(json.dumps(config))
    started = time.perf_counter()
    proc = subprocess.run(
        [args.trl_python, str(TRL_SIDE), str(config_path)], cwd=work, env=slow_reward_env(args), capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"TRL {algorithm} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    res = json.loads(Path(config["result"]).read_text())
    out = summarize(
        step_s=res["step_s"],
        gen_s=res["gen_s"],
        train_s=[step - rollout for step, rollout in zip(res["step_s"], res["rollout_s"], strict=True)],
        response_length=res["response_length"],
        reward=res["rewards"],
        warmup=args.warmup,
        wall=wall,
    )
    for key in ("versions", "gradient_checkpointing", "optim", "bf16", "reference"):
        out[key] = res[key]
    return out


def trl_ppo_status(args: argparse.Namespace) -> str:
    """Why TRL's PPO is not in the table, as the TRL venv answers it."""
    if args.skip_trl:
        return "not run (--skip-trl)"
    proc = subprocess.run([args.trl_python, "-c", TRL_PPO_PROBE], env=env_for(args), capture_output=True, text=True)
    if proc.returncode != 0:
        return f"probe failed: {proc.stderr.strip().splitlines()[-1]}"
    answer = dict(line.split(": ", 1) for line in proc.stdout.strip().splitlines())
    if "present" in answer.values():
        return f"present ({answer}) but not wired into this bench"
    return "no PPOTrainer in TRL " + trl_version(args) + " (trl.PPOTrainer absent, no trl.experimental.ppo)"


def trl_version(args: argparse.Namespace) -> str:
    proc = subprocess.run([args.trl_python, "-c", "import trl; print(trl.__version__)"], capture_output=True, text=True)
    return proc.stdout.strip() or "?"


# --- numbers and the table ---


def summarize(
    step_s: list[float],
    gen_s: list[float],
    train_s: list[float],
    response_length: list[float],
    reward: list[float],
    warmup: int,
    wall: float,
) -> dict:
    step, gen, train = step_s[warmup:], gen_s[warmup:], train_s[warmup:]
    seconds = sum(step)
    return {
        "steps": len(step_s),
        "timed_steps": len(step),
        "steps_per_s": len(step) / seconds,
        "gen_share": sum(gen) / seconds,
        "train_share": sum(train) / seconds,
        "other_share": 1 - (sum(gen) + sum(train)) / seconds,
        "gen_s_per_step": sum(gen) / len(gen),
        "train_s_per_step": sum(train) / len(train),
        "response_length": sum(response_length[warmup:]) / len(step),
        "reward_first": sum(reward[:20]) / len(reward[:20]) if reward else float("nan"),  # the first 20 steps' mean
        "reward_last": sum(reward[-20:]) / len(reward[-20:]) if reward else float("nan"),  # the last 20 steps'
        "reward": reward,
        "process_wall_s": wall,
        "step_s": step_s,
    }


def split_text(r: dict) -> str:
    return f"{r['gen_share']:.0%} / {r['other_share']:.0%} / {r['train_share']:.0%}"


def table(results: dict[str, dict], trl_ppo: str) -> str:
    head = (
        "| algorithm | rlplane steps/s | TRL steps/s | rlplane/TRL | rlplane gen / other / train | "
        "TRL gen / other / train | gen ms/step rlplane / TRL | train ms/step rlplane / TRL | "
        "response tokens rlplane / TRL | reward, first 20 -> last 20 steps, rlplane / TRL |"
    )
    lines = [head, "|" + "---|" * 10]
    for algorithm, r in results.items():
        ours, trl = r["rlplane"], r.get("trl")
        if trl is None:
            why = trl_ppo if algorithm == "ppo" else "TRL's GRPOTrainer is synchronous" if algorithm in OURS_ONLY else "not run"
            lines.append(
                f"| {algorithm} | {ours['steps_per_s']:.2f} | - ({why}) | - | {split_text(ours)} | - | "
                f"{ours['gen_s_per_step'] * 1e3:.0f} / - | {ours['train_s_per_step'] * 1e3:.0f} / - | "
                f"{ours['response_length']:.2f} / - | {ours['reward_first']:.3f} -> {ours['reward_last']:.3f} / - |"
            )
            continue
        lines.append(
            f"| {algorithm} | {ours['steps_per_s']:.2f} | {trl['steps_per_s']:.2f} | "
            f"{ours['steps_per_s'] / trl['steps_per_s']:.2f}x | {split_text(ours)} | {split_text(trl)} | "
            f"{ours['gen_s_per_step'] * 1e3:.0f} / {trl['gen_s_per_step'] * 1e3:.0f} | "
            f"{ours['train_s_per_step'] * 1e3:.0f} / {trl['train_s_per_step'] * 1e3:.0f} | "
            f"{ours['response_length']:.2f} / {trl['response_length']:.2f} | "
            f"{ours['reward_first']:.3f} -> {ours['reward_last']:.3f} / {trl['reward_first']:.3f} -> {trl['reward_last']:.3f} |"
        )
    return "\n".join(lines)


def median_run(runs: list[dict]) -> dict:
    """The run with the median steps/s, with every run's steps/s beside it."""
    ordered = sorted(runs, key=lambda r: r["steps_per_s"])
    return {**ordered[(len(ordered) - 1) // 2], "all_steps_per_s": [r["steps_per_s"] for r in runs]}


def measure(work: Path, args: argparse.Namespace) -> dict[str, dict]:
    paths = prepare(work, args)
    runs: dict[str, dict[str, list[dict]]] = {a: {"rlplane": [], "trl": []} for a in args.only}
    for i in range(args.repeat):  # alternate the sides so that drift on the machine hits both alike
        for algorithm in args.only:
            sides = [("rlplane", run_rlplane)]
            if algorithm in GRPO_VARIANTS and algorithm not in OURS_ONLY and not args.skip_trl:
                sides.append(("trl", run_trl))
            for side, fn in sides if i % 2 == 0 else sides[::-1]:
                runs[algorithm][side].append(fn(algorithm, work, paths, args))
                rate = runs[algorithm][side][-1]["steps_per_s"]
                print(f"[{i + 1}/{args.repeat}] {algorithm} {side}: {rate:.2f} steps/s", flush=True)
    return {a: {side: median_run(rs) for side, rs in sides.items() if rs} for a, sides in runs.items()}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.skip_trl and not Path(args.trl_python).exists():
        print(f"no TRL interpreter at {args.trl_python}: create bench/.venv-trl (see the docstring) or pass --skip-trl")
        return 2
    load_before = os.getloadavg()
    if args.keep:
        work = args.keep.resolve()
        work.mkdir(parents=True, exist_ok=True)
        results = measure(work, args)
    else:
        with tempfile.TemporaryDirectory(prefix="rl-bench-") as tmp:
            results = measure(Path(tmp), args)
    load_after = os.getloadavg()
    trl_ppo = trl_ppo_status(args) if "ppo" in args.only else "not asked"
    info = machine()
    trl = next((r["trl"] for r in results.values() if "trl" in r), None)
    print()
    print(
        f"{info['cpu']}, {info['cores']} cores, {args.threads} torch thread(s); torch {info['torch']}, "
        f"transformers {info['transformers']}" + (f"; TRL side: {trl['versions']}" if trl else "")
    )
    print(f"load average (1 min) before / after: {load_before[0]:.2f} / {load_after[0]:.2f}")
    if trl:
        print(
            f"TRL as run: optim {str(trl['optim']).split('.')[-1].lower()}, bf16 {trl['bf16']}, gradient checkpointing "
            f"{trl['gradient_checkpointing']}, reference model {trl['reference']}; "
            "rlplane: torch.optim.AdamW(fused=True), fp32, no checkpointing"
        )
    print(
        f"grpo: {args.model}{f' after {args.sft_steps} SFT steps' if args.sft_steps else ''}, builtin:arithmetic, "
        f"{args.prompts} prompts x {args.group} responses, max_new_tokens "
        f"{args.max_new_tokens}, lr {args.lr:g} constant, beta {args.beta:g}, {args.steps} steps ({args.warmup} not timed)\n"
        f"ppo: builtin tiny-gpt2, builtin:randomwalks, {args.ppo_batch} rollouts, 4 epochs x 2 minibatches, "
        f"{args.ppo_steps} steps ({args.warmup} not timed); median of {args.repeat} alternating runs per side\n"
        "gen / other / train: shares of a step (other: rewards, advantages, reference log-probs, bookkeeping)\n"
    )
    print(table(results, trl_ppo))
    for name, placement in (("grpo-async-slow-reward", "a thread"), ("grpo-async-process-slow-reward", "its own process")):
        if {"grpo-slow-reward", name} <= set(results):
            sync, overlapped = results["grpo-slow-reward"]["rlplane"], results[name]["rlplane"]
            print(
                f"slow reward ({args.reward_latency_ms:g} ms an answer, {args.reward_workers} at a time): async "
                f"(max_staleness 1, the generator in {placement}) step time / synchronous step time at equal steps: "
                f"{sync['steps_per_s'] / overlapped['steps_per_s']:.2f}x"
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "machine": info}
        payload |= {"load_average": [load_before, load_after], "trl_ppo": trl_ppo, "results": results}
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
