"""PPO for language models (Ouyang et al. 2022; the trlx / NeMo Aligner recipe): sample, score, update.

    setup()     backend, policy + value function, frozen reference, reward source, prompts, optimizer
    train()     train.steps PPO steps, each:
                  rollout(): sample one response per prompt of the global batch (ppo.gen), score it
                    (spec.reward), per-token reward = -kl_coef·(log π - log π_ref) with the score added
                    at the last token, values and GAE advantages (gamma, lam), whitened
                  update():  ppo.epochs passes over the rollouts in minibatches of ppo.minibatch_size,
                    clipped policy and value losses, one optimizer update per minibatch
                then the KL controller adapts kl_coef (ppo.target_kl), metrics and samples are reported,
                eval and checkpoints when due
and the policy is exported to OUT/final as a plain Hugging Face model.

The value function is a head on the policy's last hidden states (a shared trunk), or on a separate
critic model (ppo.critic). The LR schedule advances once per PPO step, not per minibatch update,
so train.steps and warmup_steps count PPO steps. A checkpoint holds the policy, the value head
(and critic), optimizer, schedule, RNG, prompt position, the KL coefficient and the reward
normaliser: a resumed run samples the same rollouts the straight run would have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from torch import nn

from rlplane.spec import RunSpec
from trainer_core.backends import MicroStep, local_batch_range
from trainer_core.data import load_examples
from trainer_core.environments import Environment
from trainer_core.losses.policy import (
    entropy_from_logits,
    explained_variance,
    gae,
    masked_mean,
    masked_whiten,
    ppo_policy_loss,
    ppo_value_loss,
    response_logprobs,
    value_moments,
)
from trainer_core.models import load_from_spec
from trainer_core.recipes import checkpointing, common, loop, online, packing, samples
from trainer_core.recipes.kl_control import KlController
from trainer_core.rewards import Reward
from trainer_core.rollout import engines, episodes, rollouts


class ValueHead(nn.Module):
    """hidden state -> V(s): a two-layer MLP, as trlx's value branch (a linear head learns too slowly at this size)."""

    def __init__(self, hidden_size: int, seed: int) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.net = nn.Sequential(nn.Linear(hidden_size, 2 * hidden_size), nn.ReLU(), nn.Linear(2 * hidden_size, 1))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # In the head's own dtype: fp32 beside an autocast trunk, bf16 where DeepSpeed cast the whole model.
        return self.net(hidden.to(self.net[0].weight.dtype)).float().squeeze(-1)


