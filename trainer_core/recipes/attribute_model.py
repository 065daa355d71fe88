"""SteerLM's attribute model (Dong et al. 2023): `algorithm: reward` with reward_model.attributes. A score model with
one regression output per named attribute, trained with the squared error (losses.attribute_loss) on sft rows that
carry those attributes as numeric columns (HelpSteer's shape: prompt, response, helpfulness, correctness, ...).

    setup()            backend, score model (its head: one output per attribute), tokenizer, rows, optimizer, schedule
    train()            train.steps optimizer steps: micro-batches, backward, step, report, eval, checkpoint
and at the end the model is exported to OUT/final with the attribute names in its config (`rlplane_attributes`), so
a conditioned SFT run's labeller (sft.attributes.labeller) reads which output is which.

A row is prompt + completion + eos as SFT tokenizes it, scored at its last token (as the pairwise reward model
scores a side). Reported: train/loss (mean squared error over rows and attributes), train/grad_norm; at each
evaluation eval/loss and eval/mae/<name> (each attribute's mean absolute error), and the first held-out rows with
their predicted and true values as samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from rlplane.spec import RunSpec
from trainer_core.backends import MicroStep
from trainer_core.data import DataError, load_examples
from trainer_core.data.tokenize import Example, collate, model_inputs, pad_id, tokenize_counting
from trainer_core.losses import attribute_loss
from trainer_core.models import load_from_spec
from trainer_core.models.attributes import with_attribute_head
from trainer_core.recipes import common, loop, packing, samples, steering
from trainer_core.reporting import Sample
from trainer_core.rollout import rollouts


@dataclass(kw_only=True)
class AttributeRun(common.Run):
    names: list[str]
    train_examples: list[Example]  # input_ids, labels (unused) and "values": one number per name
    eval_examples: list[Example]
    sample_rows: list[dict]  # the first held-out rows as loaded: their text, for samples


def values_of(row: dict, names: list[str], where: str) -> list[float]:
    """A row's attribute values in `names`' order; a DataError naming the row and column where one is not a number."""
    values = []
    for name in names:
        value = row.get(name)
        if not steering.is_value(value):
            got = "missing" if value is None else f"{type(value).__name__} {value!r}"
            raise DataError(
                f"{where}, column {name!r}: an attribute model needs a number for every attribute in "
                f"reward_model.attributes, got {got}; fill the column or remove {name!r} from reward_model.attributes"
            )
        values.append(float(value))
    return values


def _examples(rows: list[dict], names: list[str], tokenizer: Any, max_len: int, split: str) -> tuple[list[Example], int]:
    examples, cut = tokenize_counting(rows, tokenizer, max_len)
    for row, example in zip(rows, examples, strict=True):
        example["values"] = values_of(row, names, steering.row_named(row, split))
    return examples, cut


def setup(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stdout: bool = True) -> AttributeRun:
    seed, options = spec.train.seed, spec.reward_model
    assert options is not None and options.attributes  # reward.run sends only attribute models here
    names = list(options.attributes)
    with common.started(spec, out_dir, stdout) as (backend, reporter):
        model, tokenizer = load_from_spec(spec.model, "score", seed=seed)
        model = with_attribute_head(model, names, seed)
        spec = common.fit_context(spec, model)
        split = load_examples(spec.data, "sft", seed=seed)
        train, cut = _examples(split.train, names, tokenizer, spec.model.max_seq_len, "training")
        common.report_cut(reporter, cut, len(train), "rows are", spec.model.max_seq_len)
        held_out, _ = _examples(split.eval, names, tokenizer, spec.model.max_seq_len, "held-out")
        opt = common.prepare_optimization(spec, backend, model, len(train), resume_from)
    reporter.log(f"attribute model: one output per attribute ({', '.join(names)})")
    return AttributeRun(
        names=names,
        train_examples=train,
        eval_examples=held_out,
        sample_rows=split.eval[: options.samples_to_log],
        **common.run_fields(spec, out_dir, backend, reporter, tokenizer, opt),
    )


def _batch(run: AttributeRun, examples: list[Example]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The collated rows on the device, and their values [B, N]."""
    batch = {k: v.to(run.backend.device) for k, v in collate(examples, pad_id(run.tokenizer)).items()}
    return batch, torch.tensor([e["values"] for e in examples], device=run.backend.device)


