"""A Hugging Face `TrainerCallback` that reports to rlplane: transformers' Trainer and TRL's trainers (SFT, DPO,
GRPO, RLOO, ...) accept it.

    from rlplane.integrations.hf import RlplaneCallback
    trainer = GRPOTrainer(..., args=GRPOConfig(..., log_completions=True), callbacks=[RlplaneCallback()])
    trainer.train(resume_from_checkpoint=RlplaneCallback.resume_from())

    trainer = RLOOTrainer(...); RlplaneCallback.attach(trainer)   # the same, and it reads the trainer's rollouts

- metrics: what the trainer logs, under our keys where the meaning is the same (loss -> train/loss, learning_rate ->
  train/lr, grad_norm -> train/grad_norm, eval_loss -> eval/loss, TRL's reward -> reward/mean, reward_std ->
  reward/std, kl -> grpo/kl, rewards/<f>/mean -> reward/<f>, ...: KEYS below), the rest under their own names;
- samples: TRL's completions (GRPO and RLOO) with their reward components and advantages; the completions of one
  step that share a prompt are its group. Attached to the trainer (`RlplaneCallback.attach(trainer)`) it reads
  each step's rollouts from the trainer itself; given to it in `callbacks=[...]`, from the completion tables GRPO
  writes with log_completions=True (RLOO writes none: attach it);
- checkpoints: each one the trainer saves (output_dir/checkpoint-N) as the run's checkpoint at step N;
- the trainer's arguments as the run's config; a cancel (or a hand-back) makes the trainer save and stop.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

import rlplane
from rlplane.layout import RESUME_ENV, RUN_DIR_ENV, latest_checkpoint

logger = logging.getLogger("rlplane.sdk")

# Hugging Face's and TRL's names -> ours (docs/rl.md), where they mean the same thing. {algo} is grpo or rloo.
KEYS = {
    "loss": "train/loss",
    "learning_rate": "train/lr",
    "grad_norm": "train/grad_norm",
    "epoch": "train/epoch",
    "eval_loss": "eval/loss",
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "kl": "{algo}/kl",
    "entropy": "{algo}/entropy",
    "clip_ratio/region_mean": "{algo}/clipfrac",
    "frac_reward_zero_std": "{algo}/zero_std_groups",
    "completions/mean_length": "gen/response_length",
    "rewards/chosen": "rewards/chosen",
    "rewards/rejected": "rewards/rejected",
    "rewards/margins": "rewards/margin",
    "rewards/accuracies": "train/accuracy",
}
_REWARD_MEAN = re.compile(r"^rewards/(.+)/mean$")
_BAD = re.compile(r"[^A-Za-z0-9_./@:-]")


def our_key(key: str, algorithm: str) -> str:
    """The rlplane key of a trainer's log key."""
    if key in KEYS:
        return KEYS[key].format(algo=algorithm)
    if (match := _REWARD_MEAN.match(key)) and match.group(1) not in ("chosen", "rejected", "margins", "accuracies"):
        return f"reward/{match.group(1)}"
    if key.startswith("eval_"):
        return "eval/" + our_key(key.removeprefix("eval_"), algorithm).removeprefix("train/")
    return _BAD.sub("_", key)[:256]


