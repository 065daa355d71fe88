"""Reward model: a one-output sequence-classification model trained on preference pairs so that
r(prompt, chosen) > r(prompt, rejected), with the Bradley-Terry loss (and reward_model.margin).

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
from trainer_core.backends import Backend, MicroStep, local_batch_range, make_backend, micro_batch_ranges
from trainer_core.data import kind_for_algorithm, load_examples
from trainer_core.losses import bradley_terry_loss
from trainer_core.models import load_from_spec
from trainer_core.recipes import common, loop, samples
from trainer_core.recipes.pairs import PairExample, collate_pairs, pair_tokens, tokenize_pairs
from trainer_core.recipes.tokenize import pad_id
from trainer_core.reporting import Reporter, make_reporter


@dataclass
class RewardRun:
    spec: RunSpec
    out_dir: Path
    backend: Backend
    reporter: Reporter
    model: nn.Module
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    train_pairs: list[PairExample]
    eval_pairs: list[PairExample]
    sample_rows: list[dict]  # the first held-out pairs as rows (their text): what evaluations show as samples
    order: common.BatchOrder
    step: int = 0  # optimizer steps done


def setup(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stdout: bool = True) -> RewardRun:
    train = spec.train
    backend = make_backend(spec.backend, train)  # seeds torch/python with train.seed + rank
    reporter = make_reporter(out_dir, rank=backend.rank, stdout=stdout)
    with common.closed_on_failure(backend, reporter):
        model, tokenizer = load_from_spec(spec.model, "score", seed=train.seed)
        spec = common.fit_context(spec, model)
        split = load_examples(spec.data, kind_for_algorithm(spec.algorithm), seed=train.seed)
        train_pairs = tokenize_pairs(split.train, tokenizer, spec.model.max_seq_len)
        eval_pairs = tokenize_pairs(split.eval, tokenizer, spec.model.max_seq_len)
        opt = common.prepare_optimization(spec, backend, model, len(train_pairs), resume_from)
    if resume_from is not None:
        reporter.log(f"resumed from {resume_from} at step {opt.step}")
    return RewardRun(
        spec,
        out_dir,
        backend,
        reporter,
        opt.model,
        tokenizer,
        opt.optimizer,
        opt.scheduler,
        train_pairs,
        eval_pairs,
        split.eval[: spec.reward_model.samples_to_log],
        opt.order,
        opt.step,
    )


def _rewards(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen rewards [B], rejected rewards [B]) from one forward pass over the 2B collated rows."""
    return _chosen_rejected(model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits)


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


def evaluate(run: RewardRun) -> dict[str, float] | None:
    """eval/loss, eval/accuracy (chosen scored above rejected) and eval/margin on held-out pairs; None without any."""
    if not run.eval_pairs:
        return None
    backend, model = run.backend, run.model
    totals = torch.zeros(4, dtype=torch.float64, device=backend.device)
    was_training = model.training
    model.eval()
    with torch.no_grad(), backend.autocast():
        for chunk, real in common.rank_chunks(run.eval_pairs, run.spec.micro_batch_size, backend):
            batch = {k: v.to(backend.device) for k, v in collate_pairs(chunk, pad_id(run.tokenizer)).items()}
            sums = _sums(run, *_rewards(model, batch)).to(backend.device)
            totals += sums if real else 0
        if count := min(len(run.sample_rows), len(run.eval_pairs)):
            # The first held-out pairs with their scores, as this evaluation's samples (every rank: a collective).
            batch = {k: v.to(backend.device) for k, v in collate_pairs(run.eval_pairs[:count], pad_id(run.tokenizer)).items()}
            chosen, rejected = _rewards(model, batch)
            if backend.is_rank_zero:
                shown = samples.pair_samples(run.sample_rows[:count], chosen.tolist(), rejected.tolist(), "score")
                run.reporter.samples(run.step, shown)
    model.train(was_training)
    loss, correct, margin, pairs = backend.all_reduce(totals, "sum").tolist()
    return {"eval/loss": loss / pairs, "eval/accuracy": correct / pairs, "eval/margin": margin / pairs}


def train_step(run: RewardRun) -> loop.StepResult:
    """One optimizer step over the next global batch: mean loss, accuracy, pre-clip grad norm, input tokens."""
    backend, spec = run.backend, run.spec
    indices = run.order.next_batch()
    local = [run.train_pairs[indices[i]] for i in local_batch_range(len(indices), backend.data_rank, backend.data_world_size)]
    micro = micro_batch_ranges(range(len(local)), spec.train.micro_batch_size)
    run.model.train()
    steps = []
    for piece in micro:
        pairs = local[piece.start : piece.stop]
        batch = {k: v.to(backend.device) for k, v in collate_pairs(pairs, pad_id(run.tokenizer)).items()}
        # Weighted by the micro-batch's share of the rank's pairs; the backend divides by len(micro).
        weight = len(pairs) / len(local) * len(micro)
        inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        steps.append(MicroStep(inputs, partial(_finish, run=run, weight=weight)))
    totals = backend.forward_backward(run.model, steps).to(device=backend.device, dtype=torch.float64)
    grad_norm = backend.step()
    run.step += 1
    loss_sum, correct, _, count = backend.all_reduce(totals, "sum").tolist()
    values = {"train/loss": loss_sum / count, "train/accuracy": correct / count, "train/grad_norm": grad_norm}
    return loop.StepResult(values, pair_tokens(local) * backend.data_world_size)


def train(run: RewardRun, stop_at: int | None = None) -> None:
    """Train to train.steps (or stop after step `stop_at`, checkpointed, as a preempted run would)."""
    loop.run_loop(run, stop_at, step=train_step, evaluate=evaluate)


def run_reward(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stop_at: int | None = None) -> RewardRun:
    """setup, train, export; the reporter and backend are closed whatever happens."""
    return common.drive(setup(spec, out_dir, resume_from), train, stop_at)


run = run_reward  # the name trainer_core.cli calls every recipe by