class ActorCritic(nn.Module):
    """The trained modules as one, so the optimizer and DDP see them together: forward -> (logits, values)."""

    def __init__(self, policy: nn.Module, value_head: ValueHead, critic: nn.Module | None = None) -> None:
        super().__init__()
        self.policy, self.value_head, self.critic = policy, value_head, critic

    def forward(self, **inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.policy(**inputs, output_hidden_states=self.critic is None)
        hidden = out.hidden_states[-1] if self.critic is None else self.critic(**inputs).last_hidden_state
        return out.logits, self.value_head(hidden)

    def checkpoint_modules(self) -> dict[str, nn.Module]:
        return {"value_head": self.value_head, **({"critic": self.critic} if self.critic is not None else {})}


@dataclass(kw_only=True)
class PpoRun(common.Run):  # model: the ActorCritic, wrapped by the backend; step: PPO steps done
    reference: nn.Module  # frozen, eval mode
    reward: Reward | None  # None with an environment: it rewards the episodes
    environment: Environment | None  # ppo.environment
    kl: KlController
    train_rows: list[dict]
    eval_rows: list[dict]

    @property
    def actor_critic(self) -> ActorCritic:
        return self.backend.unwrap(self.model)


@dataclass
class Rollouts:
    generation: rollouts.Generation
    logprobs: torch.Tensor  # [B, R] under the policy that sampled them
    values: torch.Tensor  # [B, R]
    advantages: torch.Tensor  # [B, R], whitened unless ppo.whiten_advantages is false
    returns: torch.Tensor  # [B, R]
    stats: dict[str, float]  # this rank's sums, reduced in train_step
    mismatch: list[torch.Tensor]  # engines.mismatch_sums: the trainer's log-probs of the samples against the engine's
    lowest: dict[str, torch.Tensor]  # what the step reports as its minimum (and highest its maximum), this rank's
    highest: dict[str, torch.Tensor]


def setup(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stdout: bool = True) -> PpoRun:
    options, seed = spec.ppo, spec.train.seed
    with common.started(spec, out_dir, stdout) as (backend, reporter):
        policy, tokenizer = load_from_spec(spec.model, "causal", seed=seed)
        spec = common.fit_context(spec, policy)
        reference = common.frozen_reference(options.ref_model, policy, spec.model, backend, reporter, seed=seed)
        critic = None
        if options.critic is not None:
            critic = load_from_spec(options.critic, "causal", seed=seed)[0].base_model  # the trunk: no LM head to train
        hidden = (critic or policy).config.hidden_size
        model = ActorCritic(policy, ValueHead(hidden, seed), critic)
        split = load_examples(spec.data, "prompts", seed=seed)
        reward, environment = online.reward_or_environment(spec, options.environment, "ppo", backend, reporter, tokenizer)
        # The schedule steps once per PPO step (train_step), not per minibatch update as the backend would.
        saved = (policy, model.checkpoint_modules())  # the checkpoint's model and the modules beside it
        opt = common.prepare_optimization(
            spec, backend, model, len(split.train), resume_from, saved=saved, schedule_per_step=True
        )
        if spec.train.padding_free:
            packing.check_separates(opt.model, backend)
            packing.check_separates(reference, backend)
        kl = KlController(options.kl_coef, options.target_kl, options.horizon)
        if resume_from is not None:
            kl.load_state_dict(opt.extra["kl"])
            if reward is not None:
                reward.load_state_dict(opt.extra["reward"])
            reporter.log(f"resumed from {resume_from} at step {opt.step} (reference model rebuilt from the spec)")
    return PpoRun(
        reference=reference,
        reward=reward,
        environment=environment,
        kl=kl,
        train_rows=split.train,
        eval_rows=split.eval,
        **common.run_fields(spec, out_dir, backend, reporter, tokenizer, opt),
    )


def _logprobs_values(
    model: nn.Module, generation: rollouts.Generation, padding_free: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log π of each response token, V of the state before it, the logits over the response positions)."""
    logits, values = packing.forward(model, generation.inputs(), padding_free)
    p = generation.prompt_width
    return response_logprobs(logits, generation.input_ids, p), values[:, p - 1 : -1], logits[:, p - 1 : -1]


def _reference_logprobs(run: PpoRun, generation: rollouts.Generation) -> torch.Tensor:
    logits = packing.forward(run.reference, generation.inputs(), run.spec.train.padding_free).logits
    return response_logprobs(logits, generation.input_ids, generation.prompt_width)


@torch.no_grad()
def rollout(run: PpoRun) -> Rollouts:
    """Sample and score this rank's share of the next global batch of prompts, with advantages."""
    backend, options, packed = run.backend, run.spec.ppo, run.spec.train.padding_free
    rows = common.local_batch(run, run.train_rows)
    scored = online.scored(run, run.actor_critic.policy, options, rows)
    generation, scores = scored.generation, scored.scores
    mask = generation.response_mask
    with backend.autocast():
        logprobs, values, _ = _logprobs_values(run.model, generation, packed)  # the prepared model (megatron: its shards)
        ref_logprobs = _reference_logprobs(run, generation)
    mask_f = mask.to(logprobs.dtype)
    kl = (logprobs - ref_logprobs) * mask_f  # k1 per token: its sum is the response's KL estimate
    score = torch.tensor(scores.total, dtype=logprobs.dtype, device=backend.device)
    if options.whiten_rewards:
        score = masked_whiten(score, torch.ones_like(score, dtype=torch.bool), shift_mean=False)
    rewards = -run.kl.value * kl
    # The final policy token (its eos; an episode's last turn's) carries the score; gae skips the environment's tokens.
    positions = torch.arange(mask.shape[1], device=mask.device)
    last = torch.where(mask, positions, -1).max(dim=1).values.clamp(min=0)
    rewards[torch.arange(len(rows)), last] += score
    advantages, returns = gae(rewards, values.float(), mask, options.gamma, options.lam)
    if options.whiten_advantages:
        advantages = masked_whiten(advantages, mask)

    own = {"ppo/kl": float(kl.sum(1).sum()), "values/mean": float(masked_mean(values.float(), mask) * len(rows))}
    lengths = mask.sum(1)
    if run.environment is None:
        own["gen/truncated"] = float((lengths >= options.gen.max_new_tokens).sum())
    else:
        own |= episodes.step_stats(scored)  # env/*, and gen/truncated: the episodes the limits cut off
        if (errors := episodes.error_summary(scored)) and backend.is_rank_zero:
            run.reporter.log(f"step={run.step + 1} {errors}")
    stats = online.rollout_stats(scored, torch.tensor(scores.total, dtype=torch.float64), own)
    mismatch = []
    if generation.logprobs is not None:
        mismatch.append(engines.mismatch_sums(logprobs, generation.logprobs, mask))
    lowest = {"gen/response_length_min": lengths.min().double()}
    highest = {"gen/response_length_max": lengths.max().double()}
    return Rollouts(generation, logprobs, values.float(), advantages, returns, stats, mismatch, lowest, highest)


# The sums each micro-batch adds (weighted by its share of the minibatch), in this order.
_UPDATE_KEYS = (
    "ppo/policy_loss",
    "ppo/value_loss",
    "ppo/entropy",
    "ppo/clipfrac",
    "ppo/approx_kl",
    "ppo/value_clipfrac",
    "ppo/clipfrac_low",
    "ppo/clipfrac_high",
    "ppo/ratio_mean",
)


def micro_steps(run: PpoRun, batch: Rollouts, rows: torch.Tensor) -> list[MicroStep]:
    """A minibatch's `rows` of the rollouts as micro-batches of one update (train.micro_batch_size rows or
    train.micro_batch_tokens tokens each, padded or padding-free), each weighing its share of the minibatch."""
    train = run.spec.train
    sizes = packing.row_sizes(batch.generation.attention_mask[rows], train.padding_free)
    micro = packing.micro_batches(sizes, train, run.backend, run.spec.micro_batch_size)
    steps = []
    for group in micro:
        index = rows[torch.tensor(group, dtype=torch.long)]
        part = batch.generation.rows(index)
        finish = partial(_finish, run=run, batch=batch, index=index, part=part, rows=len(rows), scale=len(micro))
        steps.append(packing.micro_step(part.inputs(), finish, train.padding_free))
    return steps


def update(run: PpoRun, batch: Rollouts) -> dict[str, float]:
    """ppo.epochs passes of minibatch updates over the rollouts; the means of the loss statistics."""
    spec, backend, options = run.spec, run.backend, run.spec.ppo
    size = batch.logprobs.shape[0]
    minibatch = len(local_batch_range(spec.update_batch_size, backend.data_rank, backend.data_world_size))
    sums = torch.zeros(len(_UPDATE_KEYS), dtype=torch.float64)
    grad_norm, updates = 0.0, 0
    run.model.train()
    for _ in range(options.epochs):
        permutation = torch.randperm(size)  # the global generator: saved and restored with the checkpoint
        for start in range(0, size, minibatch):
            rows = permutation[start : start + minibatch]
            sums += backend.forward_backward(run.model, micro_steps(run, batch, rows)).cpu().double()
            grad_norm += backend.step()
            updates += 1
    means = {key: float(value) / updates for key, value in zip(_UPDATE_KEYS, sums, strict=True)}
    means["train/grad_norm"] = grad_norm / updates
    # Of the values the rollout was scored with, over every rank's tokens (the same on each, so averaging keeps it).
    moments = backend.all_reduce(value_moments(batch.values, batch.returns, batch.generation.response_mask), "sum")
    means["ppo/explained_variance"] = explained_variance(moments)
    online.from_loss_stage(backend, "ppo", batch.lowest, batch.highest)  # its mismatch is the rollout's, on every stage
    means |= online.reduced_extremes(backend, batch.lowest, batch.highest)
    means |= engines.mismatch_metrics(backend, engines.merged_mismatch(batch.mismatch))
    return {"train/loss": means["ppo/policy_loss"] + options.vf_coef * means["ppo/value_loss"], **means}


def _finish(
    output: tuple[torch.Tensor, torch.Tensor],
    run: PpoRun,
    batch: Rollouts,
    index: torch.Tensor,
    part: rollouts.Generation,
    rows: int,
    scale: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A micro-batch's PPO loss to backpropagate (its share of the minibatch, times the micro-batch count the backend
    divides by) and its share-weighted sums of _UPDATE_KEYS, from the actor-critic's (logits, values)."""
    options, (logits, values) = run.spec.ppo, output
    p, mask = part.prompt_width, part.response_mask
    logprobs = response_logprobs(logits, part.input_ids, p)
    values = values[:, p - 1 : -1]
    weights = None
    if options.tis_cap is not None and part.logprobs is not None:
        weights = engines.truncated_is_weights(batch.logprobs[index], part.logprobs, options.tis_cap)
    policy = ppo_policy_loss(logprobs, batch.logprobs[index], batch.advantages[index], mask, options.cliprange, weights)
    value_loss, value_clipfrac = ppo_value_loss(
        values.float(), batch.values[index], batch.returns[index], mask, options.cliprange_value
    )
    loss = policy.loss + options.vf_coef * value_loss
    share = len(index) / rows
    online.track_ratio_extremes(batch.lowest, batch.highest, "ppo", policy)
    with torch.no_grad():
        entropy = masked_mean(entropy_from_logits(logits[:, p - 1 : -1]), mask)
        values_out = [policy.loss, value_loss, entropy, policy.clipfrac, policy.approx_kl, value_clipfrac]
        values_out += [policy.clipfrac_low, policy.clipfrac_high, policy.ratio_mean]
        sums = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=logits.device) * share for v in values_out])
    return loss * len(index) / rows * scale, sums


