"""SFT and GRPO on one GPU: each backend's tokens/s, MFU and peak memory beside TRL's SFTTrainer, and the GRPO
step split into generation and training beside plain Hugging Face generate.

A benchmark, not a test; run on a lent GPU machine by scripts/gpu-check.sh (docs/backends.md), never in CI.

The model is a Llama of --hidden x --layers built from a config with random weights (seed 0; no hub), with the
builtin tokenizer's vocabulary, saved once and loaded by every run. SFT rows are synthetic: a prompt of about a
third and a completion of about two thirds of --seq-len tokens (numbers drawn with seed 0, lengths measured with
the tokenizer), so every row nearly fills the sequence and padding is small on both sides. Every SFT run is the
same job: --steps optimizer steps of --batch rows in micro-batches of --micro-batch, constant lr, no warmup, clip
1.0, bf16 mixed precision (fp32 master weights; TRL: `bf16=True` on an fp32 model, the same), no gradient
checkpointing, no eval, no checkpoints. Ours runs as `torchrun --nproc_per_node 1 -m trainer_core run`; TRL as
bench/trainersbench/trl_side.py with the same model, rows and settings. A row is a backend with the model section's
speed switches (`torch+compile+liger`: model.compile and model.kernels: liger), or TRL with its own
(`trl+compile+liger`: torch_compile and use_liger_kernel). Each of our runs is stopped once its last step has
reported: our export and final checkpoint are not what is measured, so wall is to the last step.

Tokens/s is the median over the steps after --warmup of non-padding tokens per step over the step's seconds (ours:
perf/tokens_per_s; TRL: the tokens its batches held over the time between step ends). MFU = 6 N tokens/s / peak,
N = every parameter, the GPU's dense bf16 peak from its data sheet (H100/H200 989 TFLOP/s). Peak memory is the
GPU's memory in use read by nvidia-smi every 0.2 s while the run is the only thing on the GPU (the CUDA context
included, so a little above torch's own peak).

GRPO, per engine (grpo-hf: the hf engine; grpo-hf-static: with gen.static_cache; grpo-megatron: the megatron engine
on its backend; grpo-async-hf and grpo-async-process: asynchronous GRPO at bound 1, its generator a thread or a process
on the same GPU, whose step s against grpo-hf's is the overlap's gain where nothing waits on a reward): --grpo-steps
steps on builtin:arithmetic prompts with the arithmetic reward, group 8, --gen-tokens new tokens at temperature 1
(random weights: responses run to the limit or an early EOS); perf/gen_s and perf/train_s are the trainer's own split
of each step (with a generator, gen s is the trainer's wait for its batch), medians after the first step. "HF generate" times
`model.generate` on the same model in bf16 for the same number of prompts x group, same length and sampling, in
this process: the floor our torch engine's generation should be near.

    python bench/gpu.py --json results.json           # ~6 minutes on an H100/H200 (the default rows)
    python bench/gpu.py --only torch,torch+compile --steps 12 --warmup 4
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # trainer_core
sys.path.insert(0, str(ROOT / "bench"))

from backends import failure, mfu, peak_tflops, sized_llama  # noqa: E402  (the backends bench's model and MFU)

from rlplane.processes import signal_on_parent_death  # noqa: E402
from worker.launcher import stop_tree  # noqa: E402  (the worker's: no run outlives the bench)

TRL_SIDE = ROOT / "bench" / "trainersbench" / "trl_side.py"
BACKENDS = {
    "torch": {"kind": "torch", "precision": "bf16"},
    "fsdp2": {"kind": "fsdp2", "precision": "bf16"},
    "zero2": {"kind": "deepspeed", "zero_stage": 2, "precision": "bf16"},
    "zero3": {"kind": "deepspeed", "zero_stage": 3, "precision": "bf16"},
    # ZeRO-3's one-GPU configuration: every parameter persistent (never released and gathered again), so the stage's
    # hooks have nothing to fetch; on one GPU there is nothing to partition anyway
    "zero3-persistent": {
        "kind": "deepspeed", "zero_stage": 3, "precision": "bf16",
        "ds_config": {"zero_optimization": {"stage3_param_persistence_threshold": 10**12}},
    },
    "megatron": {"kind": "megatron", "tensor_parallel": 1, "precision": "bf16"},
}  # fmt: skip
BOTH = {"compile": True, "kernels": "liger"}
# SFT rows, in the order they run (the MFU target's first, so a cut-short bench still has them): a backend, and the
# model section's speed switches (model.compile, model.kernels). TRL's rows run where "trl" stands.
SFT_RUNS = {
    "torch": ("torch", {}),
    "torch+compile+liger": ("torch", BOTH),
    "fsdp2+compile+liger": ("fsdp2", BOTH),
    "trl": None,
    "trl+compile+liger": None,
    "torch+compile": ("torch", {"compile": True}),
    "torch+liger": ("torch", {"kernels": "liger"}),
    "fsdp2": ("fsdp2", {}),
    "zero2": ("zero2", {}),
    "zero3": ("zero3", {}),
    "zero3-persistent": ("zero3-persistent", {}),
    "megatron": ("megatron", {}),
}
TRL_SWITCHES = {"trl": {}, "trl+compile+liger": {"compile": True, "liger": True}}  # TRL's own: torch_compile, use_liger_kernel
# GRPO rows: a backend, the generation settings that pick its engine (grpo.gen), and grpo's own options: asynchronous
# GRPO's rows sample the next step's groups while the trainer trains (bound 1), from a thread on a copy of the policy
# or from a process of its own on the same GPU, against grpo-hf's synchronous step at equal steps.
GRPO_RUNS = {
    "grpo-hf": ("torch", {}, {}),
    "grpo-hf-static": ("torch", {"static_cache": True}, {}),
    "grpo-megatron": ("megatron", {}, {}),
    "grpo-async-hf": ("torch", {}, {"max_staleness": 1}),
    "grpo-async-process": ("torch", {}, {"max_staleness": 1, "generator": "process"}),
}
NAMES = [*SFT_RUNS, *GRPO_RUNS, "generate"]
DEFAULT_RUNS = ("torch", "torch+compile+liger", "fsdp2+compile+liger", "trl", "trl+compile+liger", *GRPO_RUNS, "generate")
RUN_TIMEOUT_S = 150
DRY_RUN = {  # --allow-cpu
    "hidden": 64, "layers": 2, "seq_len": 64, "batch": 4, "micro_batch": 2, "steps": 3, "warmup": 1,
    "grpo_steps": 2, "gen_tokens": 8, "prompts": 2,
}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=2048, help="the Llama's hidden size (default 2048)")
    p.add_argument("--layers", type=int, default=12, help="the Llama's layers (default 12: about 0.6B parameters)")
    p.add_argument("--seq-len", type=int, default=1024, help="SFT sequence length (default 1024)")
    p.add_argument("--batch", type=int, default=16, help="SFT rows per optimizer step (default 16)")
    p.add_argument("--micro-batch", type=int, default=8, help="SFT rows per forward/backward (default 8)")
    p.add_argument("--steps", type=int, default=20, help="SFT optimizer steps per run (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="first SFT steps left out of the timing (default 5)")
    p.add_argument("--grpo-steps", type=int, default=4, help="GRPO steps per run (default 4)")
    p.add_argument("--gen-tokens", type=int, default=256, help="GRPO new tokens per response (default 256)")
    p.add_argument("--prompts", type=int, default=16, help="GRPO prompts per step; x group 8 responses (default 16)")
    p.add_argument(
        "--only",
        default=",".join(DEFAULT_RUNS),
        help=f"comma-separated runs, from: {','.join(NAMES)} (default: {','.join(DEFAULT_RUNS)})",
    )
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    p.add_argument("--keep", type=Path, help="keep the model, data and run directories here (default: a temp dir)")
    p.add_argument("--allow-cpu", action="store_true", help="dry run without a GPU (tiny sizes; no MFU): the plumbing only")
    args = p.parse_args(argv)
    if args.allow_cpu:  # a dry run's sizes, for each one not given: the plumbing in a minute or two on a CPU
        given = {a.split("=")[0] for a in (sys.argv[1:] if argv is None else argv) if a.startswith("--")}
        for name, value in DRY_RUN.items():
            if f"--{name.replace('_', '-')}" not in given:
                setattr(args, name, value)
    args.only = [x.strip() for x in args.only.split(",") if x.strip()]
    bad = set(args.only) - set(NAMES)
    if bad:
        p.error(f"--only: unknown name(s) {sorted(bad)}; choose from {','.join(NAMES)}")
    if args.batch % args.micro_batch or not 1 <= args.warmup < args.steps:
        p.error("--batch must be a multiple of --micro-batch, and 1 <= --warmup < --steps")
    return args


def prepare(work: Path, args: argparse.Namespace) -> dict[str, Path]:
    """Save the sized Llama and its tokenizer, and write the synthetic SFT rows; returns their paths."""
    from trainer_core.models import build_builtin

    tiny, tokenizer = build_builtin("tiny-llama", "causal", seed=0)
    model = sized_llama(tiny.config, args.hidden, args.layers)
    model.config.use_cache = False
    args.parameters = sum(p.numel() for p in model.parameters())
    paths = {"model": work / "llama", "sft": work / "sft.jsonl"}
    model.save_pretrained(paths["model"])
    tokenizer.save_pretrained(paths["model"])
    rng = random.Random(0)

    def text(tokens: int) -> str:
        words: list[str] = []
        while len(tokenizer(" ".join(words))["input_ids"]) < tokens:
            words.extend(str(rng.randrange(10**6)) for _ in range(2))
        return " ".join(words)

    budget = args.seq_len - 48  # room for BOS/EOS, a chat template's markers and BPE merges across the seam
    rows = []
    for _ in range(32):  # 32 distinct rows, cycled: tokenizing is the slow part of preparing
        prompt = text(budget // 3)
        completion = text(budget - len(tokenizer(prompt)["input_ids"]))
        longest = len(tokenizer(prompt + " " + completion)["input_ids"])
        assert longest <= args.seq_len - 8, f"a synthetic row of {longest} tokens does not fit --seq-len"
        rows.append({"prompt": prompt, "completion": " " + completion})
    rows = [rows[i % len(rows)] for i in range(args.batch * args.steps)]
    paths["sft"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


class GpuMemory(threading.Thread):
    """The GPU's memory in use (MiB, nvidia-smi) every 0.2 s; `peak` is the largest reading."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "--id=0"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                ).stdout
                self.peak = max(self.peak, float(out.strip().splitlines()[0]))
            except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
                pass


