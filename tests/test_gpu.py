"""Backends on a CUDA GPU: bf16 and fp16 (with loss scaling) on the torch, DeepSpeed and FSDP2
backends, bf16 on the Megatron backend (tensor parallel 1: one GPU; pipeline parallel 2 and tensor x
pipeline parallel 2 x 2 on 2 and 4 GPUs, skipped on a machine with fewer), NCCL as the process group,
PPO generating under ZeRO-3 on the GPU, exact resume on the GPU, checkpoints that move between the GPU
and the CPU, the hf rollout engine's compiled static-cache decoding, and the model section's speed switches
(compiled blocks, Liger's kernels).

Marked `gpu`: `make test` (and CI, which has no GPU) deselects them; run them where a GPU exists with
`python -m pytest -m gpu tests/test_gpu.py` (the lent device machine, see docs/backends.md). They
fail, rather than skip, on a machine without CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.harness.launch import after, checkpoint, max_diff, trainer_env
from tests.harness.training import metrics

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
SFT = {
    "name": "gpu-sft",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": {"source": "builtin:arithmetic", "eval_fraction": 0.0},
    "train": {"steps": 40, "batch_size": 16, "lr": 3e-3, "log_every": 1, "eval_every": None},
    "resources": {"gpus": 1},
}


@pytest.fixture(autouse=True)
def cuda() -> None:
    assert torch.cuda.is_available(), "tests marked gpu need a CUDA GPU"


def train(tmp_path: Path, spec: dict, name: str, *args: str, cpu: bool = False) -> Path:
    """Train SPEC into tmp_path/NAME (ARGS: more trainer arguments, e.g. --resume); on the CPU where `cpu` (the
    trainer takes the GPU whenever CUDA is visible)."""
    out, path = tmp_path / name, tmp_path / f"{name}.json"
    path.write_text(json.dumps(spec))
    env = {**trainer_env(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "4")}
    if cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    command = [sys.executable, "-m", "trainer_core", "run", str(path), "--out", str(out), *args]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return out


@pytest.mark.parametrize(
    "backend",
    [
        {"kind": "torch", "precision": "bf16"},
        {"kind": "torch", "precision": "fp16"},
        {"kind": "deepspeed", "zero_stage": 2, "precision": "bf16"},
        {"kind": "deepspeed", "zero_stage": 2, "precision": "fp16"},
        {"kind": "deepspeed", "zero_stage": 3, "precision": "bf16", "offload": "cpu"},
        {"kind": "deepspeed", "zero_stage": 3, "precision": "bf16", "zero_init": True},
        {"kind": "fsdp2", "precision": "bf16"},
        {"kind": "fsdp2", "precision": "fp16"},
        {"kind": "megatron", "precision": "bf16", "tensor_parallel": 1},
    ],
    ids=[
        "torch-bf16",
        "torch-fp16",
        "zero2-bf16",
        "zero2-fp16",
        "zero3-offload-bf16",
        "zero3-init-bf16",
        "fsdp2-bf16",
        "fsdp2-fp16",
        "megatron-tp1-bf16",
    ],
)
def test_sft_learns_in_mixed_precision_on_the_gpu(tmp_path: Path, backend: dict) -> None:
    """40 SFT steps on one GPU: the loss falls by more than 1 nat (fp32 on CPU: about 3). Its throughput per GPU is
    reported, and its MFU on a GPU in the table (a tiny model: far below 1, above 0)."""
    out = train(tmp_path, {**SFT, "backend": backend}, "run")
    loss = metrics(out, "train/loss")
    assert sorted(loss) == list(range(1, 41))
    assert loss[40] < loss[1] - 1.0, loss
    assert min(metrics(out, "perf/tokens_per_s_per_gpu").values()) > 0
    if "H200" in torch.cuda.get_device_name() or "H100" in torch.cuda.get_device_name():
        mfu = metrics(out, "perf/mfu")
        assert sorted(mfu) == list(range(1, 41)) and all(0 < value < 1 for value in mfu.values()), mfu


@pytest.mark.parametrize(
    "backend",
    [
        {"kind": "torch", "precision": "bf16"},
        {"kind": "deepspeed", "zero_stage": 2, "precision": "bf16"},
        {"kind": "fsdp2", "precision": "bf16"},
    ],
    ids=["torch-bf16", "zero2-bf16", "fsdp2-bf16"],
)
def test_a_gpu_run_resumes_on_its_curve(tmp_path: Path, backend: dict) -> None:
    """20 bf16 steps with a checkpoint at 10, then steps 11-20 again from it in new processes: the losses and grad
    norms of the straight run. Asked bit for bit; the tolerance (1e-4) is for kernels that may pick another
    algorithm in a new process (cuBLAS, SDPA's backward), and the test prints the difference it saw."""
    spec = {**SFT, "backend": backend, "train": {**SFT["train"], "steps": 20, "checkpoint_every": 10}}
    straight = train(tmp_path, spec, "straight")
    resumed = train(tmp_path, spec, "resumed", "--resume", checkpoint(straight, 10))
    for key in ("train/loss", "train/grad_norm"):
        diff = max_diff(metrics(resumed, key), after(metrics(straight, key), 10))
        print(f"{backend}: {key} resumed vs straight, largest difference {diff:.3g}")
        assert diff <= 1e-4, (key, metrics(resumed, key), metrics(straight, key))


def test_checkpoints_move_between_the_gpu_and_the_cpu(tmp_path: Path) -> None:
    """fp32 on the torch backend: a CPU run's step-10 checkpoint resumes on the GPU, and a GPU run's on the CPU; each
    resumed run's steps 11-20 follow the run it came from within 1e-3 (the same fp32 arithmetic on other kernels:
    CPU and GPU sum in different orders, and Adam carries the difference; a lost optimizer state moves it by 0.1)."""
    spec = {
        **SFT,
        "backend": {"kind": "torch", "precision": "fp32"},
        "train": {**SFT["train"], "steps": 20, "checkpoint_every": 10},
    }
    on_cpu = train(tmp_path, {**spec, "resources": {"gpus": 0}}, "cpu", cpu=True)
    on_gpu = train(tmp_path, spec, "gpu")
    to_gpu = train(tmp_path, spec, "cpu-to-gpu", "--resume", checkpoint(on_cpu, 10))
    to_cpu = train(tmp_path, {**spec, "resources": {"gpus": 0}}, "gpu-to-cpu", "--resume", checkpoint(on_gpu, 10), cpu=True)
    for resumed, source in ((to_gpu, on_cpu), (to_cpu, on_gpu)):
        loss = metrics(resumed, "train/loss")
        assert sorted(loss) == list(range(11, 21))
        diff = max_diff(loss, after(metrics(source, "train/loss"), 10))
        print(f"{resumed.name}: loss against {source.name}'s, largest difference {diff:.3g}")
        assert diff <= 1e-3, (loss, metrics(source, "train/loss"))


def test_bf16_zero3_follows_the_torch_bf16_curve(tmp_path: Path) -> None:
    """The same 40 steps in bf16 on the torch backend (autocast) and on ZeRO-3 (bf16 weights, fp32
    masters): the curves agree to within bf16's precision (0.05 nats)."""
    a = metrics(train(tmp_path, {**SFT, "backend": {"kind": "torch", "precision": "bf16"}}, "torch"), "train/loss")
    b = metrics(
        train(tmp_path, {**SFT, "backend": {"kind": "deepspeed", "zero_stage": 3, "precision": "bf16"}}, "z3"), "train/loss"
    )
    assert max(abs(a[s] - b[s]) for s in a) < 0.05, (a, b)


def test_ppo_generates_and_learns_under_zero3_on_the_gpu(tmp_path: Path) -> None:
    """An SFT'd walker, then 10 PPO steps on ZeRO-3 bf16 on the GPU: optimality rises (CPU: 0.55 -> 1.0)."""
    walker = {
        **SFT,
        "data": {"source": "builtin:randomwalks", "eval_fraction": 0.0},
        "train": {"steps": 300, "batch_size": 32, "lr": 3e-3, "warmup_steps": 10, "log_every": 50},
    }
    start = train(tmp_path, {**walker, "backend": {"kind": "torch", "precision": "fp32"}}, "walker") / "final"
    spec = {
        "name": "gpu-ppo",
        "algorithm": "ppo",
        "model": {"path": str(start), "max_seq_len": 32},
        "reward": {"kind": "builtin", "name": "randomwalks"},
        "data": {"source": "builtin:randomwalks", "eval_fraction": 0.0},
        "train": {"steps": 10, "batch_size": 32, "lr": 3e-4, "eval_every": 10, "log_every": 1},
        "ppo": {"kl_coef": 0.05, "epochs": 4, "minibatch_size": 16, "gen": {"max_new_tokens": 10}},
        "resources": {"gpus": 1},
        "backend": {"kind": "deepspeed", "zero_stage": 3, "precision": "bf16"},
    }
    optimality = metrics(train(tmp_path, spec, "ppo"), "eval/optimality")
    assert optimality[10] >= optimality[0] + 0.2, optimality


def test_grpo_steps_on_the_gpu_with_the_static_cache_engine(tmp_path: Path) -> None:
    """Three GRPO steps on tiny-llama, bf16, the hf engine's compiled static-cache decode: every step reports its
    generation and training seconds and its response lengths (a step's extremes once failed on a GPU, mixing the
    lengths on the GPU with ratio extremes on the CPU)."""
    spec = {
        "name": "gpu-grpo",
        "algorithm": "grpo",
        "model": {"path": "builtin:tiny-llama", "max_seq_len": 64},
        "reward": {"kind": "builtin", "name": "arithmetic"},
        "data": {"source": "builtin:arithmetic", "eval_fraction": 0.0, "max_samples": 32},
        "backend": {"kind": "torch", "precision": "bf16"},
        "resources": {"gpus": 1},
        "train": {"steps": 3, "batch_size": 32, "lr": 1e-5, "log_every": 1, "eval_every": None},
        "grpo": {"group_size": 8, "gen": {"max_new_tokens": 16, "static_cache": True}, "samples_to_log": 0},
    }
    out = train(tmp_path, spec, "grpo")
    for key in ("perf/gen_s", "perf/train_s", "gen/response_length_max", "grpo/ratio_max"):
        assert sorted(metrics(out, key)) == [1, 2, 3], key


@pytest.mark.parametrize("generator", ["colocated", "process"])
def test_async_grpo_on_the_gpu_samples_within_its_bound(tmp_path: Path, generator: str) -> None:
    """Asynchronous GRPO (bound 1) on tiny-llama in bf16 on the GPU, its generator a thread on a copy of the policy or
    a process of its own on the same GPU (its policy's files and weights sent over the socket pair): every step
    trains groups at most one step stale, and the weights reach the generator at every step."""
    spec = {
        "name": f"gpu-async-{generator}",
        "algorithm": "grpo",
        "model": {"path": "builtin:tiny-llama", "max_seq_len": 64},
        "reward": {"kind": "builtin", "name": "arithmetic"},
        "data": {"source": "builtin:arithmetic", "eval_fraction": 0.0, "max_samples": 64},
        "backend": {"kind": "torch", "precision": "bf16"},
        "resources": {"gpus": 1},
        "train": {"steps": 6, "batch_size": 32, "lr": 1e-5, "log_every": 1, "eval_every": None},
        "grpo": {"group_size": 8, "gen": {"max_new_tokens": 16}, "samples_to_log": 0, "max_staleness": 1, "generator": generator},
    }
    out = train(tmp_path, spec, "grpo")
    staleness = metrics(out, "async/staleness_max")
    assert sorted(staleness) == list(range(1, 7)) and max(staleness.values()) <= 1, staleness
    assert sorted(metrics(out, "perf/weight_sync_s")) == list(range(1, 7))


@pytest.mark.parametrize(
    ("kind", "switches"),
    [("torch", {"compile": True}), ("torch", {"kernels": "liger"}), ("fsdp2", {"compile": True, "kernels": "liger"})],
    ids=["torch-compile", "torch-liger", "fsdp2-compile-liger"],
)
def test_the_speed_switches_follow_the_eager_bf16_curve(tmp_path: Path, kind: str, switches: dict) -> None:
    """model.compile (compiled decoder blocks) and model.kernels: liger (Liger's RMSNorm, SwiGLU and rotary kernels)
    on tiny-llama, 40 bf16 SFT steps: the loss falls by more than 1 nat and stays within bf16's precision (0.05) of
    the same backend's eager run."""
    spec = {**SFT, "model": {**SFT["model"], "path": "builtin:tiny-llama"}, "backend": {"kind": kind, "precision": "bf16"}}
    eager = metrics(train(tmp_path, spec, "eager"), "train/loss")
    fast = metrics(train(tmp_path, {**spec, "model": {**spec["model"], **switches}}, "fast"), "train/loss")
    print(f"{kind} {switches}: largest difference from eager {max(abs(fast[s] - eager[s]) for s in eager):.3g}")
    assert fast[40] < fast[1] - 1.0, fast
    assert max(abs(fast[s] - eager[s]) for s in eager) < 0.05, (fast, eager)


@pytest.mark.parametrize(("tensor_parallel", "pipeline_parallel"), [(1, 2), (2, 2)], ids=["pp2", "tp2-pp2"])
def test_megatron_pipeline_learns_in_bf16_on_gpus(tmp_path: Path, tensor_parallel: int, pipeline_parallel: int) -> None:
    """Megatron's 1F1B schedule over NCCL, one process per GPU, bf16: 40 SFT steps on tiny-llama (one layer per
    stage) lower the loss by more than 1 nat and stay within bf16's precision of the fp32 curve on one GPU."""
    gpus = tensor_parallel * pipeline_parallel
    if torch.cuda.device_count() < gpus:
        pytest.skip(f"needs {gpus} GPUs, this machine has {torch.cuda.device_count()}")
    spec = {**SFT, "model": {**SFT["model"], "path": "builtin:tiny-llama"}, "resources": {"gpus": gpus}}
    megatron = {"kind": "megatron", "tensor_parallel": tensor_parallel, "pipeline_parallel": pipeline_parallel}
    loss = metrics(train(tmp_path, {**spec, "backend": {**megatron, "precision": "bf16"}}, "pipeline"), "train/loss")
    one_gpu = {**spec, "resources": {"gpus": 1}, "backend": {"kind": "torch", "precision": "fp32"}}
    reference = metrics(train(tmp_path, one_gpu, "fp32"), "train/loss")
    assert loss[40] < loss[1] - 1.0, loss
    assert max(abs(loss[s] - reference[s]) for s in reference) < 0.05, (loss, reference)


@pytest.mark.parametrize(
    ("engine", "static_cache"),
    [("hf", False), ("hf", True), ("continuous", False)],
    ids=["dynamic-cache", "static-cache", "continuous"],
)
def test_the_hf_engine_on_the_gpu_matches_the_trainers_logprobs(engine: str, static_cache: bool) -> None:
    """The hf rollout engine on CUDA (gen.static_cache: transformers compiles the static-cache decode with CUDA graphs),
    and the continuous engine (transformers' continuous batching, its paged cache sized from gen.kv_cache_share of the
    GPU's free memory), in fp32: the dynamic-cache engine's greedy tokens, and log-probabilities within 1e-4 of the
    trainer's forward."""
    from rlplane.spec.generation import GenSpec
    from rlplane.spec.sections import TorchBackend, TrainSpec
    from trainer_core.backends import make_backend
    from trainer_core.backends.dist import DistEnv
    from trainer_core.losses.policy import response_logprobs
    from trainer_core.models import build_builtin
    from trainer_core.rollout import rollouts

    backend = make_backend(TorchBackend(kind="torch", precision="fp32"), TrainSpec(steps=1, batch_size=4), DistEnv())
    try:
        model, tokenizer = build_builtin("tiny-llama", seed=0)
        model = model.to(backend.device).eval()
        prompts = rollouts.encode_prompts([{"prompt": p} for p in ("12+7=", "3*4=", "40+41=", "9*9=")], tokenizer, 20)
        gen = {"max_new_tokens": 24, "top_k": 0}
        dynamic = rollouts.generate(model, prompts, tokenizer, GenSpec(**gen), backend, greedy=True)
        for _ in range(2):  # the first static-cache call compiles
            generation = rollouts.generate(
                model, prompts, tokenizer, GenSpec(**gen, static_cache=static_cache, engine=engine), backend, greedy=True
            )
        assert torch.equal(generation.input_ids, dynamic.input_ids)
        with torch.no_grad():
            logits = model(**generation.inputs()).logits
        trainer = response_logprobs(logits, generation.input_ids, generation.prompt_width)
        assert float(((trainer - generation.logprobs).abs() * generation.response_mask).max()) <= 1e-4
    finally:
        backend.close()