@torch.no_grad()
def report_tracked(run: PpoRun, step: int) -> None:
    """A response to each tracked prompt (recipes/samples.py) with its reward, components, length, truncation and
    KL to the reference (the sum of k1 over its tokens: what the KL penalty and ppo/kl use). Every rank runs it;
    rank zero reports."""
    options, backend = run.spec.ppo, run.backend
    rows = samples.tracked_rows(run, options.samples_to_log)
    scored = online.scored(run, run.actor_critic.policy, options, rows, observe=True)
    generation = scored.generation
    with backend.autocast():
        logprobs = _logprobs_values(run.model, generation, run.spec.train.padding_free)[0]
        ref = _reference_logprobs(run, generation)
    kls = ((logprobs.float() - ref.float()) * generation.response_mask).sum(1).tolist()
    if backend.is_rank_zero:
        extra, turns = (
            episodes.sample_extra(scored),
            episodes.sample_turns(scored, run.tokenizer, episodes.markers_of(options.environment)),
        )
        run.reporter.samples(step, samples.response_samples(scored, options.gen, kls, extra, turns=turns))


def train_step(run: PpoRun) -> loop.StepResult:
    """One PPO step: rollouts, updates, the KL controller; every reported value, reduced over ranks."""
    values, count, tokens = online.step(run, run.spec.ppo, rollout, update, report_tracked, {"ppo/kl_coef": run.kl.value})
    if math.isfinite(values["ppo/kl"]):  # a skipped step (train.on_nonfinite: skip) leaves the controller as it was
        run.kl.update(values["ppo/kl"], int(count))
    return loop.StepResult(values, tokens)


