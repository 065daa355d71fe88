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
from trainer_core.backends import MicroStep
from trainer_core.data.pairs import PairExample, load_pairs, pair_batch, pair_tokens
from trainer_core.data.tokenize import model_inputs
from trainer_core.losses import DpoLoss, dpo_loss, token_logprobs
from trainer_core.models import load_from_spec
from trainer_core.recipes import common, loop, packing, samples


@dataclass(kw_only=True)
class DpoRun(common.Run):
    reference: nn.Module  # frozen, eval mode
    train_pairs: list[PairExample]
    eval_pairs: list[PairExample]
    sample_rows: list[dict]  # the first held-out pairs as rows (their text): what evaluations show as samples


def setup(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stdout: bool = True) -> DpoRun:
    seed = spec.train.seed
    with common.started(spec, out_dir, stdout) as (backend, reporter):
        model, tokenizer = load_from_spec(spec.model, "causal", seed=seed)
        spec = common.fit_context(spec, model)
        # Before a checkpoint overwrites the policy; sharded like it under ZeRO-3 and FSDP2.
        reference = common.frozen_reference(spec.dpo.ref_model, model, spec.model, backend, reporter, seed=seed)
        data = load_pairs(spec, tokenizer)
        common.report_cut(reporter, data.train_cut, len(data.train), "pairs have a side", spec.model.max_seq_len)
        opt = common.prepare_optimization(spec, backend, model, len(data.train), resume_from)
        if spec.train.padding_free:
            packing.check_separates(opt.model, backend)
            packing.check_separates(reference, backend)
    if resume_from is not None:
        reporter.log(f"resumed from {resume_from} at step {opt.step} (reference model rebuilt from the spec)")
    return DpoRun(
        reference=reference,
        train_pairs=data.train,
        eval_pairs=data.eval,
        sample_rows=data.eval_rows[: spec.dpo.samples_to_log],
        **common.run_fields(spec, out_dir, backend, reporter, tokenizer, opt),
    )


def _sequence_logps(run: DpoRun, logps: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(chosen | prompt) [B], log π(rejected | prompt) [B]); length-normalised for IPO."""
    summed = logps.sum(dim=-1)
    if run.spec.dpo.loss == "ipo":
        summed = summed / mask.sum(dim=-1).clamp(min=1)
    return summed.chunk(2)


def _reference(run: DpoRun, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference model's (log π_ref(chosen), log π_ref(rejected)) [B] each."""
    with torch.no_grad():
        logits = _logits(run.reference, batch, run.spec.train.padding_free)
        return _sequence_logps(run, *token_logprobs(logits, batch["labels"]))


def _dpo(run: DpoRun, batch: dict[str, torch.Tensor]) -> DpoLoss:
    return _dpo_from_logits(run, _logits(run.model, batch), batch, _reference(run, batch))


def _logits(model: nn.Module, batch: dict[str, torch.Tensor], padding_free: bool = False) -> torch.Tensor:
    return packing.forward(model, model_inputs(batch), padding_free).logits


def _finish(
    output: Any, run: DpoRun, batch: dict[str, torch.Tensor], reference: tuple[torch.Tensor, torch.Tensor], weight: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """A training micro-batch's loss to backpropagate (weighted by its share of the rank's pairs, times the micro-batch
    count the backend divides by) and its sums."""
    out = _dpo_from_logits(run, output.logits, batch, reference)
    return out.loss * weight, pair_sums(out)


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


def pair_sums(out: DpoLoss) -> torch.Tensor:
    """[summed loss, summed chosen reward, summed rejected reward, correct pairs (a tie: 1/2), pairs]."""
    chosen, rejected = out.chosen_rewards.float(), out.rejected_rewards.float()
    correct = (chosen > rejected).sum() + 0.5 * (chosen == rejected).sum()
    values = [out.losses.detach().sum(), chosen.sum(), rejected.sum(), correct, torch.tensor(len(chosen))]
    return torch.stack([v.double().to(chosen.device) for v in values])


def _batch(run: DpoRun, pairs: list[PairExample]) -> dict[str, torch.Tensor]:
    return pair_batch(pairs, run.tokenizer, run.backend.device)


def _eval_sums(run: DpoRun, chunk: list[PairExample]) -> torch.Tensor:
    return pair_sums(_dpo(run, _batch(run, chunk)))


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
    sums = common.evaluate(run, run.eval_pairs, partial(_eval_sums, run), partial(_samples, run))
    loss, chosen, rejected, correct, pairs = sums
    return {"eval/loss": loss / pairs, "eval/accuracy": correct / pairs, "eval/margin": (chosen - rejected) / pairs}


def micro_steps(run: DpoRun, local: list[PairExample]) -> list[MicroStep]:
    """This rank's pairs of the step as micro-batches (train.micro_batch_size pairs or train.micro_batch_tokens tokens
    each, padded or padding-free), each weighing its share of the rank's pairs, with the reference's log-probabilities."""
    train = run.spec.train
    sizes = [[len(p["chosen"]["input_ids"]), len(p["rejected"]["input_ids"])] for p in local]
    steps = []
    for pairs, weight in common.weighted_micro_batches(local, packing.micro_batches(sizes, train, run.backend)):
        batch = _batch(run, pairs)
        # The reference's log-probabilities first, on every rank (a sharded or pipelined reference runs collectively).
        with run.backend.autocast():
            reference = _reference(run, batch)
        finish = partial(_finish, run=run, batch=batch, reference=reference, weight=weight)
        steps.append(packing.micro_step(model_inputs(batch), finish, train.padding_free))
    return steps


def train_step(run: DpoRun) -> loop.StepResult:
    """One optimizer step over the next global batch: loss and rewards/* means, pre-clip grad norm, input tokens."""
    local = common.local_batch(run, run.train_pairs)
    run.model.train()
    sums, grad_norm = common.optimizer_step(run, micro_steps(run, local))
    return loop.StepResult(pair_values(sums, grad_norm), pair_tokens(local) * run.backend.data_world_size)


def pair_values(sums: list[float], grad_norm: float) -> dict[str, float]:
    """A step's numbers from its pair_sums (added over micro-batches and ranks): the loss, the implicit rewards' means
    (rewards/*) and the pre-clip grad norm; SPIN reports the same."""
    loss, chosen, rejected, correct, count = sums
    return {
        "train/loss": loss / count,
        "rewards/chosen": chosen / count,
        "rewards/rejected": rejected / count,
        "rewards/margin": (chosen - rejected) / count,
        "rewards/accuracy": correct / count,
        "train/grad_norm": grad_norm,
    }


def train(run: DpoRun, stop_at: int | None = None) -> None:
    """Train to train.steps (or stop after step `stop_at`, checkpointed, as a preempted run would)."""
    # The policy only is checkpointed: the reference is rebuilt from the spec on resume.
    loop.run_loop(run, stop_at, step=train_step, evaluate=evaluate)


def run_dpo(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stop_at: int | None = None) -> DpoRun:
    """setup, train, export; the reporter and backend are closed whatever happens."""
    return common.drive(setup(spec, out_dir, resume_from), train, stop_at)


run = run_dpo  # the name trainer_core.cli calls every recipe by
