"""The TRL half of bench/rl.py: one GRPOTrainer run, timed per step and per phase.

Run by bench/rl.py with bench/.venv-trl/bin/python (trl 1.16.0), never imported by the project:

    bench/.venv-trl/bin/python bench/rlbench/trl_side.py CONFIG.json

CONFIG holds model (a local save_pretrained directory), prompts (JSONL rows with "prompt" and
"answer"), out, steps, prompts_per_step, group, max_new_tokens, lr, beta, threads, root (the
repository, for the arithmetic reward) and result (where the JSON answer goes).

Settings match the rlplane spec the bench writes: per_device_train_batch_size = prompts x group
responses, gradient_accumulation_steps 1 and steps_per_generation 1 (one generation, one optimizer
update per step), num_iterations 1, loss_type "grpo" (per-response mean, then over responses, as
ours), scale_rewards "group", epsilon 0.2, beta > 0 (a reference model, created by TRL from the
model's own directory), sampling at temperature 1 with top_k 0 and top_p 1, fp32 (TRL defaults to
bf16), no gradient checkpointing (TRL defaults to on), no vLLM, constant lr without warmup or weight
decay, clip 1.0, prompts in file order, no eval, no saving, log every step.

Phases, timed by a subclass: `_generate` (prompt tokenization, transformers generate, decoding:
what rlplane's perf/gen_s covers) and `_generate_and_score_completions` (generation plus rewards,
advantages and reference log-probs); the rest of a step (end of step to end of step) is the
policy forward, backward and optimizer step.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import datasets
import torch
import transformers
import trl
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback


class StepClock(TrainerCallback):
    def __init__(self) -> None:
        self.ends: list[float] = []
        self.losses: list[float] = []
        self.rewards: list[float] = []
        self.response_length: list[float] = []
        self.started = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))
        if logs and "reward" in logs:
            self.rewards.append(float(logs["reward"]))
        if logs and "completions/mean_length" in logs:
            self.response_length.append(float(logs["completions/mean_length"]))


class TimedGRPOTrainer(trl.GRPOTrainer):
    """GRPOTrainer with the seconds of each generation and each rollout (generation + scoring) recorded."""

    gen_s: list[float]
    rollout_s: list[float]

    def _generate(self, prompts):
        started = time.perf_counter()
        out = super()._generate(prompts)
        if self.model.training:
            self.gen_s.append(time.perf_counter() - started)
        return out

    def _generate_and_score_completions(self, inputs):
        started = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.rollout_s.append(time.perf_counter() - started)
        return out


def arithmetic_reward(root: str):
    sys.path.insert(0, root)
    from trainer_core.data.tasks.arithmetic import reward  # pure Python: no project dependencies in this venv

    def arithmetic(prompts, completions, answer, **kwargs) -> list[float]:
        return [reward(p, c, a) for p, c, a in zip(prompts, completions, answer, strict=True)]

    return arithmetic


def slow_reward():
    """bench/rlbench/slow_reward.py's score (the arithmetic reward behind a verifier's latency), as TRL calls rewards."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from slow_reward import score

    def arithmetic_slowly(prompts, completions, answer, **kwargs) -> list[float]:
        return score(prompts, completions, [{"answer": a} for a in answer])

    return arithmetic_slowly


def main(config_path: str) -> None:
    cfg = json.loads(Path(config_path).read_text())
    torch.set_num_threads(int(cfg["threads"]))
    rows = [json.loads(line) for line in Path(cfg["prompts"]).read_text().splitlines() if line.strip()]
    dataset = datasets.Dataset.from_list([{"prompt": r["prompt"], "answer": str(r["answer"])} for r in rows])
    tokenizer = AutoTokenizer.from_pretrained(cfg["model"])
    model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32)
    args = trl.GRPOConfig(
        output_dir=cfg["out"],
        max_steps=cfg["steps"],
        per_device_train_batch_size=cfg["prompts_per_step"] * cfg["group"],
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        num_generations=cfg["group"],
        max_completion_length=cfg["max_new_tokens"],
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        beta=cfg["beta"],
        epsilon=0.2,
        **{"loss_type": "grpo", "scale_rewards": "group", **cfg.get("variant", {})},
        learning_rate=cfg["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        bf16=False,
        fp16=False,
        use_cpu=True,
        use_vllm=False,
        gradient_checkpointing=False,
        eval_strategy="no",
        save_strategy="no",
        logging_steps=1,
        log_completions=False,
        report_to="none",
        disable_tqdm=True,
        seed=0,
        shuffle_dataset=False,
        dataloader_num_workers=0,
    )
    clock = StepClock()
    trainer = TimedGRPOTrainer(
        model=model,
        reward_funcs=slow_reward() if cfg.get("slow_reward") else arithmetic_reward(cfg["root"]),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.gen_s, trainer.rollout_s = [], []
    trainer.train()
    step_s = [b - a for a, b in zip([clock.started, *clock.ends[:-1]], clock.ends, strict=True)]
    ref = trainer.ref_model
    result = {
        "step_s": step_s,
        "gen_s": trainer.gen_s,
        "rollout_s": trainer.rollout_s,
        "losses": clock.losses,
        "rewards": clock.rewards,
        "response_length": clock.response_length,
        "gradient_checkpointing": bool(getattr(trainer.model, "is_gradient_checkpointing", False)),
        "reference": None if ref is None else str(next(ref.parameters()).dtype),
        "optim": str(args.optim),
        "bf16": bool(args.bf16),
        "versions": {"trl": trl.__version__, "torch": torch.__version__, "transformers": transformers.__version__},
    }
    Path(cfg["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