def evaluate(run: PpoRun) -> dict[str, float]:
    options = run.spec.ppo
    policy, rows, plan = run.actor_critic.policy, rollouts.eval_rows(run), rollouts.plan_of(options.eval)
    if run.environment is not None:
        return episodes.evaluate(run, policy, rows, options.gen, run.environment, options.environment, plan)
    return rollouts.evaluate(run, policy, rows, options.gen, run.reward, plan)


def checkpoint_state(run: PpoRun) -> checkpointing.CheckpointState:
    """The policy as the checkpoint's model, the value head (and critic) beside it, the KL controller and the reward
    normaliser; the reference is rebuilt from the spec."""
    return checkpointing.run_state(
        run,
        model=run.actor_critic.policy,
        modules=run.actor_critic.checkpoint_modules(),
        extra={"kl": run.kl.state_dict(), "reward": run.reward.state_dict() if run.reward is not None else {}},
    )


def train(run: PpoRun, stop_at: int | None = None) -> None:
    """PPO steps to train.steps (or stop after step `stop_at`, checkpointed, as a preempted run would)."""
    loop.run_loop(run, stop_at, step=train_step, evaluate=evaluate, checkpoint_state=checkpoint_state)


def run_ppo(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stop_at: int | None = None) -> PpoRun:
    """setup, train, export the policy; the reporter, backend and reward source are closed whatever happens."""
    return online.drive(setup(spec, out_dir, resume_from), train, stop_at, export=lambda r: r.actor_critic.policy)


run = run_ppo  # the name trainer_core.cli calls every recipe by
