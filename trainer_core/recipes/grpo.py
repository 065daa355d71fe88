"""GRPO (Shao et al. 2024; as NeMo RL and TRL run it): a group of responses per prompt, no critic.

    setup()     backend, policy, frozen reference (when grpo.beta > 0), reward source, prompts, optimizer
    train()     train.steps steps, each:
                  sample grpo.group_size responses to each of train.batch_size / group_size prompts,
                  score them (spec.reward), advantage = (reward - group baseline) / group std
                  (grpo.baseline: the group mean, or rloo: the mean of the others),
                  grpo.epochs passes of one update over all responses: clipped surrogate + β·KL
                  to the reference (grpo.kl_estimator), averaged per response then over responses
                eval and checkpoints when due
and the policy is exported to OUT/final as a plain Hugging Face model.

train.batch_size counts responses. With one epoch the policy that sampled is the policy being
updated, so the ratio is 1 and its log-probabilities come from the update's own forward (no
separate pass, as TRL and NeMo RL do); with more epochs they are computed once after sampling.
A checkpoint holds the policy, optimizer, schedule, RNG, prompt position and the reward
normaliser; the reference is rebuilt from the spec.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlplane.spec import RunSpec
from trainer_core.backends import MicroStep
from trainer_core.data import load_examples
from trainer_core.data.tokenize import pad_id
from trainer_core.environments import Environment
from trainer_core.losses.policy import (
    entropy_from_logits,
    group_advantages,
    grpo_loss,
    kl_penalty,
    masked_mean,
    overlong_penalty,
    response_logprobs,
    sequence_kl,
)
from trainer_core.models import load_from_spec
from trainer_core.recipes import checkpointing, common, loop, online, packing, samples
from trainer_core.rewards import Reward
from trainer_core.rollout import draws, engines, overlap, rollouts
from trainer_core.rollout.episodes import error_summary, markers_of, sample_extra, sample_turns, step_stats
from trainer_core.rollout.episodes import evaluate as evaluate_episodes


@dataclass(kw_only=True)
class GrpoRun(common.Run):  # model: the policy, wrapped by the backend; order: over prompts, batch_size / group_size a step
    reference: nn.Module | None  # frozen; None when beta is 0
    reward: Reward | None  # None with an environment: it rewards the episodes
    environment: Environment | None  # grpo.environment
    train_rows: list[dict]
    eval_rows: list[dict]
    overlap: overlap.Overlap | None = None  # grpo.max_staleness > 0: the generator beside the trainer (start_overlap)
    dropped_groups: int = 0  # restored from the checkpoint: groups an earlier attempt dropped as too stale

    @property
    def policy(self) -> nn.Module:
        return self.backend.unwrap(self.model)


def setup(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stdout: bool = True) -> GrpoRun:
    options, seed = spec.grpo, spec.train.seed
    with common.started(spec, out_dir, stdout) as (backend, reporter):
        policy, tokenizer = load_from_spec(spec.model, "causal", seed=seed)
        spec = common.fit_context(spec, policy)
        reference = None
        if options.beta > 0:
            reference = common.frozen_reference(options.ref_model, policy, spec.model, backend, reporter, seed=seed)
        split = load_examples(spec.data, "prompts", seed=seed)
        reward, environment = online.reward_or_environment(spec, options.environment, "grpo", backend, reporter, tokenizer)
        prompts_per_step = spec.train.batch_size // options.group_size
        opt = common.prepare_optimization(
            spec, backend, policy, len(split.train), resume_from, batch_size=prompts_per_step, schedule_per_step=True
        )
        if spec.train.padding_free:
            for model in (opt.model, reference):
                if model is not None:
                    packing.check_separates(model, backend)
        dropped = 0
        if resume_from is not None:
            if reward is not None:
                reward.load_state_dict(opt.extra["reward"])
            dropped = int(opt.extra.get("async", {}).get("dropped_groups", 0))
            overlap.cut_ledger(out_dir, opt.step)
            reporter.log(f"resumed from {resume_from} at step {opt.step} (reference model rebuilt from the spec)")
    return GrpoRun(
        reference=reference,
        reward=reward,
        environment=environment,
        train_rows=split.train,
        eval_rows=split.eval,
        dropped_groups=dropped,
        **common.run_fields(spec, out_dir, backend, reporter, tokenizer, opt),
    )


@dataclass
class Groups:
    generation: rollouts.Generation
    advantages: torch.Tensor  # [N]
    old_logprobs: torch.Tensor | None  # [N, R]; None: the update's own (one epoch)
    ref_logprobs: torch.Tensor | None  # [N, R]; None without a KL term in the loss
    stats: dict[str, float]  # this rank's sums
    token_normalizer: float  # grpo.loss dapo: the step's response tokens over all ranks, per data-parallel rank
    lowest: dict[str, torch.Tensor]  # what the step reports as its minimum (and highest its maximum), this rank's
    highest: dict[str, torch.Tensor]
    mismatch: list[torch.Tensor]  # engines.mismatch_sums of the sampling policy's log-probs against the engine's
    overlap_stats: dict[str, float] = dataclasses.field(default_factory=dict)  # async/*: how the batch reached the trainer


def _logprobs(model: nn.Module, generation: rollouts.Generation, padding_free: bool) -> tuple[torch.Tensor, torch.Tensor]:
    logits = packing.forward(model, generation.inputs(), padding_free).logits
    p = generation.prompt_width
    return response_logprobs(logits, generation.input_ids, p), logits[:, p - 1 : -1]


@torch.no_grad()
def sample(run: GrpoRun) -> Groups:
    """group_size scored responses to each of this rank's prompts of the next global batch: sampled now, or, with
    the generator of grpo.max_staleness, the next batch it made."""
    backend, options = run.backend, run.spec.grpo
    overlap_stats: dict[str, float] = {}
    if run.overlap is None:
        with draws.seeded(batch_seed(run, run.step + 1)):
            scored, own = _rollouts(run)
    else:
        (scored, own), overlap_stats = _taken(run)
    generation, scores = scored.generation, scored.scores
    rewards = torch.tensor(scores.total, dtype=torch.float32, device=backend.device)
    lengths = generation.response_mask.sum(1)
    kl_in_reward = options.kl_in == "reward" and run.reference is not None
    old = ref = None
    packed = run.spec.train.padding_free
    with backend.autocast():
        if options.epochs > 1 or kl_in_reward:
            old = _logprobs(run.model, generation, packed)[0]  # the prepared model: a sharded one scores from its shards
        if run.reference is not None:
            ref = _logprobs(run.reference, generation, packed)[0]
    if run.environment is None:
        own["gen/truncated"] = float((lengths >= options.gen.max_new_tokens).sum())
    else:
        own |= step_stats(scored)  # env/*, and gen/truncated: the episodes the limits cut off
        if (errors := error_summary(scored)) and backend.is_rank_zero:
            run.reporter.log(f"step={run.step + 1} {errors}")
    shaped = rewards  # what the advantages are computed from; reward/* report the reward source's own
    if options.overlong_buffer is not None:
        penalty = overlong_penalty(lengths, options.gen.max_new_tokens, options.overlong_buffer)
        shaped, own["grpo/overlong_penalty"] = shaped + penalty, float(penalty.sum())
    if kl_in_reward:
        kl = sequence_kl(old.float(), ref.float(), generation.response_mask)
        shaped, own["grpo/reward_kl"] = shaped - options.beta * kl, float(kl.sum())
        ref = None  # in the reward, not in the loss
    over_ranks = lambda moments: backend.all_reduce(moments, "sum")  # noqa: E731  (reinforce++: the whole batch's scale)
    advantages = group_advantages(shaped, options.group_size, options.baseline, options.normalize_std, over_ranks)
    tokens = torch.tensor([float(generation.response_mask.sum())], dtype=torch.float64)
    normalizer = float(backend.all_reduce(tokens, "mean")[0])
    stats = online.rollout_stats(scored, rewards, own)
    lowest = {"gen/response_length_min": lengths.min().double()}
    highest = {"gen/response_length_max": lengths.max().double()}
    mismatch = []  # one epoch: the update's own forward is the sampling policy's, and _finish compares it there
    if old is not None and generation.logprobs is not None:
        mismatch.append(engines.mismatch_sums(old, generation.logprobs, generation.response_mask))
    return Groups(generation, advantages, old, ref, stats, normalizer, lowest, highest, mismatch, overlap_stats)


def batch_seed(run: GrpoRun, batch: int) -> int:
    """The seed of the sampling of `batch` (the step it is drawn for) on this data rank: the synchronous loop and the
    generator draw a batch alike, whenever it is drawn (rollout/draws.py). By data rank, not rank: a tensor-parallel
    group (or a pipeline's stages) decodes one batch together and must draw the same tokens."""
    return draws.seed_of(run.spec.train.seed, "grpo", batch, run.backend.data_rank)


def _taken(run: GrpoRun) -> tuple[tuple[rollouts.Scored, dict[str, float]], dict[str, float]]:
    """The generator's next batch fresh enough for this step, its weights brought to the policy's version first when
    due (a copy: the trainer goes on updating its own); the seconds both took are the step's perf/weight_sync_s."""
    gate = run.overlap
    assert gate is not None
    if gate.due(run.step):
        started = time.perf_counter()
        state = engines.policy_state(run.backend, run.model, run.policy)
        gate.publish({key: value.detach().clone() for key, value in state.items()}, run.step)
        run.weight_sync_s += time.perf_counter() - started
    taken = gate.take(run.step)
    run.weight_sync_s += taken.weight_sync_s
    return taken.drawn.value, taken.stats


def start_overlap(run: GrpoRun, max_staleness: int, sync_every: int = 1, delays: Callable[[str], None] | None = None) -> None:
    """Start the generator of grpo.max_staleness (or of another bound: tests run the machinery at 0): gen.engine on a
    copy of the policy (hf, continuous) or the vllm server, sampling through the run's prompt order. Evaluation and
    tracked samples stay on the live policy (with vllm: the hf engine), so they show the policy as trained."""
    options = run.spec.grpo
    gen = options.gen
    engine, engine_policy = engines.generator_engine(
        gen, options.generator, run.backend, run.model, run.policy, run.tokenizer, run.out_dir, run.reporter
    )
    if gen.engine == "vllm":  # evaluation and tracked samples on the live policy, not on the server's older weights
        run.engine = run.engine or engines.HfEngine(run.backend, run.policy, run.tokenizer)
    if run.reward is not None:
        run.reward = overlap.Serialized(run.reward)
    order = overlap.RecordingOrder(run.order)
    side = overlap.GeneratorSide(
        spec=run.spec,
        backend=run.backend,
        tokenizer=run.tokenizer,
        reward=run.reward,
        environment=None,
        train_rows=run.train_rows,
        order=order,
        engine=engine,
        policy=engine_policy,
        out_dir=run.out_dir,
        reporter=run.reporter,
    )

    def produce(version: int, batch: int) -> Any:
        side.step = version
        with torch.no_grad(), draws.seeded(batch_seed(run, batch)):
            if options.dynamic_sampling:  # its rounds draw again on the scores: sampled and scored here, in one stage
                return _rollouts(side)  # type: ignore[arg-type]  (the generator's side of the run: what _rollouts reads)
            rows = common.local_batch(side, side.train_rows)  # type: ignore[arg-type]
            return rollouts.sample(side, side.policy, rows, gen, options.group_size)

    def finish(sampled: rollouts.Sampled) -> tuple[rollouts.Scored, dict[str, float]]:
        scored = rollouts.score(side, sampled)
        return scored, {"grpo/zero_std_groups": _zero_std_groups(scored, options.group_size)}

    def load(weights: Any, version: int) -> None:
        engine.pause()
        try:
            engine.update_weights(weights, version)
        finally:
            engine.resume()

    ledger = run.out_dir / overlap.LEDGER if run.backend.is_rank_zero else None
    if ledger is not None:
        ledger.parent.mkdir(parents=True, exist_ok=True)
    run.overlap = overlap.Overlap(
        produce,
        load,
        order,
        finish=None if options.dynamic_sampling else finish,
        max_staleness=max_staleness,
        sync_every=sync_every,
        version=run.step,
        ledger=ledger,
        dropped_groups=run.dropped_groups,
        delays=delays,
        engine=engine,
    )
    run.reporter.log(
        f"async: a {engine.name} generator samples up to {max_staleness} step(s) ahead of the trainer, weights every "
        f"{sync_every} step(s)"
    )


def _rollouts(run: GrpoRun) -> tuple[rollouts.Scored, dict[str, float]]:
    """This rank's scored groups for the step, and the sums that say how they were drawn. With grpo.dynamic_sampling,
    groups whose rewards are all equal are dropped and more prompts sampled, round after round, until every rank has
    its batch of informative groups or the rounds run out (then dropped groups fill the rest). Every rank samples as
    many rounds as the rank that needs most: their generation runs in step (ZeRO-3's synced generate)."""
    backend, options = run.backend, run.spec.grpo
    size = options.group_size

    def draw() -> tuple[rollouts.Scored, list[bool]]:
        rows = common.local_batch(run, run.train_rows)
        scored = online.scored(run, run.policy, options, rows, size)
        spread = torch.tensor(scored.scores.total, dtype=torch.float32).view(-1, size).std(dim=1) > 0
        return scored, spread.tolist()

    first, informative = draw()
    groups, gen_s = len(informative), first.gen_s
    own = {"grpo/zero_std_groups": _zero_std_groups(first, size)}  # of the first draw: the signal
    if not options.dynamic_sampling:
        return first, own
    pad = pad_id(run.tokenizer)
    rows_of = lambda group: list(range(group * size, (group + 1) * size))  # noqa: E731
    kept: rollouts.Scored | None = None
    spare: list[tuple[rollouts.Scored, int]] = []
    count, rounds, scored = 0, 0, first
    while True:
        for group, good in enumerate(informative):
            if good and count < groups:
                kept, count = rollouts.keep(scored, rows_of(group), pad, kept), count + 1
            elif not good:
                spare.append((scored, group))
        short = backend.all_reduce(torch.tensor(float(groups - count)), "max")
        if float(short) == 0 or rounds == options.dynamic_sampling:
            break
        scored, informative = draw()
        rounds, gen_s = rounds + 1, gen_s + scored.gen_s
    for scored, group in spare[: groups - count]:  # still short: dropped groups keep the batch's size (advantage 0)
        kept = rollouts.keep(scored, rows_of(group), pad, kept)
    own |= {"grpo/sampling_rounds": float(rounds + 1) * len(first.prompts), "grpo/kept_groups": float(count * size)}
    assert kept is not None
    return dataclasses.replace(kept, gen_s=gen_s), own


def _zero_std_groups(scored: rollouts.Scored, size: int) -> float:
    """The responses in groups whose rewards are all equal (they teach nothing)."""
    spread = torch.tensor(scored.scores.total, dtype=torch.float32).view(-1, size).std(dim=1) > 0
    return float((spread.numel() - int(spread.sum())) * size)


@torch.no_grad()
def report_tracked_groups(run: GrpoRun, step: int) -> None:
    """Whole groups for the tracked prompts (recipes/samples.py): group_size responses to each, with reward, reward
    components, advantage in its group, length, truncation and KL to the reference (grpo.kl_estimator, mean per
    response token: what grpo/kl averages, so k3 is never negative). Every rank runs it; rank zero reports."""
    options, backend = run.spec.grpo, run.backend
    rows = samples.tracked_rows(run, options.samples_to_log)
    scored = online.scored(run, run.policy, options, rows, options.group_size, observe=True)
    rewards = torch.tensor(scored.scores.total, dtype=torch.float32, device=backend.device)
    advantages = group_advantages(rewards, options.group_size, options.baseline, options.normalize_std)
    kls = None
    if run.reference is not None:
        with backend.autocast():
            packed = run.spec.train.padding_free
            logprobs = _logprobs(run.model, scored.generation, packed)[0]
            ref = _logprobs(run.reference, scored.generation, packed)[0]
        per_token = kl_penalty(logprobs.float(), ref.float(), options.kl_estimator)
        kls = masked_mean(per_token, scored.generation.response_mask, dim=1).tolist()
    if backend.is_rank_zero:
        extra = {"advantage": advantages.tolist(), **sample_extra(scored)}
        turns = sample_turns(scored, run.tokenizer, markers_of(options.environment))
        run.reporter.samples(step, samples.response_samples(scored, options.gen, kls, extra, turns=turns))


# The sums each micro-batch adds (weighted by its share of the responses), in this order.
_UPDATE_KEYS = (
    "train/loss",
    "grpo/policy_loss",
    "grpo/kl",
    "grpo/clipfrac",
    "grpo/approx_kl",
    "grpo/entropy",
    "grpo/clipfrac_low",
    "grpo/clipfrac_high",
    "grpo/ratio_mean",
)


def micro_steps(run: GrpoRun, groups: Groups) -> list[MicroStep]:
    """This rank's responses as micro-batches of one update (train.micro_batch_size responses or
    train.micro_batch_tokens tokens each, padded or padding-free), each weighing its share of the responses."""
    train, generation = run.spec.train, groups.generation
    size = groups.advantages.shape[0]
    sizes = packing.row_sizes(generation.attention_mask, train.padding_free)
    micro = packing.micro_batches(sizes, train, run.backend, run.spec.micro_batch_size)
    steps = []
    for group in micro:
        index = torch.tensor(group, dtype=torch.long)
        part = generation.rows(index)
        finish = partial(_finish, run=run, groups=groups, index=index, part=part, size=size, scale=len(micro))
        steps.append(packing.micro_step(part.inputs(), finish, train.padding_free))
    return steps


def update(run: GrpoRun, groups: Groups) -> dict[str, float]:
    """grpo.epochs passes, each one optimizer update over all of this step's responses (in micro-batches)."""
    backend, options = run.backend, run.spec.grpo
    sums = torch.zeros(len(_UPDATE_KEYS), dtype=torch.float64)
    grad_norm = 0.0
    run.model.train()
    for _ in range(options.epochs):
        sums += backend.forward_backward(run.model, micro_steps(run, groups)).cpu().double()
        grad_norm += backend.step()
    means = {key: float(value) / options.epochs for key, value in zip(_UPDATE_KEYS, sums, strict=True)}
    mismatch = engines.merged_mismatch(groups.mismatch)  # one epoch: made in the update's forward, on the loss's stage
    mismatch = online.from_loss_stage(backend, "grpo", groups.lowest, groups.highest, mismatch)
    extremes = online.reduced_extremes(backend, groups.lowest, groups.highest)
    return {
        **means,
        **extremes,
        **engines.mismatch_metrics(run.backend, mismatch),
        "train/grad_norm": grad_norm / options.epochs,
        **groups.overlap_stats,
    }


def _finish(
    output: Any,
    run: GrpoRun,
    groups: Groups,
    index: torch.Tensor,
    part: rollouts.Generation,
    size: int,
    scale: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A micro-batch's GRPO loss to backpropagate (its share of the step's responses, times the micro-batch count the
    backend divides by) and its share-weighted sums of _UPDATE_KEYS."""
    options, logits = run.spec.grpo, output.logits
    p = part.prompt_width
    logprobs = response_logprobs(logits, part.input_ids, p)
    old = logprobs.detach() if groups.old_logprobs is None else groups.old_logprobs[index]
    ref = None if groups.ref_logprobs is None else groups.ref_logprobs[index]
    drawn = part.logprobs  # the rollout engine's
    if groups.old_logprobs is None and drawn is not None:
        groups.mismatch.append(engines.mismatch_sums(old, drawn, part.response_mask))
    weights = None
    cap = options.off_policy_cap
    if cap is not None and drawn is not None:
        # with a generator behind the trainer, `drawn` is the behaviour policy and `old` the proximal one: the
        # decoupled objective (Hilton et al. 2022; AReaL, Fu et al. 2025) clips against `old`, weighs by their ratio
        weights = engines.truncated_is_weights(old, drawn, cap)
    out = grpo_loss(
        logprobs,
        old,
        ref,
        groups.advantages[index],
        part.response_mask,
        options.cliprange,
        options.beta,
        options.kl_estimator,
        clip_high=options.clip_high,
        aggregation=options.loss,
        importance=options.importance_sampling,
        max_tokens=options.response_budget,
        token_normalizer=groups.token_normalizer,
        rollout_weights=weights,
    )
    share = len(index) / size
    online.track_ratio_extremes(groups.lowest, groups.highest, "grpo", out)
    with torch.no_grad():
        entropy = masked_mean(entropy_from_logits(logits[:, p - 1 : -1]), part.response_mask)
        values = [out.loss, out.policy_loss, out.kl, out.clipfrac, out.approx_kl, entropy]
        values += [out.clipfrac_low, out.clipfrac_high, out.ratio_mean]
        sums = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=logits.device) * share for v in values])
        if options.loss == "dapo":  # already a share of the step's tokens: its sum over micro-batches is the loss
            sums[:2] = torch.stack([out.loss.detach(), out.policy_loss]).double()
    # dapo's loss is this micro-batch's tokens over the step's, the others' a mean over its responses: weigh those
    weight = 1.0 if options.loss == "dapo" else len(index) / size
    return out.loss * weight * scale, sums


def train_step(run: GrpoRun) -> loop.StepResult:
    """One GRPO step: grouped rollouts, grpo.epochs updates; every reported value, reduced over ranks."""
    values, _, tokens = online.step(run, run.spec.grpo, sample, update, report_tracked_groups)
    return loop.StepResult(values, tokens)


def evaluate(run: GrpoRun) -> dict[str, float]:
    options, rows, plan = run.spec.grpo, rollouts.eval_rows(run), rollouts.plan_of(run.spec.grpo.eval)
    if run.environment is not None:
        return evaluate_episodes(run, run.policy, rows, options.gen, run.environment, options.environment, plan)
    return rollouts.evaluate(run, run.policy, rows, options.gen, run.reward, plan)


def checkpoint_state(run: GrpoRun) -> checkpointing.CheckpointState:
    """The policy as the checkpoint's model, and the reward normaliser; the reference is rebuilt from the spec."""
    reward = run.reward.state_dict() if run.reward is not None else {}
    state = checkpointing.run_state(run, model=run.policy, extra={"reward": reward})
    if run.overlap is not None:  # the cursor before the batches drawn and not yet trained: a resume draws them again
        state.data_position = run.overlap.resume_position(state.data_position)
        state.extra["async"] = run.overlap.state()
    return state


def train(run: GrpoRun, stop_at: int | None = None) -> None:
    """GRPO steps to train.steps (or stop after step `stop_at`, checkpointed, as a preempted run would)."""
    options = run.spec.grpo
    if run.overlap is None and options.overlapped:
        start_overlap(run, options.max_staleness, options.sync_every)
    loop.run_loop(run, stop_at, step=train_step, evaluate=evaluate, checkpoint_state=checkpoint_state)


def run_grpo(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stop_at: int | None = None) -> GrpoRun:
    """setup, train, export the policy; the reporter, backend and reward source are closed whatever happens."""
    return online.drive(setup(spec, out_dir, resume_from), train, stop_at)


run = run_grpo  # the name trainer_core.cli calls every recipe by
