"""Reward model: a one-output sequence-classification model trained on preference pairs so that
r(prompt, chosen) > r(prompt, rejected), with the Bradley-Terry loss (and reward_model.margin). With
reward_model.attributes it is SteerLM's attribute model instead (attribute_model.py).

    setup()            backend, score model, tokenizer, pairs, optimizer, schedule (and the resume point)
    train()            train.steps optimizer steps: micro-batches, backward, step, report, eval, checkpoint
    run_state()        (checkpointing) what a checkpoint holds: under OUT/checkpoints/step-N (rotated to keep_last)
and at the end the score model is exported to OUT/final as a plain Hugging Face directory
(AutoModelForSequenceClassification loads it).

The score of a sequence is the head's output at its last non-pad token (the model's config carries
the pad id); completions end with eos, so that token has read the whole prompt and answer.
A step's loss is the mean over the global batch's pairs; train.batch_size counts pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlplane.spec import RunSpec
from trainer_core.backends import MicroStep
from trainer_core.data.pairs import PairExample, load_pairs, pair_batch, pair_tokens
from trainer_core.data.tokenize import model_inputs
from trainer_core.losses import bradley_terry_loss
from trainer_core.models import load_from_spec
from trainer_core.recipes import common, loop, packing, samples
from trainer_core.reporting import Sample


@dataclass(kw_only=True)
class RewardRun(common.Run):
    train_pairs: list[PairExample]
    eval_pairs: list[PairExample]
    sample_rows: list[dict]  # the first held-out pairs as rows (their text): what evaluations show as samples
    head: packing.ScoreHead | None  # with train.padding_free: the score head read per token


def setup(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stdout: bool = True) -> RewardRun:
    with common.started(spec, out_dir, stdout) as (backend, reporter):
        model, tokenizer = load_from_spec(spec.model, "score", seed=spec.train.seed)
        spec = common.fit_context(spec, model)
        data = load_pairs(spec, tokenizer)
        common.report_cut(reporter, data.train_cut, len(data.train), "pairs have a side", spec.model.max_seq_len)
        opt = common.prepare_optimization(spec, backend, model, len(data.train), resume_from)
        head = packing.ScoreHead(backend.unwrap(opt.model)) if spec.train.padding_free else None
        if head is not None:
            with head.catching():
                packing.check_separates(opt.model, backend, lambda _output: head.caught.pop(0))
    if resume_from is not None:
        reporter.log(f"resumed from {resume_from} at step {opt.step}")
    return RewardRun(
        train_pairs=data.train,
        eval_pairs=data.eval,
        sample_rows=data.eval_rows[: spec.reward_model.samples_to_log],
        head=head,
        **common.run_fields(spec, out_dir, backend, reporter, tokenizer, opt),
    )


def _rewards(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen rewards [B], rejected rewards [B]) from one forward pass over the 2B collated rows."""
    return _chosen_rejected(model(**model_inputs(batch)).logits)


def _chosen_rejected(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    chosen, rejected = logits.squeeze(-1).float().chunk(2)
    return chosen, rejected


def _finish(output: Any, run: RewardRun, weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A training micro-batch's loss to backpropagate (weighted as train_step says) and its sums."""
    logits = output.logits
    chosen, rejected = _chosen_rejected(logits)
    loss = bradley_terry_loss(chosen, rejected, run.spec.reward_model.margin)
    return loss * weight, _sums(run, chosen, rejected).to(logits.device)


def _sums(run: RewardRun, chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """[summed loss, correct pairs, summed margin, pairs] of a micro-batch, for reducing over micro-batches and ranks."""
    loss = bradley_terry_loss(chosen, rejected, run.spec.reward_model.margin) * len(chosen)
    diff = (chosen - rejected).detach()
    return torch.stack([loss.detach(), (diff > 0).sum(), diff.sum(), torch.tensor(len(chosen))]).double()


def _eval_sums(run: RewardRun, chunk: list[PairExample]) -> torch.Tensor:
    device = run.backend.device
    return _sums(run, *_rewards(run.model, pair_batch(chunk, run.tokenizer, device))).to(device)


def _samples(run: RewardRun) -> list[Sample]:
    """The first held-out pairs with their scores (every rank runs the forward: a collective under sharding)."""
    count = min(len(run.sample_rows), len(run.eval_pairs))
    if not count:
        return []
    chosen, rejected = _rewards(run.model, pair_batch(run.eval_pairs[:count], run.tokenizer, run.backend.device))
    return samples.pair_samples(run.sample_rows[:count], chosen.tolist(), rejected.tolist(), "score")


def evaluate(run: RewardRun) -> dict[str, float] | None:
    """eval/loss, eval/accuracy (chosen scored above rejected) and eval/margin on held-out pairs; None without any."""
    if not run.eval_pairs:
        return None
    loss, correct, margin, pairs = common.evaluate(run, run.eval_pairs, partial(_eval_sums, run), partial(_samples, run))
    return {"eval/loss": loss / pairs, "eval/accuracy": correct / pairs, "eval/margin": margin / pairs}


def micro_steps(run: RewardRun, local: list[PairExample]) -> list[MicroStep]:
    """This rank's pairs of the step as micro-batches (train.micro_batch_size pairs or train.micro_batch_tokens tokens
    each, padded or padding-free), each weighing its share of the rank's pairs. Run them inside `packing.catching(run.head)`."""
    train = run.spec.train
    sizes = [[len(p["chosen"]["input_ids"]), len(p["rejected"]["input_ids"])] for p in local]
    make = run.head.micro_step if run.head is not None else packing.micro_step
    steps = []
    for pairs, weight in common.weighted_micro_batches(local, packing.micro_batches(sizes, train, run.backend)):
        batch = pair_batch(pairs, run.tokenizer, run.backend.device)
        steps.append(make(model_inputs(batch), partial(_finish, run=run, weight=weight), train.padding_free))
    return steps


def train_step(run: RewardRun) -> loop.StepResult:
    """One optimizer step over the next global batch: mean loss, accuracy, pre-clip grad norm, input tokens."""
    local = common.local_batch(run, run.train_pairs)
    run.model.train()
    with packing.catching(run.head):
        (loss_sum, correct, _, count), grad_norm = common.optimizer_step(run, micro_steps(run, local))
    values = {"train/loss": loss_sum / count, "train/accuracy": correct / count, "train/grad_norm": grad_norm}
    return loop.StepResult(values, pair_tokens(local) * run.backend.data_world_size)


def train(run: RewardRun, stop_at: int | None = None) -> None:
    """Train to train.steps (or stop after step `stop_at`, checkpointed, as a preempted run would)."""
    loop.run_loop(run, stop_at, step=train_step, evaluate=evaluate)


def run_reward(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stop_at: int | None = None) -> Any:
    """setup, train, export; the reporter and backend are closed whatever happens. With reward_model.attributes, SteerLM's
    attribute model (attribute_model.py) instead of the pairwise one."""
    if spec.reward_model is not None and spec.reward_model.attributes:
        from trainer_core.recipes import attribute_model

        return attribute_model.run_attribute_model(spec, out_dir, resume_from, stop_at=stop_at)
    return common.drive(setup(spec, out_dir, resume_from), train, stop_at)


run = run_reward  # the name trainer_core.cli calls every recipe by
