"""Our sft and dpo recipes on every backend (DDP, ZeRO-2, ZeRO-3, ZeRO-3 + CPU offload, FSDP2), 2 CPU processes each,
and our dpo on ZeRO-3 against TRL's DPOTrainer on ZeRO-3.

A benchmark, not a test. Every run is the same job: the tiny Llama (built once with
`build_builtin("tiny-llama")`, saved to a temporary directory and loaded from there by every run),
the builtin:arithmetic training rows of `load_examples(..., seed=0)` written once as JSONL (sft:
prompt/completion, dpo: prompt/chosen/rejected) and read in order (shuffling off, no eval rows),
batch --batch examples (pairs for dpo) per step over --processes ranks in micro-batches of
--micro-batch (so batch 16 on 2 ranks of 4 is 2 accumulation steps), max length --seq-len,
constant lr without warmup or weight decay, grad-norm clip 1.0, fp32, no gradient checkpointing,
no eval, no checkpoint but the final one, metrics every step, one torch thread per rank
(OMP_NUM_THREADS=1) and TORCH_EXTENSIONS_DIR=<repo>/.cache/torch_extensions. A backend that is
not there yet (fsdp2 while its module is missing) gets "not available" in its row.

rlplane runs as `python -m torch.distributed.run --nproc_per_node N --master_port P -m
trainer_core run SPEC.json --out DIR` with this interpreter. TRL runs as
`bench/backendsbench/trl_dpo.py` under torchrun with the interpreter of a separate venv
(--trl-python), with DeepSpeed given as `DPOConfig(deepspeed=dict)` (ZeRO-3, the Trainer's torch
AdamW as DeepSpeed's client optimizer, the explicit reference model in a second ZeRO-3 engine)
and TORCH_EXTENSIONS_DIR=<repo>/.cache/torch_extensions-trl, so the two venvs' JIT-built
DeepSpeed ops do not rebuild over each other:

    python3 -m venv bench/.venv-trl
    bench/.venv-trl/bin/pip install trl==1.16.0 torch==2.13.0 transformers==5.23.0 datasets deepspeed==0.19.8
    .venv/bin/python bench/backends.py                          # about 10 minutes on 2 cores
    .venv/bin/python bench/backends.py --only zero3,dpo --steps 100 --json bench/results/backends.json

Steps/s is measured end of step to end of step after --warmup steps (rlplane: the "time" of
consecutive metrics rows, log_every 1; TRL: a callback's on_step_end). Peak RSS per process is
each rank's VmHWM (the kernel's high-water mark of resident memory) from /proc/PID/status, read
every 0.2 s by a poller thread for every direct child of the torchrun process (the ranks) until
it exits; the last reading before a rank exits is its peak, short of growth in its last 0.2 s.
Final loss is the mean of the last 10 steps' train/loss. Tokens/s per process is the median of the
timed steps' perf/tokens_per_s (every rank's tokens) over the processes.

On GPUs (`--gpu`: one rank per GPU, nccl, bf16, a Llama of --hidden x --layers built from a config
with random weights instead of the tiny one) the table adds MFU: model FLOPs per token (6 N for a
trained token; DPO adds 2 N for the reference model's forward; N = every parameter, attention's
sequence-length term left out, as in the usual 6N estimate) x tokens/s per GPU / the GPU's dense
bf16 peak (H100/H200 989, A100 312 TFLOP/s; others: no MFU). TRL is not run with --gpu.

    .venv/bin/python bench/backends.py --gpu --skip-trl --processes 1 --batch 32 --micro-batch 8 --seq-len 512
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # trainer_core
sys.path.insert(0, str(ROOT / "bench"))

from trainers import env_for, machine  # noqa: E402  (the trainers bench's environment and machine facts)

TRL_SIDE = ROOT / "bench" / "backendsbench" / "trl_dpo.py"
BACKENDS = {
    "torch": {"kind": "torch", "precision": "fp32"},
    "zero2": {"kind": "deepspeed", "zero_stage": 2, "precision": "fp32"},
    "zero3": {"kind": "deepspeed", "zero_stage": 3, "precision": "fp32"},
    "zero3-offload": {"kind": "deepspeed", "zero_stage": 3, "offload": "cpu", "precision": "fp32"},
    "fsdp2": {"kind": "fsdp2", "precision": "fp32"},
}
ALGORITHMS = ("sft", "dpo")
KIND = {"sft": "sft", "dpo": "preference"}
COLUMNS = {"sft": ("prompt", "completion"), "preference": ("prompt", "chosen", "rejected")}
MISSING = ("fsdp2_backend", "No module named", "not implemented yet")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40, help="optimizer steps per run (default 40)")
    p.add_argument("--warmup", type=int, default=5, help="first steps left out of the timing, at least 1 (default 5)")
    p.add_argument("--processes", type=int, default=2, help="ranks per run (default 2)")
    p.add_argument("--batch", type=int, default=16, help="examples (pairs for dpo) per step, all ranks (default 16)")
    p.add_argument("--micro-batch", type=int, default=4, help="examples per rank per forward (default 4)")
    p.add_argument("--seq-len", type=int, default=64, help="max sequence length in tokens (default 64)")
    p.add_argument("--lr", type=float, default=5e-4, help="constant learning rate (default 5e-4; dpo uses lr/10)")
    p.add_argument("--beta", type=float, default=0.1, help="dpo beta (default 0.1)")
    p.add_argument("--repeat", type=int, default=1, help="runs per row, the median run is shown (default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument(
        "--only",
        default="",
        help=f"comma-separated backends ({','.join(BACKENDS)}) and/or algorithms ({','.join(ALGORITHMS)}); default all",
    )
    p.add_argument("--trl-python", default=str(ROOT / "bench" / ".venv-trl" / "bin" / "python"), help="interpreter with trl")
    p.add_argument("--skip-trl", action="store_true", help="rlplane only")
    p.add_argument("--gpu", action="store_true", help="one rank per GPU, bf16, a --hidden x --layers Llama; adds MFU")
    p.add_argument("--hidden", type=int, default=1024, help="with --gpu: the Llama's hidden size (default 1024)")
    p.add_argument("--layers", type=int, default=12, help="with --gpu: the Llama's layers (default 12)")
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    p.add_argument("--keep", type=Path, help="keep the model, data and run directories here (default: a temp dir)")
    args = p.parse_args(argv)
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    bad = [x for x in only if x not in BACKENDS and x not in ALGORITHMS]
    if bad:
        p.error(f"--only: unknown name(s) {bad}; choose from {','.join([*BACKENDS, *ALGORITHMS])}")
    args.backends = [b for b in BACKENDS if b in only] or list(BACKENDS)
    args.algorithms = [a for a in ALGORITHMS if a in only] or list(ALGORITHMS)
    if not 1 <= args.warmup < args.steps:
        p.error("--warmup must be at least 1 and smaller than --steps")
    if args.batch % (args.processes * args.micro_batch):
        p.error("--batch must be a multiple of --processes x --micro-batch")
    return args


def prepare(work: Path, args: argparse.Namespace) -> dict[str, Path]:
    """Save the tiny Llama (seed 0) and the arithmetic training rows; returns their paths."""
    from trainer_core.data import load_examples
    from trainer_core.models import build_builtin

    model, tokenizer = build_builtin("tiny-llama", "causal", seed=0)
    if args.gpu:
        model = sized_llama(model.config, args.hidden, args.layers)
    model.config.use_cache = False
    args.parameters = sum(p.numel() for p in model.parameters())
    paths = {"model": work / "llama"}
    model.save_pretrained(paths["model"])
    tokenizer.save_pretrained(paths["model"])
    for kind, columns in COLUMNS.items():
        rows = load_examples({"source": "builtin:arithmetic"}, kind, seed=0).train
        rows = rows[: len(rows) // args.batch * args.batch]  # whole batches only: TRL would end an epoch on a short one
        paths[kind] = work / f"arithmetic-{kind}.jsonl"
        paths[kind].write_text("".join(json.dumps({c: row[c] for c in columns}) + "\n" for row in rows))
    return paths


def sized_llama(tiny_config, hidden: int, layers: int):
    """A Llama of `hidden` x `layers` with the tiny one's tokenizer and vocabulary, random weights (seed 0)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=tiny_config.vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64,
        max_position_embeddings=4096,
        bos_token_id=tiny_config.bos_token_id,
        eos_token_id=tiny_config.eos_token_id,
        pad_token_id=tiny_config.pad_token_id,
    )
    return LlamaForCausalLM(config)


PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense, per GPU (vendor data sheets)


def peak_tflops() -> float | None:
    import torch

    name = torch.cuda.get_device_name(0)
    return next((peak for model, peak in PEAK_BF16_TFLOPS.items() if model in name), None)


def mfu(algorithm: str, parameters: int, tokens_per_s_per_gpu: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation: 6N per trained token (+2N for DPO's reference forward) over the bf16 peak."""
    if peak is None:
        return None
    flops_per_token = (8 if algorithm == "dpo" else 6) * parameters
    return flops_per_token * tokens_per_s_per_gpu / (peak * 1e12)


def bench_env(args: argparse.Namespace, extensions: str) -> dict[str, str]:
    return {**env_for(args), "TORCH_EXTENSIONS_DIR": str(ROOT / ".cache" / extensions)}


def lr_for(algorithm: str, args: argparse.Namespace) -> float:
    return args.lr / 10 if algorithm == "dpo" else args.lr


# --- peak memory of the ranks ---


class PeakRss(threading.Thread):
    """Polls VmHWM of every direct child of `root` (torchrun's ranks) until stopped; peaks in MB by pid."""

    def __init__(self, root: int, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.root, self.every = root, every
        self.peaks: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every):
            for pid in children(self.root):
                hwm = vm_hwm_mb(pid)
                if hwm is not None:
                    self.peaks[pid] = max(hwm, self.peaks.get(pid, 0.0))


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:  # exited, or a kernel without CONFIG_PROC_CHILDREN: scan for the parent
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
        return found


def vm_hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return None


def launch(cmd: list[str], env: dict[str, str], cwd: Path, log: Path) -> tuple[int, dict[int, float], float]:
    """Run `cmd` (a torchrun) with its output in `log`; its exit code, the ranks' peak RSS and the wall time."""
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        poller = PeakRss(proc.pid)
        poller.start()
        code = proc.wait()
    poller.done.set()
    poller.join()
    return code, poller.peaks, time.perf_counter() - started


def torchrun(python: str, args: argparse.Namespace) -> list[str]:
    from rlplane.ports import free_port

    return [python, "-m", "torch.distributed.run", "--nproc_per_node", str(args.processes), "--master_port", str(free_port())]


def failure(log: Path) -> str:
    """The last line of the log that names an error, else its last line."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln and not ln.startswith(("torch.distributed.elastic", "raise"))]
    return (errors or lines or ["no output"])[-1][:300]


# --- rlplane ---


def rlplane_spec(backend: str, algorithm: str, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    spec = {
        "name": f"bench-{backend}-{algorithm}",
        "algorithm": algorithm,
        "model": {"path": str(paths["model"]), "max_seq_len": args.seq_len, "dtype": "fp32"},
        "data": {"source": str(paths[KIND[algorithm]]), "eval_fraction": 0.0, "shuffle": False},
        "backend": {**BACKENDS[backend], **({"precision": "bf16"} if args.gpu else {"processes": args.processes})},
        "resources": {"queue": "gpu", "gpus": args.processes} if args.gpu else {"queue": "cpu", "gpus": 0},
        "train": {
            "steps": args.steps,
            "batch_size": args.batch,
            "micro_batch_size": args.micro_batch,
            "lr": lr_for(algorithm, args),
            "warmup_steps": 0,
            "schedule": "constant",
            "weight_decay": 0.0,
            "max_grad_norm": 1.0,
            "log_every": 1,
            "eval_every": None,
            "checkpoint_every": None,
        },
    }
    if algorithm == "dpo":
        spec["dpo"] = {"beta": args.beta, "loss": "sigmoid", "label_smoothing": 0.0, "ref_model": None}
    return spec


def run_rlplane(backend: str, algorithm: str, work: Path, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    name = f"rlplane-{backend}-{algorithm}-{time.time_ns()}"
    spec_path = work / f"{name}.json"
    spec_path.write_text(json.dumps(rlplane_spec(backend, algorithm, paths, args)))
    cmd = [*torchrun(sys.executable, args), "-m", "trainer_core", "run", str(spec_path), "--out", str(work / name)]
    code, peaks, wall = launch(cmd, bench_env(args, "torch_extensions"), ROOT, work / f"{name}.log")
    if code != 0:
        why = failure(work / f"{name}.log")
        missing = backend == "fsdp2" and any(m in why for m in MISSING)
        return {"error": "not available" if missing else f"failed ({code}): {why}", "log": str(work / f"{name}.log")}
    by_step: dict[int, dict[str, float]] = {}
    times: dict[int, float] = {}
    for line in (work / name / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        by_step.setdefault(rec["step"], {})[rec["key"]] = rec["value"]
        times.setdefault(rec["step"], rec["time"])  # the first row of a step: its training metrics
    steps = sorted(s for s in by_step if "train/loss" in by_step[s])
    step_s = [times[s] - times[s - 1] for s in steps if s - 1 in times]  # step 1 has no row before it
    out = summarize(step_s, [by_step[s]["train/loss"] for s in steps], peaks, args.warmup - 1, wall)
    tokens = sorted(by_step[s]["perf/tokens_per_s"] for s in steps[args.warmup :] if "perf/tokens_per_s" in by_step[s])
    out["tokens_per_s_per_process"] = tokens[len(tokens) // 2] / args.processes if tokens else None
    if args.gpu and tokens:
        out["mfu"] = mfu(algorithm, args.parameters, out["tokens_per_s_per_process"], peak_tflops())
    return out


# --- TRL ---


def run_trl(work: Path, paths: dict[str, Path], args: argparse.Namespace) -> dict:
    name = f"trl-zero3-dpo-{time.time_ns()}"
    config = {
        "model": str(paths["model"]),
        "data": str(paths["preference"]),
        "out": str(work / name),
        "steps": args.steps,
        "micro_batch": args.micro_batch,
        "accumulation": args.batch // (args.processes * args.micro_batch),
        "seq_len": args.seq_len,
        "lr": lr_for("dpo", args),
        "beta": args.beta,
        "zero_stage": 3,
        "threads": args.threads,
        "result": str(work / f"{name}-result.json"),
    }
    config_path = work / f"{name}-config.json"
    config_path.write_text(json.dumps(config))
    cmd = [*torchrun(args.trl_python, args), str(TRL_SIDE), str(config_path)]
    code, peaks, wall = launch(cmd, bench_env(args, "torch_extensions-trl"), work, work / f"{name}.log")
    if code != 0:
        return {"error": f"failed ({code}): {failure(work / f'{name}.log')}", "log": str(work / f"{name}.log")}
    res = json.loads(Path(config["result"]).read_text())
    out = summarize(res["step_s"], res["losses"], peaks, args.warmup, wall)
    for key in ("versions", "engine", "zero_stage", "optimizer", "world_size", "accelerate_processes", "accelerate_type"):
        out[key] = res[key]
    for key in ("gradient_checkpointing", "bf16"):
        out[key] = res[key]
    return out


# --- numbers and the table ---


def summarize(step_s: list[float], losses: list[float], peaks: dict[int, float], skip: int, wall: float) -> dict:
    timed = step_s[skip:]
    tail = losses[-10:]
    return {
        "steps": len(losses),
        "timed_steps": len(timed),
        "steps_per_s": len(timed) / sum(timed),
        "peak_rss_mb": sorted(peaks.values(), reverse=True),
        "final_loss": sum(tail) / len(tail),
        "process_wall_s": wall,
        "losses": losses,
    }


def median_run(runs: list[dict]) -> dict:
    """The run with the median steps/s, with every run's steps/s beside it; the first failure if any run failed."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    ordered = sorted(runs, key=lambda r: r["steps_per_s"])
    return {**ordered[(len(ordered) - 1) // 2], "all_steps_per_s": [r["steps_per_s"] for r in runs]}


def row(backend: str, algorithm: str, r: dict) -> str:
    if "error" in r:
        return f"| {backend} | {algorithm} | {r['error']} | - | - | - | - |"
    rss = " / ".join(f"{mb:,.0f}" for mb in r["peak_rss_mb"]) or "?"
    tokens = f"{r['tokens_per_s_per_process']:,.0f}" if r.get("tokens_per_s_per_process") else "-"
    use = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "-"
    return f"| {backend} | {algorithm} | {r['steps_per_s']:.2f} | {tokens} | {use} | {rss} | {r['final_loss']:.4f} |"


def table(results: dict[str, dict], trl: dict | None) -> str:
    lines = [
        "| backend | algorithm | steps/s | tokens/s per process | MFU | peak RSS per process (MB) | final loss (mean last 10) |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [row(backend, algorithm, r) for (backend, algorithm), r in results.items()]
    if trl is not None:
        lines.append(row("TRL DPOTrainer, zero3", "dpo", trl))
        ours = results.get(("zero3", "dpo"))
        if ours and "error" not in ours and "error" not in trl:
            diff = max((abs(a - b) for a, b in zip(ours["losses"], trl["losses"], strict=False)), default=float("nan"))
            lines.append(
                f"\nzero3 dpo, rlplane / TRL: {ours['steps_per_s'] / trl['steps_per_s']:.2f}x steps/s, "
                f"loss at step 1 {ours['losses'][0]:.4f} / {trl['losses'][0]:.4f}, max abs loss diff over steps {diff:.1e}"
            )
    return "\n".join(lines)


def measure(work: Path, args: argparse.Namespace) -> tuple[dict, dict | None]:
    paths = prepare(work, args)
    runs: dict[tuple[str, str], list[dict]] = {(b, a): [] for b in args.backends for a in args.algorithms}
    trl_runs: list[dict] = []
    with_trl = not args.skip_trl and "dpo" in args.algorithms
    for i in range(args.repeat):
        for backend, algorithm in runs:
            r = run_rlplane(backend, algorithm, work, paths, args)
            runs[backend, algorithm].append(r)
            print(f"[{i + 1}/{args.repeat}] {backend} {algorithm}: {brief(r)}", flush=True)
        if with_trl:
            trl_runs.append(run_trl(work, paths, args))
            print(f"[{i + 1}/{args.repeat}] TRL zero3 dpo: {brief(trl_runs[-1])}", flush=True)
    return {key: median_run(rs) for key, rs in runs.items()}, (median_run(trl_runs) if trl_runs else None)


def brief(r: dict) -> str:
    if "error" in r:
        return r["error"] + (f" (log: {r['log']})" if "log" in r else "")
    return f"{r['steps_per_s']:.2f} steps/s, peak RSS {max(r['peak_rss_mb'], default=0):,.0f} MB, {r['process_wall_s']:.0f} s"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.gpu:
        args.skip_trl = True  # the TRL side is set up for CPU ranks
    if not args.skip_trl and not Path(args.trl_python).exists():
        print(f"no TRL interpreter at {args.trl_python}: create bench/.venv-trl (see the docstring) or pass --skip-trl")
        return 2
    load_before = os.getloadavg()
    if args.keep:
        work = args.keep.resolve()
        work.mkdir(parents=True, exist_ok=True)
        results, trl = measure(work, args)
    else:
        with tempfile.TemporaryDirectory(prefix="backends-bench-") as tmp:
            results, trl = measure(Path(tmp), args)
    load_after = os.getloadavg()
    info = machine()
    print()
    print(
        f"{info['cpu']}, {info['cores']} cores, {args.processes} ranks x {args.threads} torch thread(s); "
        f"torch {info['torch']}, transformers {info['transformers']}"
        + (f"; TRL side: {trl['versions']}" if trl and "versions" in trl else "")
    )
    print(f"load average (1 min) before / after: {load_before[0]:.2f} / {load_after[0]:.2f}")
    if trl and "engine" in trl:
        print(
            f"TRL as run: torchrun + DPOConfig(deepspeed=dict), {trl['engine']} ZeRO-{trl['zero_stage']} on "
            f"{trl['world_size']} ranks (accelerate: {trl['accelerate_processes']} processes, "
            f"{trl['accelerate_type'].split('.')[-1]}), optimizer {trl['optimizer']}, bf16 {trl['bf16']}, "
            f"gradient checkpointing {trl['gradient_checkpointing']}, explicit ref_model"
        )
    model = f"Llama {args.hidden} x {args.layers} (bf16, GPUs)" if args.gpu else "tiny-llama (fp32)"
    print(
        f"{model}, {args.parameters:,} parameters, builtin:arithmetic, "
        f"batch {args.batch} (micro {args.micro_batch} x {args.processes} ranks), "
        f"max len {args.seq_len}, {args.steps} steps ({args.warmup} warm-up steps not timed), median of {args.repeat} "
        f"run(s),\nlr {args.lr:g} constant (dpo {args.lr / 10:g}, beta {args.beta:g}), no gradient checkpointing; "
        "peak RSS: VmHWM of each rank, largest first\n"
    )
    print(table(results, trl))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "machine": info}
        payload |= {"load_average": [load_before, load_after], "trl": trl}
        payload["results"] = {f"{b}/{a}": r for (b, a), r in results.items()}
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
