"""Direct Preference Optimization: train the policy to prefer each pair's chosen completion over the
rejected one relative to a frozen reference model (dpo.beta, dpo.loss, dpo.label_smoothing).

    setup()            backend, policy, reference, tokenizer, pairs, optimizer, schedule (and the resume point)
    train()            train.steps optimizer steps: micro-batches, backward, step, report, eval, checkpoint
    run_state()        (checkpointing) what a checkpoint holds: under OUT/checkpoints/step-N (rotated to keep_last)
and at the end the policy is exported to OUT/final as a plain Hugging Face directory.

The reference is dpo.ref_model or, by default, a copy of the policy as model.path loads it. It is
never trained and never checkpointed: a resumed run rebuilds it from the spec (builtin models
from train.seed), which gives the same weights, so resuming stays exact.

Log-probabilities are summed over the completion's tokens (eos included; prompt and padding are
masked), and length-normalised for dpo.loss=ipo. train.batch_size counts pairs; a step's loss
is the mean over the global batch's pairs. The implicit reward is β·log π(y|x)/π_ref(y|x); its
accuracy counts a tie as one half, so step 0 (policy == reference, every reward 0) reads chance.
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
from trainer_core.losses import DpoLoss, dpo_loss, token_logprobs
from trainer_core.models import load_from_spec
from trainer_core.recipes import common, loop, samples
from trainer_core.recipes.pairs import PairExample, collate_pairs, pair_tokens, tokenize_pairs
from trainer_core.recipes.tokenize import pad_id
from trainer_core.reporting import Reporter, make_reporter


@dataclass
class DpoRun:
    spec: RunSpec
    out_dir: Path
    backend: Backend
    reporter: Reporter
    model: nn.Module  # the policy
    reference: nn.Module  # frozen, eval mode
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    train_pairs: list[PairExample]
    eval_pairs: list[PairExample]
    sample_rows: list[dict]  # the first held-out pairs as rows (their text): what evaluations show as samples
    order: common.BatchOrder
    step: int = 0  # optimizer steps done


def setup(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stdout: bool = True) -> DpoRun:
    train = spec.train
    backend = make_backend(spec.backend, train)  # seeds torch/python with train.seed + rank
    reporter = make_reporter(out_dir, rank=backend.rank, stdout=stdout)
    with common.closed_on_failure(backend, reporter):
        model, tokenizer = load_from_spec(spec.model, "causal", seed=train.seed)
        spec = common.fit_context(spec, model)
        # Before a checkpoint overwrites the policy; sharded like it under ZeRO-3 and FSDP2.
        reference = common.frozen_reference(spec.dpo.ref_model, model, spec.model, backend, reporter, seed=train.seed)
        split = load_examples(spec.data, kind_for_algorithm(spec.algorithm), seed=train.seed)
        train_pairs = tokenize_pairs(split.train, tokenizer, spec.model.max_seq_len)
        eval_pairs = tokenize_pairs(split.eval, tokenizer, spec.model.max_seq_len)
        opt = common.prepare_optimization(spec, backend, model, len(train_pairs), resume_from)
    if resume_from is not None:
        reporter.log(f"resumed from {resume_from} at step {opt.step} (reference model rebuilt from the spec)")
    return DpoRun(
        spec,
        out_dir,
        backend,
        reporter,
        opt.model,
        reference,
        tokenizer,
        opt.optimizer,
        opt.scheduler,
        train_pairs,
        eval_pairs,
        split.eval[: spec.dpo.samples_to_log],
        opt.order,
        opt.step,
    )


def _token_logps(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities of the 2B rows' labels and their mask (see `token_logprobs`)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return token_logprobs(logits, batch["labels"])


def _sequence_logps(run: DpoRun, logps: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(chosen | prompt) [B], log π(rejected | prompt) [B]); length-normalised for IPO."""
    summed = logps.sum(dim=-1)
    if run.spec.dpo.loss == "ipo":
        summed = summed / mask.sum(dim=-1).clamp(min=1)
    return summed.chunk(2)