class RlplaneCallback(TrainerCallback):
    """Reports a Hugging Face (or TRL) trainer to rlplane. `run`: a run from rlplane.init(); by default one is made
    when training begins, with the trainer's arguments as its config (init_kwargs: project, name, ... for a script
    started outside a worker). `sharded`: the trainer saves sharded checkpoints, each process its own shards on its
    node (FSDP's SHARDED_STATE_DICT): every process then hands its node's files in (Run.log_checkpoint's `sharded`),
    so a gang on an fsspec artifact root keeps every node's shards."""

    def __init__(self, run: rlplane.Run | None = None, trainer: Any = None, *, sharded: bool = False, **init_kwargs: Any) -> None:
        self.run = run
        self.trainer = trainer
        self.sharded = sharded
        self.init_kwargs = init_kwargs
        self.algorithm = "hf"
        self._completions_seen: set[str] = set()
        self._rollouts_step: int | None = None

    @classmethod
    def attach(
        cls, trainer: Any, run: rlplane.Run | None = None, *, sharded: bool = False, **init_kwargs: Any
    ) -> RlplaneCallback:
        """Add a callback to `trainer` that also reads its rollouts (TRL's GRPO and RLOO keep each step's prompts,
        completions, rewards and advantages): every logged step's completions become samples, with no table."""
        callback = cls(run, trainer, sharded=sharded, **init_kwargs)
        trainer.add_callback(callback)
        return callback

    @staticmethod
    def resume_from() -> str | None:
        """The checkpoint to resume from, for trainer.train(resume_from_checkpoint=...): the newest of this run's
        (a retried or resumed attempt of a worker's run), else None."""
        resume = os.environ.get(RESUME_ENV) or None
        if resume is None and os.environ.get(RUN_DIR_ENV):
            found = latest_checkpoint(Path(os.environ[RUN_DIR_ENV]))
            resume = str(found) if found is not None else None
        return resume

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        name = type(args).__name__.removesuffix("Config").lower()
        self.algorithm = name if name in ("grpo", "rloo") else "hf"
        if self.run is None:
            config = {k: v for k, v in args.to_dict().items() if _plain(v)}
            self.init_kwargs.setdefault("steps", state.max_steps or None)
            self.run = rlplane.init(config=config, **self.init_kwargs)
        if self.algorithm in ("grpo", "rloo") and not getattr(args, "log_completions", False):
            logger.warning("rlplane: set log_completions=True in the trainer's config to see its completions as samples")

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs=None, **kwargs: Any):
        if self.run is None or not state.is_world_process_zero or not logs:
            return
        values = {our_key(k, self.algorithm): float(v) for k, v in logs.items() if _number(v)}
        if values:
            self.run.log(values, step=state.global_step)
        if not self._rollouts(state.global_step):
            self._completions(args)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        if self.run is not None and self.run.should_stop():
            control.should_save = True  # a checkpoint of this step, then stop: the next attempt resumes from it
            control.should_training_stop = True

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        if self.run is None or not (state.is_world_process_zero or self.sharded):
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.sharded:  # every process, even one whose node saved nothing: handing the parts in is a collective
            self.run.log_checkpoint(folder, step=state.global_step, sharded=True)
        elif folder.is_dir():
            self.run.log_checkpoint(folder, step=state.global_step)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        if self.run is not None and state.is_world_process_zero:
            if self.trainer is None:
                self._completions(args)
            self.run.flush()

    def _rollouts(self, step: int) -> bool:
        """The attached trainer's latest rollouts as samples at `step`; False without a trainer that keeps them."""
        kept = getattr(self.trainer, "_logs", None)
        if not isinstance(kept, dict) or "completion" not in kept or self.run is None:
            return False
        if step != self._rollouts_step and kept["completion"]:
            self._rollouts_step = step
            rewards = {name: list(values) for name, values in kept.get("rewards", {}).items()}
            advantages = list(kept.get("advantages", []))
            rows = []
            for i, (prompt, completion) in enumerate(zip(kept["prompt"], kept["completion"], strict=False)):
                row = {"prompt": prompt, "completion": completion, **{k: v[i] for k, v in rewards.items() if i < len(v)}}
                if i < len(advantages):
                    row["advantage"] = advantages[i]
                rows.append(_sample(row, getattr(self.trainer.args, "reward_weights", None)))
            self.run.log_samples(rows, step=step)
        return True

    def _completions(self, args: TrainingArguments) -> None:
        """TRL writes each logged step's completion table to output_dir/completions/*.parquet (after the callbacks'
        on_log of that step, so each is read at the next log or at the end)."""
        folder = Path(args.output_dir) / "completions"
        if self.run is None or not folder.is_dir():
            return
        weights = getattr(args, "reward_weights", None)
        for path in sorted(folder.glob("completions_*.parquet")):
            if path.name in self._completions_seen:
                continue
            self._completions_seen.add(path.name)
            import pyarrow.parquet as pq

            table = pq.read_table(path).to_pylist()
            by_step: dict[int, list[dict[str, Any]]] = {}
            for row in table:
                by_step.setdefault(int(row["step"]), []).append(_sample(row, weights))
            for step, samples in by_step.items():
                self.run.log_samples(samples, step=step)


def _sample(row: dict[str, Any], weights: list[float] | None) -> dict[str, Any]:
    """One completion (a table row, or the trainer's kept rollout) as an SDK sample."""
    fixed = {"step", "prompt", "completion", "advantage", "image"}
    components = {k: float(v) for k, v in row.items() if k not in fixed and _number(v)}
    weights = weights or [1.0] * len(components)
    reward = sum(w * v for w, v in zip(weights, components.values(), strict=False)) if components else None
    sample: dict[str, Any] = {"prompt": _text(row["prompt"]), "response": _text(row["completion"]), "scores": components}
    if reward is not None:
        sample["reward"] = reward
    if _number(row.get("advantage")):
        sample["advantage"] = float(row["advantage"])
    return sample


def _text(value: Any) -> str:
    """A prompt or completion: text, or a conversation (a list of {role, content}) shown turn by turn."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" if isinstance(m, dict) else str(m) for m in value)
    return str(value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
