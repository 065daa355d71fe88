"""Specs more than one test module trains."""

from __future__ import annotations

from pathlib import Path

RANDOMWALKS = {"source": "builtin:randomwalks", "eval_fraction": 0.0}  # eval on all 20 start nodes, as trlx does

# tiny-gpt2 after 300 SFT steps on builtin:randomwalks (greedy optimality about 0.55): where PPO and GRPO start,
# as trlx starts from a pretrained walker (baselines.walker trains it once per session).
WALKER_SPEC = {
    "name": "sft-randomwalks",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": RANDOMWALKS,
    "train": {"steps": 300, "batch_size": 32, "lr": 3e-3, "warmup_steps": 10, "log_every": 50},
}


def ppo_spec(model: Path, reward: dict, **train: object) -> dict:
    """30 PPO steps on the random walks from `model`, evaluated every 10."""
    return {
        "name": "ppo-test",
        "algorithm": "ppo",
        "model": {"path": str(model), "max_seq_len": 32},
        "reward": reward,
        "data": RANDOMWALKS,
        "train": {"steps": 30, "batch_size": 32, "lr": 3e-4, "eval_every": 10, "log_every": 1, **train},
        "ppo": {"kl_coef": 0.05, "epochs": 4, "minibatch_size": 16, "gen": {"max_new_tokens": 10}, "samples_to_log": 2},
    }


def rl_spec(walker: Path, algorithm: str, backend: dict) -> dict:
    """10 steps of PPO or GRPO from the walker on `backend` in 2 processes."""
    options: dict = {"gen": {"max_new_tokens": 10}, "samples_to_log": 2}
    if algorithm == "ppo":
        options |= {"kl_coef": 0.05, "epochs": 4, "minibatch_size": 16}
    else:
        options |= {"group_size": 4, "beta": 0.04}
    return {
        "name": f"{algorithm}-sharded",
        "algorithm": algorithm,
        "model": {"path": str(walker), "max_seq_len": 32},
        "reward": {"kind": "builtin", "name": "randomwalks"},
        "data": RANDOMWALKS,
        "train": {"steps": 10, "batch_size": 32, "lr": 3e-4, "eval_every": 10, "log_every": 1},
        algorithm: options,
        "backend": {**backend, "processes": 2},
    }


# What the sharding backends (DeepSpeed, FSDP2) are held to the torch backend's curve on: 12 SFT steps from random
# weights, 2 micro-steps per rank of 2 (gradient accumulation and no_sync exercised), a checkpoint at step 6.
SHARDED_SFT = {
    "name": "sharded-sft",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": {"source": "builtin:arithmetic", "eval_fraction": 0.0},
    "train": {
        "steps": 12,
        "batch_size": 8,
        "micro_batch_size": 2,
        "lr": 3e-3,
        "log_every": 1,
        "eval_every": None,
        "checkpoint_every": 6,
    },
}


def packed(spec: dict) -> dict:
    """`spec` with padding-free micro-batches of at most 64 tokens (docs/packing.md) instead of micro_batch_size."""
    train = {**spec["train"], "micro_batch_size": None, "micro_batch_tokens": 64, "padding_free": True}
    return {**spec, "name": f"{spec['name']}-packed", "train": {**train, "checkpoint_every": None}}


ILQL_SPEC = {
    "name": "ilql-test",
    "algorithm": "ilql",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 16},
    "data": {"source": "builtin:randomwalks", "eval_fraction": 0.0},
    "train": {"steps": 400, "batch_size": 32, "lr": 1e-3, "warmup_steps": 10, "eval_every": 100, "log_every": 50},
    # alpha 0.1 (trlx's randomwalks setting): the default 0.001 leaves the target Q heads near their random init.
    "ilql": {"alpha": 0.1, "beta": 1.0, "gen": {"max_new_tokens": 10}},
}

# --- the Megatron backend's (tests/test_backend_megatron*.py, test_megatron_virtual_pipeline.py) ---

# fp32, same data, same init: TP=2 sums the same maths in another order (split matmuls all-reduced,
# fused qkv). Measured: SFT |Δ train/loss| 1.7e-7, |Δ grad_norm| 6.2e-6, |Δ eval/loss| 1e-7 over 12 steps;
# DPO |Δ train/loss| 4.5e-7, |Δ rewards/margin| 7.7e-7 over 30 steps.
MEGATRON_TOLERANCE = 1e-5
MEGATRON = {"kind": "megatron", "tensor_parallel": 2, "precision": "fp32"}
TORCH = {"kind": "torch", "precision": "fp32"}
SEQUENCE_PARALLEL = {**MEGATRON, "sequence_parallel": True}
PIPELINE = {**MEGATRON, "tensor_parallel": 1, "pipeline_parallel": 2}

MEGATRON_SFT = {
    "name": "megatron-sft",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-llama", "max_seq_len": 32},
    "data": {"source": "builtin:arithmetic", "eval_fraction": 0.02},
    "train": {
        "steps": 12,
        "batch_size": 8,
        "micro_batch_size": 2,  # 4 micro-steps: gradient accumulation is exercised
        "lr": 3e-3,
        "log_every": 1,
        "eval_every": 12,
        "checkpoint_every": 6,
    },
}
MEGATRON_REWARD = {
    "name": "megatron-reward",
    "algorithm": "reward",
    "model": {"path": "builtin:tiny-llama", "max_seq_len": 32},
    "data": {"source": "builtin:arithmetic", "eval_fraction": 0.1},
    "train": {
        "steps": 10,
        "batch_size": 16,
        "micro_batch_size": 4,  # gradient accumulation is exercised
        "lr": 3e-3,
        "warmup_steps": 2,
        "eval_every": 5,
        "log_every": 1,
        "checkpoint_every": 5,
    },
}