def launch(cmd: list[str], env: dict[str, str], log: Path, done: Callable[[], bool] | None = None) -> tuple[int, float, float]:
    """Run `cmd` with its output in `log`; its exit code, the GPU's peak memory (MiB) and the wall time (s). With
    `done`, the run is stopped (exit code 0) once `done()` says what is measured is in: our trainer's export and
    final checkpoint (7 GB at 0.62B) are not what the bench measures, and they cost a lent GPU's minutes."""
    memory = GpuMemory()
    memory.start()
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=signal_on_parent_death(signal.SIGTERM),
        )  # fmt: skip
        try:
            code = None
            while code is None and time.perf_counter() - started < RUN_TIMEOUT_S:
                try:
                    code = proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    if done is not None and done():
                        wall = time.perf_counter() - started
                        stop_tree(proc.pid, grace_s=1.0, reap=proc.poll)
                        proc.wait()
                        out.write(f"\nbench/gpu.py: stopped after its last measured step, {wall:.0f} s\n")
                        memory.done.set()
                        return 0, memory.peak, wall
            if code is None:  # a hung run costs one row, not the rest of the bench
                stop_tree(proc.pid, reap=proc.poll)
                proc.wait()
                out.write(f"\nbench/gpu.py: RunTimeoutError: stopped after {RUN_TIMEOUT_S} s\n")
                code = -signal.SIGKILL
        except BaseException:  # stopped itself (Ctrl-C, or SIGTERM from a caller's timeout): its runs stop with it
            stop_tree(proc.pid, reap=proc.poll)
            raise
        finally:
            memory.done.set()
    memory.join()
    return code, memory.peak, time.perf_counter() - started


