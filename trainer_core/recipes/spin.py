"""Self-Play fIne-tuNing (SPIN; Chen et al. 2024): from an SFT model and its own SFT rows, no preference data.

    setup()            backend, policy, tokenizer, rows, optimizer, schedule (and the resume point, its round included)
    train()            train.steps optimizer steps in spin.iterations rounds of equal length
    begin_round()      at a round's first step: the model answers the round's prompts (the rejected side) and scores
                       both sides of every pair, as the round's opponent and reference
    run_state()        (checkpointing) the policy, optimizer, schedule, data position and the round in progress

A round t takes spin.prompts_per_iteration training rows (all of them by default; a seeded draw per round otherwise),
samples the model's own answer y' to each prompt x with spin.gen, and trains on the pairs (y the data's answer,
chosen; y' the model's, rejected) with the SPIN loss (losses.spin_loss) against the model as the round began: its
log-probabilities of both sides are computed once, at the round's start, so no second copy of the model is kept and
a sharded policy (ZeRO-3, FSDP2, megatron) needs nothing more than DPO does. A checkpoint holds the round's answers
and those numbers, so a run resumed mid-round trains on the very pairs the uninterrupted run would.

Each data rank answers and scores an equal share of the round's prompts (its own draws: run seed, round, data rank),
and every rank then holds all of them. The round's steps cycle over its pairs as DPO's over its data
(train.batch_size pairs a step). spin/answers_equal is the share of the round's answers that already equal the data's
(SPIN's stopping signal: at 1 the model cannot be told from its data). Held-out rows give eval/loss, the data
answers' mean token loss as SFT reports it.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from rlplane.spec import RunSpec, SpinOptions
from trainer_core.backends import MicroStep, rank_chunks
from trainer_core.data import kind_for_algorithm, load_examples
from trainer_core.data.pairs import PairExample, pair_batch, pair_tokens, tokenize_pairs
from trainer_core.data.tokenize import Example, model_inputs, tokenize_rows
from trainer_core.losses import DpoLoss, spin_loss, token_logprobs
from trainer_core.models import load_from_spec
from trainer_core.recipes import checkpointing, common, dpo, loop, packing, samples, sft
from trainer_core.recipes.checkpointing import CheckpointState
from trainer_core.rollout import draws, rollouts


@dataclass
class Round:
    """One self-play iteration's pairs: the data's answer (chosen) against the model's own (rejected), and both sides'
    log-probabilities under the model as the round began (`reference`, [pairs, 2])."""

    index: int  # 0-based; reported 1-based as spin/iteration
    rows: list[dict]  # {"prompt", "chosen", "rejected"}: the pairs as text (samples show them)
    pairs: list[PairExample]
    reference: torch.Tensor  # float32 on the backend's device
    answers_equal: float  # share of rejected answers equal to the chosen ones

    def state(self) -> dict[str, Any]:
        """Plain JSON for the checkpoint: the answers and the reference numbers (floats round-trip exactly)."""
        return {
            "iteration": self.index,
            "answers": [row["rejected"] for row in self.rows],
            "reference": self.reference.cpu().tolist(),
            "answers_equal": self.answers_equal,
        }


@dataclass(kw_only=True)
class SpinRun(common.Run):
    train_rows: list[dict]  # sft rows with a prompt and an answer
    eval_examples: list[Example]  # held-out rows tokenized as sft does: eval/loss
    sample_rows: list[dict]  # the first held-out rows (training rows without any): greedy answers at each evaluation
    round: Round | None = None  # the round in progress

    @property
    def options(self) -> SpinOptions:
        return self.spec.spin or SpinOptions()  # RunSpec fills it in: never the default here


def setup(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stdout: bool = True) -> SpinRun:
    seed, options = spec.train.seed, spec.spin or SpinOptions()
    with common.started(spec, out_dir, stdout) as (backend, reporter):
        model, tokenizer = load_from_spec(spec.model, "causal", seed=seed)
        spec = common.fit_context(spec, model)
        split = load_examples(spec.data, kind_for_algorithm(spec.algorithm), seed=seed)
        rows = [row for row in split.train if samples.prompt_of(row) and samples.reference_answer(row) is not None]
        if not rows:
            raise ValueError("spin needs training rows with a prompt and an answer; the data has none")
        per_round = min(options.prompts_per_iteration or len(rows), len(rows))
        opt = common.prepare_optimization(spec, backend, model, per_round, resume_from)
        if spec.train.padding_free:
            packing.check_separates(opt.model, backend)
    run = SpinRun(
        train_rows=rows,
        eval_examples=tokenize_rows(split.eval, tokenizer, spec.model.max_seq_len),
        sample_rows=(split.eval or split.train)[: options.samples_to_log],
        **common.run_fields(spec, out_dir, backend, reporter, tokenizer, opt),
    )
    if "spin" in opt.extra:
        run.round = restored_round(run, opt.extra["spin"])
    if resume_from is not None:
        reporter.log(f"resumed from {resume_from} at step {opt.step}, iteration {_round_of(run, opt.step) + 1}")
    return run


# --- a round ---


def _steps_per_round(run: SpinRun) -> int:
    return run.spec.train.steps // run.options.iterations  # spin_fits: it divides


def _round_of(run: SpinRun, done: int) -> int:
    """The round that the step after `done` steps belongs to."""
    return min(done // _steps_per_round(run), run.options.iterations - 1)


def round_rows(run: SpinRun, index: int) -> list[dict]:
    """The training rows round `index` answers: all of them, or a draw of prompts_per_iteration seeded by the round."""
    count = run.order.size
    if count == len(run.train_rows):
        return run.train_rows
    chosen = random.Random(f"{run.spec.train.seed}:spin:{index}").sample(range(len(run.train_rows)), count)
    return [run.train_rows[i] for i in chosen]


def _pair_rows(rows: list[dict], answers: list[str]) -> list[dict]:
    return [
        {"prompt": samples.prompt_of(row), "chosen": samples.reference_answer(row), "rejected": answer}
        for row, answer in zip(rows, answers, strict=True)
    ]


def begin_round(run: SpinRun, index: int) -> Round:
    """Round `index`: the model answers its prompts and scores both sides of every pair (eval mode, no gradients)."""
    started = time.perf_counter()
    rows = round_rows(run, index)
    with common.evaluating(run.model, run.backend):
        answers = _answers(run, rows, index)
        pair_rows = _pair_rows(rows, answers)
        pairs = tokenize_pairs(pair_rows, run.tokenizer, run.spec.model.max_seq_len)
        reference = _scores(run, pairs)
    equal = sum(r["rejected"].strip() == str(r["chosen"]).strip() for r in pair_rows) / len(pair_rows)
    run.reporter.log(
        f"spin iteration {index + 1} of {run.options.iterations}: the model answered {len(rows)} prompts "
        f"({equal:.1%} equal to the data's) and scored both sides in {time.perf_counter() - started:.1f} s"
    )
    return Round(index, pair_rows, pairs, reference, equal)


def restored_round(run: SpinRun, state: dict[str, Any]) -> Round:
    """The round a checkpoint was taken in, from its answers and reference numbers."""
    index = int(state["iteration"])
    pair_rows = _pair_rows(round_rows(run, index), [str(a) for a in state["answers"]])
    pairs = tokenize_pairs(pair_rows, run.tokenizer, run.spec.model.max_seq_len)
    reference = torch.tensor(state["reference"], dtype=torch.float32, device=run.backend.device)
    return Round(index, pair_rows, pairs, reference, float(state["answers_equal"]))


def _answers(run: SpinRun, rows: list[dict], index: int) -> list[str]:
    """The model's answer to each row's prompt: each data rank samples its share (seeded by the run, the round and
    the data rank), and the token ids travel to every rank as a sum of tensors that are zero outside each share."""
    backend, gen = run.backend, run.options.gen
    indices = list(range(len(rows)))
    mine = indices[backend.data_rank :: backend.data_world_size]
    prompts = rollouts.encode_prompts(
        [{"prompt": samples.prompt_of(rows[i])} for i in mine or indices[:1]],  # a stand-in joins a sharded forward
        run.tokenizer,
        rollouts.prompt_budget(run.spec, gen),
    )
    with draws.seeded(draws.seed_of(run.spec.train.seed, "spin", index, backend.data_rank)):
        generation = rollouts.generate(backend.unwrap(run.model), prompts, run.tokenizer, gen, backend)
    shifted = torch.zeros(len(rows), gen.max_new_tokens, dtype=torch.float64, device=backend.device)
    if mine:  # ids + 1 where a token was sampled, 0 where none: the sum over ranks is every row's
        ids = (generation.response_ids + 1) * generation.response_mask
        shifted[mine, : ids.shape[1]] = ids.to(shifted)
    every = backend.all_reduce(shifted, "sum").long().cpu()
    return [run.tokenizer.decode((row[row > 0] - 1).tolist(), skip_special_tokens=True) for row in every]


def _scores(run: SpinRun, pairs: list[PairExample]) -> torch.Tensor:
    """[pairs, 2]: log π(chosen), log π(rejected) under the model as it is, each rank scoring its share."""
    backend = run.backend
    scores = torch.zeros(len(pairs), 2, dtype=torch.float64, device=backend.device)
    for chunk, real in rank_chunks(list(range(len(pairs))), run.spec.micro_batch_size, backend):
        batch = pair_batch([pairs[i] for i in chunk], run.tokenizer, backend.device)
        logits = packing.forward(run.model, model_inputs(batch), run.spec.train.padding_free).logits
        chosen, rejected = _sequence_logps(logits, batch)
        if real:
            scores[chunk] = torch.stack([chosen, rejected], dim=1).double()
    return backend.all_reduce(scores, "sum").float()


def _sequence_logps(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(chosen | prompt) [B], log π(rejected | prompt) [B]) of a pair batch's logits."""
    logps, _ = token_logprobs(logits, batch["labels"])
    return logps.sum(dim=-1).chunk(2)