def _reference(run: DpoRun, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference model's (log π_ref(chosen), log π_ref(rejected)) [B] each."""
    with torch.no_grad():
        return _sequence_logps(run, *_token_logps(run.reference, batch))


def _dpo(run: DpoRun, batch: dict[str, torch.Tensor]) -> DpoLoss:
    return _dpo_from_logits(run, _logits(run.model, batch), batch, _reference(run, batch))


def _logits(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(**_inputs(batch)).logits


def _inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


def _finish(
    output: Any, run: DpoRun, batch: dict[str, torch.Tensor], reference: tuple[torch.Tensor, torch.Tensor], weight: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """A training micro-batch's loss to backpropagate (weighted by its share of the rank's pairs, times the micro-batch
    count the backend divides by) and its sums."""
    out = _dpo_from_logits(run, output.logits, batch, reference)
    return out.loss * weight, _sums(out)


def _dpo_from_logits(
    run: DpoRun, logits: torch.Tensor, batch: dict[str, torch.Tensor], reference: tuple[torch.Tensor, torch.Tensor]
) -> DpoLoss:
    options = run.spec.dpo
    logps, mask = token_logprobs(logits, batch["labels"])
    policy_chosen, policy_rejected = _sequence_logps(run, logps, mask)
    ref_chosen, ref_rejected = reference
    chosen_nll = None
    if options.nll_weight > 0:
        chosen_logps, chosen_mask = logps.chunk(2)[0], mask.chunk(2)[0]
        chosen_nll = -chosen_logps.sum(dim=-1) / chosen_mask.sum(dim=-1).clamp(min=1)
    return dpo_loss(
        policy_chosen,
        policy_rejected,
        ref_chosen,
        ref_rejected,
        options.beta,
        options.loss,
        options.label_smoothing,
        chosen_nll=chosen_nll,
        nll_weight=options.nll_weight,
    )


def _sums(out: DpoLoss) -> torch.Tensor:
    """[summed loss, summed chosen reward, summed rejected reward, correct pairs (a tie: 1/2), pairs]."""
    chosen, rejected = out.chosen_rewards.float(), out.rejected_rewards.float()
    correct = (chosen > rejected).sum() + 0.5 * (chosen == rejected).sum()
    values = [out.losses.detach().sum(), chosen.sum(), rejected.sum(), correct, torch.tensor(len(chosen))]
    return torch.stack([v.double().to(chosen.device) for v in values])


def _batch(run: DpoRun, pairs: list[PairExample]) -> dict[str, torch.Tensor]:
    return {k: v.to(run.backend.device) for k, v in collate_pairs(pairs, pad_id(run.tokenizer)).items()}


def _samples(run: DpoRun) -> list:
    """The first held-out pairs with their implicit rewards, and the policy's greedy answers to their prompts (every
    rank runs the forwards and the generation: collectives under sharding)."""
    count = min(len(run.sample_rows), len(run.eval_pairs))
    if not count:
        return []
    out = _dpo(run, _batch(run, run.eval_pairs[:count]))
    rows = run.sample_rows[:count]
    pairs = samples.pair_samples(rows, out.chosen_rewards.tolist(), out.rejected_rewards.tolist(), "implicit_reward")
    policy = run.backend.unwrap(run.model)
    return pairs + samples.generations(run, policy, rows, run.spec.dpo.sample_tokens)


def evaluate(run: DpoRun) -> dict[str, float] | None:
    """eval/loss, eval/accuracy (implicit reward ranks chosen first) and eval/margin on held-out pairs."""
    if not run.eval_pairs:
        return None
    backend, model = run.backend, run.model
    totals = torch.zeros(5, dtype=torch.float64, device=backend.device)
    was_training = model.training
    model.eval()
    with torch.no_grad(), backend.autocast():
        for chunk, real in common.rank_chunks(run.eval_pairs, run.spec.micro_batch_size, backend):
            sums = _sums(_dpo(run, _batch(run, chunk)))
            totals += sums if real else 0
        shown = _samples(run)
    model.train(was_training)
    if backend.is_rank_zero and shown:
        run.reporter.samples(run.step, shown)
    loss, chosen, rejected, correct, pairs = backend.all_reduce(totals, "sum").tolist()
    return {"eval/loss": loss / pairs, "eval/accuracy": correct / pairs, "eval/margin": (chosen - rejected) / pairs}


def train_step(run: DpoRun) -> loop.StepResult:
    """One optimizer step over the next global batch: loss and rewards/* means, pre-clip grad norm, input tokens."""
    backend, spec = run.backend, run.spec
    indices = run.order.next_batch()
    local = [run.train_pairs[indices[i]] for i in local_batch_range(len(indices), backend.data_rank, backend.data_world_size)]
    micro = micro_batch_ranges(range(len(local)), spec.train.micro_batch_size)
    run.model.train()
    steps = []
    for piece in micro:
        pairs = local[piece.start : piece.stop]
        batch = _batch(run, pairs)
        # The reference's log-probabilities first, on every rank (a sharded or pipelined reference runs collectively).
        with backend.autocast():
            reference = _reference(run, batch)
        # Weighted by the micro-batch's share of the rank's pairs; the backend divides by len(micro).
        weight = len(pairs) / len(local) * len(micro)
        steps.append(MicroStep(_inputs(batch), partial(_finish, run=run, batch=batch, reference=reference, weight=weight)))
    totals = backend.forward_backward(run.model, steps).to(device=backend.device, dtype=torch.float64)
    grad_norm = backend.step()
    run.step += 1
    loss, chosen, rejected, correct, count = backend.all_reduce(totals, "sum").tolist()
    values = {
        "train/loss": loss / count,
        "rewards/chosen": chosen / count,
        "rewards/rejected": rejected / count,
        "rewards/margin": (chosen - rejected) / count,
        "rewards/accuracy": correct / count,
        "train/grad_norm": grad_norm,
    }
    return loop.StepResult(values, pair_tokens(local) * backend.data_world_size)


def train(run: DpoRun, stop_at: int | None = None) -> None:
    """Train to train.steps (or stop after step `stop_at`, checkpointed, as a preempted run would)."""
    # The policy only is checkpointed: the reference is rebuilt from the spec on resume.
    loop.run_loop(run, stop_at, step=train_step, evaluate=evaluate)


def run_dpo(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stop_at: int | None = None) -> DpoRun:
    """setup, train, export; the reporter and backend are closed whatever happens."""
    return common.drive(setup(spec, out_dir, resume_from), train, stop_at)


run = run_dpo  # the name trainer_core.cli calls every recipe by