def environment() -> dict[str, str]:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "4",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }


def cpu_switches(switches: dict, args: argparse.Namespace) -> dict:
    """A dry run's model switches: Liger's kernels are Triton on CUDA, so --allow-cpu leaves them out."""
    return {k: v for k, v in switches.items() if k != "kernels"} if args.allow_cpu else switches


def train_spec(name: str, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    backend, switches = SFT_RUNS[name]
    return {
        "name": f"gpu-bench-{name.replace('+', '-')}-sft",
        "algorithm": "sft",
        "model": {"path": str(paths["model"]), "max_seq_len": args.seq_len, "dtype": "fp32", **cpu_switches(switches, args)},
        "data": {"source": str(paths["sft"]), "eval_fraction": 0.0, "shuffle": False},
        "backend": BACKENDS[backend] if not args.allow_cpu else {**BACKENDS[backend], "precision": "fp32"},
        "resources": {"queue": "gpu", "gpus": 0 if args.allow_cpu else 1},
        "train": {
            "steps": args.steps,
            "batch_size": args.batch,
            "micro_batch_size": args.micro_batch,
            "lr": 1e-4,
            "warmup_steps": 0,
            "schedule": "constant",
            "weight_decay": 0.0,
            "max_grad_norm": 1.0,
            "log_every": 1,
            "eval_every": None,
            "checkpoint_every": None,
        },
    }


def grpo_spec(name: str, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    backend, gen, options = GRPO_RUNS[name]
    return {
        "name": f"gpu-bench-{name}",
        "algorithm": "grpo",
        "model": {"path": str(paths["model"]), "max_seq_len": 64 + args.gen_tokens, "dtype": "fp32"},
        "reward": {"kind": "builtin", "name": "arithmetic"},
        # The prompts the steps use, and no more: with none held out, the first and last evaluations answer them all.
        # All of builtin:arithmetic's thousands took 45 of a CPU dry run's 70 s, and are the likely reason the GRPO
        # runs on an H200 did not end within their time limit.
        "data": {"source": "builtin:arithmetic", "eval_fraction": 0.0, "max_samples": args.prompts * args.grpo_steps},
        "backend": BACKENDS[backend] if not args.allow_cpu else {**BACKENDS[backend], "precision": "fp32"},
        "resources": {"queue": "gpu", "gpus": 0 if args.allow_cpu else 1},
        "train": {
            "steps": args.grpo_steps,
            "batch_size": args.prompts * 8,
            "lr": 1e-6,
            "log_every": 1,
            "eval_every": None,
            "checkpoint_every": None,
        },
        "grpo": {
            "group_size": 8,
            "gen": {"max_new_tokens": args.gen_tokens, "temperature": 1.0, **gen},
            "samples_to_log": 0,
            **options,
        },
    }


def metrics_by_step(path: Path) -> dict[int, dict[str, float]]:
    by_step: dict[int, dict[str, float]] = {}
    if not path.exists():
        return by_step
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:  # a line being written
            continue
        by_step.setdefault(rec["step"], {})[rec["key"]] = rec["value"]
        by_step[rec["step"]].setdefault("time", rec["time"])  # the step's first row: end of its training
    return by_step


def run_ours(spec: dict, work: Path, measured: tuple[str, ...]) -> tuple[dict, dict[int, dict[str, float]]]:
    """One trainer run under torchrun on one GPU, stopped once its last step has reported `measured`: wall, peak
    memory, and its metrics by step (or an error)."""
    from rlplane.ports import free_port

    name = f"{spec['name']}-{time.time_ns()}"
    spec_path = work / f"{name}.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", str(free_port())]
    cmd += ["-m", "trainer_core", "run", str(spec_path), "--out", str(work / name)]
    last, metrics = spec["train"]["steps"], work / name / "metrics.jsonl"

    def done() -> bool:
        return all(key in metrics_by_step(metrics).get(last, {}) for key in measured)

    code, peak, wall = launch(cmd, environment(), work / f"{name}.log", done)
    if code != 0:
        return {"error": f"failed ({code}): {failure(work / f'{name}.log')}", "log": str(work / f"{name}.log")}, {}
    by_step = metrics_by_step(metrics)
    for step in by_step:  # a step's seconds: from the previous step's first row to its own
        if step - 1 in by_step:
            by_step[step]["step_time_s"] = by_step[step]["time"] - by_step[step - 1]["time"]
    return {"wall_s": wall, "peak_gpu_mib": peak}, by_step


def median_after(by_step: dict[int, dict[str, float]], key: str, skip: int) -> float | None:
    values = [by_step[s][key] for s in sorted(by_step) if s > skip and key in by_step[s]]
    return statistics.median(values) if values else None


def bench_sft(name: str, work: Path, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    out, by_step = run_ours(train_spec(name, paths, args), work, ("perf/tokens_per_s", "perf/step_s", "train/loss"))
    if "error" in out:
        return out
    out["tokens_per_s"] = median_after(by_step, "perf/tokens_per_s", args.warmup)
    out["step_s"] = median_after(by_step, "perf/step_s", args.warmup)
    losses = [by_step[s]["train/loss"] for s in sorted(by_step) if "train/loss" in by_step[s]]
    out["loss_first_last"] = [losses[0], losses[-1]] if losses else None
    out["mfu"] = mfu("sft", args.parameters, out["tokens_per_s"], args.peak) if out["tokens_per_s"] else None
    return out


def bench_trl(name: str, work: Path, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    result = work / f"{name}.json"
    config = {
        **({} if args.allow_cpu else TRL_SWITCHES[name]),
        "recipe": "sft",
        "model": str(paths["model"]),
        "data": str(paths["sft"]),
        "out": str(work / name),
        "steps": args.steps,
        "batch": args.micro_batch,
        "accumulation": args.batch // args.micro_batch,
        "seq_len": args.seq_len,
        "lr": 1e-4,
        "beta": 0.1,
        "threads": 4,
        "gpu": not args.allow_cpu,
        "result": str(result),
    }
    (work / f"{name}-config.json").write_text(json.dumps(config))
    log = work / f"{name}.log"
    code, peak, wall = launch([sys.executable, str(TRL_SIDE), str(work / f"{name}-config.json")], environment(), log)
    if code != 0:
        return {"error": f"failed ({code}): {failure(log)}", "log": str(log)}
    r = json.loads(result.read_text())
    per_step = [sum(r["tokens"][i * config["accumulation"] : (i + 1) * config["accumulation"]]) for i in range(len(r["step_s"]))]
    rates = [t / s for t, s in zip(per_step[args.warmup :], r["step_s"][args.warmup :], strict=True)]
    tokens_per_s = statistics.median(rates) if rates else None
    return {
        "wall_s": wall,
        "peak_gpu_mib": peak,
        "tokens_per_s": tokens_per_s,
        "step_s": statistics.median(r["step_s"][args.warmup :]),
        "loss_first_last": [r["losses"][0], r["losses"][-1]] if r["losses"] else None,
        "mfu": mfu("sft", args.parameters, tokens_per_s, args.peak) if tokens_per_s else None,
        "versions": r["versions"],
    }


def bench_grpo(name: str, work: Path, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    out, by_step = run_ours(grpo_spec(name, paths, args), work, ("perf/gen_s", "perf/train_s"))
    if "error" in out:
        return out
    for key in ("perf/gen_s", "perf/train_s"):
        out[key.split("/")[1]] = median_after(by_step, key, 1)
    out["step_s"] = median_after(by_step, "step_time_s", 1)
    # where an asynchronous step's time goes (the 2026-11-30 GPU row of a generator process was 2.4x the synchronous
    # step, and its run's log stayed on the GPU machine): each side's idle fraction and the weights' seconds
    for key in ("perf/weight_sync_s", "async/generator_idle", "async/trainer_idle"):
        if any(key in by_step[s] for s in by_step):
            out[key.split("/")[1]] = median_after(by_step, key, 1)
    return out


def bench_generate(paths: dict[str, Path], args: argparse.Namespace) -> dict:
    """Plain `model.generate` in bf16 on the GPU: the same prompts x group, length and sampling as the GRPO runs."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer_core.data import load_examples

    device = "cpu" if args.allow_cpu else "cuda"
    dtype = torch.float32 if args.allow_cpu else torch.bfloat16
    tokenizer = AutoTokenizer.from_pretrained(paths["model"])
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(paths["model"], dtype=dtype).to(device).eval()
    model.config.use_cache = True
    prompts = [row["prompt"] for row in load_examples({"source": "builtin:arithmetic"}, "prompts", seed=0).train]
    batch = tokenizer([p for p in prompts[: args.prompts] for _ in range(8)], return_tensors="pt", padding=True).to(device)
    times = []
    for _ in range(3):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        with torch.no_grad():
            model.generate(**batch, max_new_tokens=args.gen_tokens, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return {"gen_s": statistics.median(times[1:]), "runs_s": times}


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(results: dict, args: argparse.Namespace) -> str:
    lines = [
        f"SFT: Llama {args.hidden} x {args.layers} ({args.parameters / 1e9:.2f}B parameters), bf16, seq {args.seq_len}, "
        f"batch {args.batch} (micro {args.micro_batch}), {args.steps} steps, median after step {args.warmup}",
        f"{'run':<22}{'tokens/s':>10}{'step s':>9}{'MFU':>8}{'peak GiB':>10}{'wall s':>8}  loss first -> last",
    ]
    for name, r in results["sft"].items():
        if "error" in r:
            lines.append(f"{name:<22}{r['error']}")
            continue
        loss = r.get("loss_first_last")
        lines.append(
            f"{name:<22}{fmt(r['tokens_per_s'], ',.0f'):>10}{fmt(r['step_s'], '.3f'):>9}"
            f"{fmt(r['mfu'] and 100 * r['mfu'], '.1f') + ('%' if r['mfu'] else ''):>8}{fmt(r['peak_gpu_mib'] / 1024, '.1f'):>10}"
            f"{fmt(r['wall_s'], '.0f'):>8}  {fmt(loss and loss[0], '.3f')} -> {fmt(loss and loss[-1], '.3f')}"
        )
    if results["grpo"] or results["generate"]:
        lines += [
            "",
            f"GRPO: {args.prompts} prompts x 8, {args.gen_tokens} new tokens, median after step 1",
            f"{'run':<20}{'gen s':>8}{'train s':>9}{'step s':>8}{'peak GiB':>10}{'sync s':>8}  idle: generator, trainer",
        ]
        for name, r in results["grpo"].items():
            if "error" in r:
                lines.append(f"{name:<20}{r['error']}")
                continue
            lines.append(
                f"{name:<20}{fmt(r['gen_s'], '.2f'):>8}{fmt(r['train_s'], '.2f'):>9}{fmt(r['step_s'], '.2f'):>8}"
                f"{fmt(r['peak_gpu_mib'] / 1024, '.1f'):>10}{fmt(r.get('weight_sync_s'), '.2f'):>8}"
                + (f"  {fmt(r['generator_idle'], '.2f')}, {fmt(r['trainer_idle'], '.2f')}" if "trainer_idle" in r else "")
            )
        if results["generate"]:
            g = results["generate"]
            shown = f"{g['error']}" if "error" in g else f"{fmt(g.get('gen_s'), '.2f'):>8}"
            lines.append(f"{'HF generate':<20}{shown}")
    return "\n".join(lines)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A caller's timeout sends SIGTERM: leave as Ctrl-C does, through launch's cleanup, not with the runs orphaned
    # (they are in sessions of their own, and on CPU a dry run's orphans trained on for an hour)
    signal.signal(signal.SIGTERM, _interrupted)
    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print("bench/gpu.py needs a CUDA GPU (or --allow-cpu for a dry run of the plumbing)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rlplane-gpu-bench-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        paths = prepare(work, args)
        results: dict = {"sft": {}, "grpo": {}, "generate": {}}
        results["device"] = "cpu" if args.allow_cpu else torch.cuda.get_device_name(0)
        results["parameters"] = args.parameters
        args.peak = None if args.allow_cpu else peak_tflops()

        def record(part: str, name: str | None, row: dict) -> None:
            """Keep a row, print it, and rewrite --json: a bench cut short by its caller keeps every finished row."""
            if name is None:
                results[part] = row
            else:
                results[part][name] = row
            print(part, name or "", json.dumps(row), flush=True)
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(results, indent=2))

        for name in args.only:  # in the order asked for
            if name in TRL_SWITCHES:
                record("sft", name, bench_trl(name, work, paths, args))
            elif name in SFT_RUNS:
                record("sft", name, bench_sft(name, work, paths, args))
            elif name in GRPO_RUNS:
                record("grpo", name, bench_grpo(name, work, paths, args))
        if "generate" in args.only:
            try:
                record("generate", None, bench_generate(paths, args))
            except Exception as exc:  # a bench row, not a crash: the other rows stand
                record("generate", None, {"error": f"{type(exc).__name__}: {exc}"[:300]})
        report = table(results, args)
        print(f"\n{results['device']}\n{report}")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({**results, "table": report}, indent=2))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C or a caller's SIGTERM: the runs were stopped on the way out
        print("bench/gpu.py: stopped; its runs were stopped with it", file=sys.stderr)
        sys.exit(130)