# --- training ---


def _spin(run: SpinRun, logits: torch.Tensor, batch: dict[str, torch.Tensor], reference: torch.Tensor) -> DpoLoss:
    chosen, rejected = _sequence_logps(logits, batch)
    return spin_loss(chosen, rejected, reference[:, 0], reference[:, 1], run.options.beta)


def _finish(
    output: Any, run: SpinRun, batch: dict[str, torch.Tensor], reference: torch.Tensor, weight: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """A micro-batch's loss to backpropagate (weighted by its share of the rank's pairs, times the micro-batch count
    the backend divides by) and its sums."""
    out = _spin(run, output.logits, batch, reference)
    return out.loss * weight, dpo.pair_sums(out)


def micro_steps(run: SpinRun, local: list[int]) -> list[MicroStep]:
    """This rank's pairs of the step (indices into the round) as micro-batches, padded or padding-free, each with
    the round's reference numbers of its pairs."""
    train, current = run.spec.train, run.round
    assert current is not None
    pairs = [current.pairs[i] for i in local]
    sizes = [[len(p["chosen"]["input_ids"]), len(p["rejected"]["input_ids"])] for p in pairs]
    steps = []
    for chosen, weight in common.weighted_micro_batches(local, packing.micro_batches(sizes, train, run.backend)):
        batch = pair_batch([current.pairs[i] for i in chosen], run.tokenizer, run.backend.device)
        finish = partial(_finish, run=run, batch=batch, reference=current.reference[chosen], weight=weight)
        steps.append(packing.micro_step(model_inputs(batch), finish, train.padding_free))
    return steps


def train_step(run: SpinRun) -> loop.StepResult:
    """One optimizer step over the next global batch of the round's pairs (a round begins first where due): DPO's
    numbers, spin/iteration and spin/answers_equal."""
    index = _round_of(run, run.step)
    if run.round is None or run.round.index != index:
        run.round = begin_round(run, index)
    local = common.local_batch(run, range(len(run.round.pairs)))
    run.model.train()
    sums, grad_norm = common.optimizer_step(run, micro_steps(run, local))
    values = dpo.pair_values(sums, grad_norm)
    values |= {"spin/iteration": float(index + 1), "spin/answers_equal": run.round.answers_equal}
    tokens = pair_tokens([run.round.pairs[i] for i in local]) * run.backend.data_world_size
    return loop.StepResult(values, tokens)


# --- evaluation ---


def _samples(run: SpinRun) -> list:
    """The round's first pairs with their implicit rewards now, and the greedy answers to the first held-out prompts
    beside the data's (every rank runs the forwards and the generation: collectives under sharding)."""
    shown = []
    count = min(run.options.samples_to_log, len(run.round.pairs)) if run.round is not None else 0
    if run.round is not None and count:
        batch = pair_batch(run.round.pairs[:count], run.tokenizer, run.backend.device)
        out = _spin(run, run.model(**model_inputs(batch)).logits, batch, run.round.reference[:count])
        rewards = (out.chosen_rewards.tolist(), out.rejected_rewards.tolist())
        shown += samples.pair_samples(run.round.rows[:count], *rewards, "implicit_reward")
    gen = run.options.gen
    return shown + samples.generations(run, run.backend.unwrap(run.model), run.sample_rows, gen.max_new_tokens)


def evaluate(run: SpinRun) -> dict[str, float] | None:
    """eval/loss (the held-out answers' mean token loss) and, as samples, the round's pairs and held-out answers."""
    with common.evaluating(run.model, run.backend):
        made = _samples(run)
    if run.backend.is_rank_zero and made:
        run.reporter.samples(run.step, made)
    loss = sft.evaluate(run)  # (it reads the run's model and eval_examples, as an SftRun's)
    return None if loss is None else {"eval/loss": loss}


def run_state(run: SpinRun) -> CheckpointState:
    """The policy, optimizer, schedule and data position, and the round in progress (its answers and numbers)."""
    return checkpointing.run_state(run, extra={"spin": run.round.state()} if run.round is not None else None)


def train(run: SpinRun, stop_at: int | None = None) -> None:
    """Train to train.steps (or stop after step `stop_at`, checkpointed, as a preempted run would)."""
    loop.run_loop(run, stop_at, step=train_step, evaluate=evaluate, checkpoint_state=run_state)


def run_spin(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stop_at: int | None = None) -> SpinRun:
    """setup, train, export; the reporter and backend are closed whatever happens."""
    return common.drive(setup(spec, out_dir, resume_from), train, stop_at)


run = run_spin  # the name trainer_core.cli calls every recipe by
