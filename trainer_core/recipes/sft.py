"""Supervised fine-tuning: maximise log p(completion | prompt) over the spec's sft rows (with sft.attributes, SteerLM's
attribute-conditioned SFT: each prompt carries its row's attribute values, steering.py).

    setup()            backend, model, tokenizer, data, optimizer, schedule (and the resume point)
    train()            train.steps optimizer steps: micro-batches, backward, step, report, eval, checkpoint
    run_state()        (checkpointing) what a checkpoint holds: under OUT/checkpoints/step-N (rotated to keep_last)
and at the end the model is exported to OUT/final as a plain Hugging Face directory.

A step's loss is the token-weighted mean over the global batch: each micro-batch contributes its
summed token loss divided by the rank's token count (times the accumulation steps, which the
backend divides out again).
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
from trainer_core.data import kind_for_algorithm, load_examples
from trainer_core.data.tokenize import Example, collate, model_inputs, pack, pad_id, tokenize_counting, tokenize_rows
from trainer_core.losses import IGNORE_INDEX, sft_loss
from trainer_core.models import load_from_spec
from trainer_core.recipes import common, loop, packing, samples, steering


@dataclass(kw_only=True)
class SftRun(common.Run):
    train_examples: list[Example]
    eval_examples: list[Example]
    sample_rows: list[dict]  # the first held-out rows (training rows without any): answered at each evaluation


def setup(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stdout: bool = True) -> SftRun:
    with common.started(spec, out_dir, stdout) as (backend, reporter):
        model, tokenizer = load_from_spec(spec.model, "causal", seed=spec.train.seed)
        spec = common.fit_context(spec, model)
        split = load_examples(spec.data, kind_for_algorithm(spec.algorithm), seed=spec.train.seed)
        train_rows, eval_rows = split.train, split.eval
        if spec.sft.attributes is not None:  # SteerLM: each prompt carries its row's attribute values
            train_rows, eval_rows = steering.conditioned(
                [train_rows, eval_rows],
                spec.sft.attributes,
                seed=spec.train.seed,
                batch_size=spec.micro_batch_size,
                reporter=reporter,
            )
        max_len, on_prompt = spec.model.max_seq_len, spec.sft.loss_on_prompt
        train_examples, cut = tokenize_counting(train_rows, tokenizer, max_len, on_prompt)
        common.report_cut(reporter, cut, len(train_rows), "rows are", max_len)
        eval_examples = tokenize_rows(eval_rows, tokenizer, max_len, on_prompt)
        if spec.sft.packing:
            train_examples, eval_examples = pack(train_examples, max_len), pack(eval_examples, max_len)
        opt = common.prepare_optimization(spec, backend, model, len(train_examples), resume_from)
        if spec.train.padding_free:
            packing.check_separates(opt.model, backend)
    if resume_from is not None:
        reporter.log(f"resumed from {resume_from} at step {opt.step}")
    return SftRun(
        train_examples=train_examples,
        eval_examples=eval_examples,
        sample_rows=(eval_rows or train_rows)[: spec.sft.samples_to_log],
        **common.run_fields(spec, out_dir, backend, reporter, tokenizer, opt),
    )


def _loss_sum(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return sft_loss(logits, batch["labels"], reduction="sum")


def _finish(output: Any, labels: torch.Tensor, scale: int, loss_tokens: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A micro-batch's loss to backpropagate (its token-loss sum over the global batch's loss tokens, times the
    micro-batch count the backend divides by) and its [loss sum, loss tokens]."""
    loss_sum, tokens = sft_loss(output.logits, labels, reduction="sum")
    return loss_sum / loss_tokens * scale, torch.stack([loss_sum.detach().double(), tokens.double()])


def _eval_sums(run: SftRun, chunk: list[Example]) -> torch.Tensor:
    """[summed token loss, loss tokens] of a chunk of held-out examples."""
    batch = {k: v.to(run.backend.device) for k, v in collate(chunk, pad_id(run.tokenizer)).items()}
    return torch.stack([x.double() for x in _loss_sum(run.model, batch)])


def evaluate(run: SftRun) -> float | None:
    """Mean token loss on the held-out rows (prompt tokens masked as in training); None without eval rows."""
    if not run.eval_examples:
        return None
    loss_sum, tokens = common.evaluate(run, run.eval_examples, partial(_eval_sums, run))
    return loss_sum / tokens if tokens else float("nan")


def micro_steps(run: SftRun, local: list[Example]) -> list[MicroStep]:
    """This rank's examples of the step as micro-batches (train.micro_batch_size examples or train.micro_batch_tokens
    tokens each, padded or padding-free), each weighing its tokens' share of the global batch's loss tokens."""
    backend, train = run.backend, run.spec.train
    groups = packing.micro_batches([[len(e["input_ids"])] for e in local], train, backend)
    # Tokens that carry loss (labels[1:] not masked) in the GLOBAL batch, so every token weighs the same
    # on 1 or N ranks: each rank divides by the global count, times the data-parallel size since DDP averages gradients.
    mine = sum(sum(label != IGNORE_INDEX for label in e["labels"][1:]) for e in local)
    global_tokens = float(backend.all_reduce(torch.tensor([float(mine)], dtype=torch.float64), "sum")[0])
    loss_tokens = max(1.0, global_tokens) / backend.data_world_size
    steps = []
    for group in groups:
        batch = {k: v.to(backend.device) for k, v in collate([local[i] for i in group], pad_id(run.tokenizer)).items()}
        finish = partial(_finish, labels=batch["labels"], scale=len(groups), loss_tokens=loss_tokens)
        steps.append(packing.micro_step(model_inputs(batch), finish, train.padding_free))
    return steps


def train_step(run: SftRun) -> loop.StepResult:
    """One optimizer step over the next global batch: mean token loss, pre-clip grad norm, input tokens."""
    local = common.local_batch(run, run.train_examples)
    run.model.train()
    (loss_sum, tokens), grad_norm = common.optimizer_step(run, micro_steps(run, local))
    input_tokens = sum(len(e["input_ids"]) for e in local) * run.backend.data_world_size
    return loop.StepResult({"train/loss": loss_sum / max(tokens, 1.0), "train/grad_norm": grad_norm}, input_tokens)


def train(run: SftRun, stop_at: int | None = None) -> None:
    """Train to train.steps (or stop after step `stop_at`, checkpointed, as a preempted run would)."""
    loop.run_loop(run, stop_at, step=train_step, evaluate=_eval_metrics)


def _eval_metrics(run: SftRun) -> dict[str, float] | None:
    """eval/loss, and the model's answers to the first held-out prompts as this evaluation's samples."""
    loss = evaluate(run)
    shown = samples.generations(run, run.backend.unwrap(run.model), run.sample_rows, run.spec.sft.sample_tokens)
    if run.backend.is_rank_zero and shown:
        run.reporter.samples(run.step, shown)
    return None if loss is None else {"eval/loss": loss}


def run_sft(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stop_at: int | None = None) -> SftRun:
    """setup, train, export; the reporter and backend are closed whatever happens."""
    return common.drive(setup(spec, out_dir, resume_from), train, stop_at)


run = run_sft  # the name trainer_core.cli calls every recipe by