def _sums(predicted: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean squared error, and [summed squared error, each attribute's summed absolute error..., rows]."""
    loss, absolute = attribute_loss(predicted, values)
    squared = loss.detach().double() * values.numel()
    rows = torch.tensor([float(len(values))], dtype=torch.float64, device=values.device)
    return loss, torch.cat([squared.reshape(1), absolute.double().sum(0), rows])


def _finish(output: Any, values: torch.Tensor, weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    loss, sums = _sums(output.logits, values)
    return loss * weight, sums


def micro_steps(run: AttributeRun, local: list[Example]) -> list[MicroStep]:
    """This rank's rows of the step as micro-batches (train.micro_batch_size rows or train.micro_batch_tokens tokens
    each), each weighing its share of the rank's rows."""
    sizes = [[len(e["input_ids"])] for e in local]
    steps = []
    for rows, weight in common.weighted_micro_batches(local, packing.micro_batches(sizes, run.spec.train, run.backend)):
        batch, values = _batch(run, rows)
        steps.append(MicroStep(model_inputs(batch), partial(_finish, values=values, weight=weight)))
    return steps


def train_step(run: AttributeRun) -> loop.StepResult:
    """One optimizer step over the next global batch: mean squared error, pre-clip grad norm, input tokens."""
    local = common.local_batch(run, run.train_examples)
    run.model.train()
    totals, grad_norm = common.optimizer_step(run, micro_steps(run, local))
    squared, rows = totals[0], totals[-1]
    values = {"train/loss": squared / (rows * len(run.names)), "train/grad_norm": grad_norm}
    return loop.StepResult(values, sum(len(e["input_ids"]) for e in local) * run.backend.data_world_size)


def _eval_sums(run: AttributeRun, chunk: list[Example]) -> torch.Tensor:
    batch, values = _batch(run, chunk)
    return _sums(run.model(**model_inputs(batch)).logits, values)[1]


def _samples(run: AttributeRun) -> list[Sample]:
    """The first held-out rows with each attribute's predicted and true value (every rank runs the forward)."""
    rows = run.sample_rows[: len(run.eval_examples)]
    if not rows:
        return []
    batch, values = _batch(run, run.eval_examples[: len(rows)])
    predicted = run.model(**model_inputs(batch)).logits.float()
    shown = []
    for i, row in enumerate(rows):
        scores = {name: float(predicted[i, j]) for j, name in enumerate(run.names)}
        scores |= {f"{name}/true": float(values[i, j]) for j, name in enumerate(run.names)}
        prompt = rollouts.prompt_text({"prompt": samples.prompt_of(row)}) if samples.prompt_of(row) else ""
        response = samples.reference_answer(row) or str(row.get("text", ""))
        shown.append(Sample(prompt=prompt, response=response, scores=scores, label="attributes"))
    return shown


def evaluate(run: AttributeRun) -> dict[str, float] | None:
    """eval/loss (mean squared error) and eval/mae/<name> on the held-out rows; None without any."""
    if not run.eval_examples:
        return None
    totals = common.evaluate(run, run.eval_examples, partial(_eval_sums, run), partial(_samples, run))
    rows = totals[-1]
    values = {"eval/loss": totals[0] / (rows * len(run.names))}
    return values | {f"eval/mae/{name}": totals[1 + j] / rows for j, name in enumerate(run.names)}


def train(run: AttributeRun, stop_at: int | None = None) -> None:
    """Train to train.steps (or stop after step `stop_at`, checkpointed, as a preempted run would)."""
    loop.run_loop(run, stop_at, step=train_step, evaluate=evaluate)


def run_attribute_model(
    spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stop_at: int | None = None
) -> AttributeRun:
    """setup, train, export; the reporter and backend are closed whatever happens."""
    return common.drive(setup(spec, out_dir, resume_from), train, stop_at)
