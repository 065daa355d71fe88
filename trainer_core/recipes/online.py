"""The platform around an online RL recipe's algorithm (ppo, grpo): its reward source, one step's phases with
their metrics reduced over ranks, and the driver that closes the reward source too. What a rollout and an
update compute stays in the recipe (rollouts.py: sampling and scoring).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import torch
from torch import nn

from rlplane.spec import RunSpec
from rlplane.spec.environments import EnvironmentSpec
from trainer_core.backends import Backend
from trainer_core.environments import EnvError, Environment, make_environment, tool_formats
from trainer_core.recipes import common, samples
from trainer_core.rewards import Reward, make_reward
from trainer_core.rollout import engines, episodes, rollouts


class Collected(Protocol):
    stats: dict[str, float]  # this rank's sums of the step's rollouts (rollout_stats)
    generation: rollouts.Generation  # the rollouts the update trains on


class OnlineOptions(Protocol):  # ppo's and grpo's spec sections
    samples_to_log: int
    samples_every: int
    epochs: int


B = TypeVar("B", bound=Collected)


def reward_source(spec: RunSpec, backend: Backend) -> Reward:
    """spec.reward on this rank: a reward model placed by the backend, running normalisers reduced over ranks."""
    return make_reward(
        spec.reward,
        device=backend.device,
        seed=spec.train.seed,
        reduce_sum=lambda t: backend.all_reduce(t, "sum"),
        place=backend.prepare_frozen,
    )


def reward_or_environment(
    spec: RunSpec, limits: EnvironmentSpec | None, section: str, backend: Backend, reporter: Any, tokenizer: Any = None
) -> tuple[Reward | None, Environment | None]:
    """spec.reward, and the environment that plays and rewards whole episodes (`section`.environment: grpo, ppo), which
    a run may have without a reward. An MCP environment's tool_format is said, and where the policy's chat template
    writes tool calls otherwise, that too."""
    if limits is None:
        return reward_source(spec, backend), None
    field = f"{section}.environment"
    if limits.max_tokens >= spec.model.max_seq_len:  # the spec rules could not check an unset max_seq_len
        raise EnvError(
            f"{field}.max_tokens {limits.max_tokens} leaves no room for the prompt in {spec.model.path!r}'s "
            f"{spec.model.max_seq_len}-token context; lower it or set model.max_seq_len"
        )
    environment = make_environment(limits, field)
    described = f"{limits.kind} {getattr(limits, 'name', None) or getattr(limits, 'url', None) or limits.entrypoint}"
    if getattr(limits, "name", None) == "python":
        from trainer_core.environments.sandbox import isolation

        described += f" (sandbox: {isolation()})"
    # an MCP tool environment, or a service that reads the policy's tool calls
    if getattr(environment, "tools", False) is True or (limits.kind == "http" and limits.tool_format is not None):
        described += f" tool_format={limits.tool_format}"
        written = tool_formats.template_format(getattr(tokenizer, "chat_template", None))
        if written not in (None, limits.tool_format):
            reporter.log(
                f"warning: {field}.tool_format is {limits.tool_format}, but the model's chat template writes tool calls "
                f"as {written}: set {field}.tool_format: {written}, unless the policy is to learn another format"
            )
    reporter.log(f"environment {described} max_turns={limits.max_turns} max_tokens={limits.max_tokens}")
    return (reward_source(spec, backend) if spec.reward is not None else None), environment


def scored(
    run: Any, policy: nn.Module, options: Any, rows: list[dict], repeat: int = 1, *, observe: bool = False
) -> rollouts.Scored:
    """`repeat` scored answers to each row (`options`: the ppo or grpo section): single responses scored by
    run.reward, or whole episodes played with run.environment, and scored by run.reward too when the run has one
    (`observe` leaves the reward's normaliser as it was; the environment keeps nothing between episodes)."""
    if run.environment is None:
        return rollouts.sample_and_score(run, policy, rows, options.gen, repeat=repeat, observe=observe)
    played = episodes.play(run, policy, rows, options.gen, run.environment, options.environment, repeat=repeat)
    return episodes.with_reward(played, run.reward, rows, repeat, observe=observe)


def track_ratio_extremes(lowest: dict[str, torch.Tensor], highest: dict[str, torch.Tensor], section: str, loss: Any) -> None:
    """Fold a micro-batch's smallest and largest importance ratio (`loss`.ratio_min, .ratio_max) into the step's
    `section`/ratio_min and _max, as tensors: no device sync per micro-batch."""
    for found, key, value, pick in (
        (lowest, f"{section}/ratio_min", loss.ratio_min, torch.minimum),
        (highest, f"{section}/ratio_max", loss.ratio_max, torch.maximum),
    ):
        value = value.detach().double()
        found[key] = value if key not in found else pick(found[key], value)


def from_loss_stage(
    backend: Backend,
    section: str,
    lowest: dict[str, torch.Tensor],
    highest: dict[str, torch.Tensor],
    mismatch: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """The step's ratio extremes (into `lowest` and `highest`) and, if given, its `engines.merged_mismatch` as the
    ranks that compute the loss tracked them: under pipeline parallelism only the last stage does, and rank 0, the
    first stage, reports (backend.from_loss_stage)."""
    keys = (f"{section}/ratio_min", f"{section}/ratio_max")
    absent = torch.tensor(math.inf, dtype=torch.float64)  # made on no micro-batch
    ratios = torch.stack([lowest.get(keys[0], absent).cpu(), -highest.get(keys[1], -absent).cpu()])
    carried = ratios if mismatch is None else torch.cat([ratios, mismatch.double().cpu()])
    shared = backend.from_loss_stage(carried.to(backend.device)).cpu()
    for found, key, value in ((lowest, keys[0], shared[0]), (highest, keys[1], -shared[1])):
        if math.isfinite(value):
            found[key] = value
    return None if mismatch is None else shared[2:]


def reduced_extremes(backend: Backend, lowest: dict[str, torch.Tensor], highest: dict[str, torch.Tensor]) -> dict[str, float]:
    """The step's minima and maxima over ranks (one collective each): the same on every rank, so the step's
    averaging over ranks keeps them. The values may sit on different devices (response lengths on the GPU, the
    ratio extremes that `from_loss_stage` shared on the CPU), so they are read as numbers first."""
    extremes: dict[str, float] = {}
    for op, found in (("min", lowest), ("max", highest)):
        values = torch.tensor([float(value) for value in found.values()], dtype=torch.float64)
        extremes |= dict(zip(found, backend.all_reduce(values, op).tolist(), strict=True))
    return extremes


def rollout_stats(scored: rollouts.Scored, rewards: torch.Tensor, own: Mapping[str, float]) -> dict[str, float]:
    """This rank's sums over a step's scored responses, which `step` reduces: the reward's total and square (for
    reward/mean and reward/std; `rewards` as the recipe holds them), each reward component, response tokens, the
    responses counted, the recipe's `own` sums, and the time spent generating."""
    raw = rewards.double()
    stats = {
        "reward/sum": float(raw.sum()),
        "reward/sumsq": float((raw**2).sum()),
        "gen/response_length": float(scored.generation.response_mask.sum()),
        "gen/prompt_cut": float(sum(scored.prompt_cut)),
        "count": float(len(rewards)),
        "perf/gen_s": scored.gen_s,
        **own,
    }
    for name, component in scored.scores.components.items():
        stats[f"reward/{name}"] = float(sum(component))
    return stats


def step(
    run: common.Run,
    options: OnlineOptions,
    collect: Callable[[Any], B],
    update: Callable[[Any, B], dict[str, float]],
    report_tracked: Callable[[Any, int], None],
    extra: Mapping[str, float] | None = None,
) -> tuple[dict[str, float], float, int]:
    """One step around the recipe's algorithm: `collect` its rollouts, show the tracked prompts' samples when due
    (after the rollouts, so their sampling stays as it was), `update` on the rollouts (timed), then step the
    schedule (once per step, over all of its updates) and count the step.

    Returns the step's metrics, reduced over ranks: reward/mean and reward/std, every other rollout sum per
    response, the update's statistics averaged over ranks, `extra`, perf/gen_s and perf/train_s; how many
    responses the step scored on all ranks; and the tokens the update trained on (prompts and responses, every
    epoch, over the data ranks), which the loop turns into perf/tokens_per_s, perf/mfu and perf/attempt_tokens."""
    synced = run.weight_sync_s
    batch = collect(run)
    weight_sync_s = run.weight_sync_s - synced
    if options.samples_to_log and samples.due(run.step + 1, options.samples_every, run.spec.train.steps):
        report_tracked(run, run.step + 1)
    started = time.perf_counter()
    losses = update(run, batch)
    train_s = time.perf_counter() - started
    run.scheduler.step()
    run.step += 1
    backend, stats = run.backend, batch.stats
    keys = sorted(k for k in stats if k != "perf/gen_s")
    totals = dict(
        zip(keys, backend.all_reduce(torch.tensor([stats[k] for k in keys], dtype=torch.float64), "sum").tolist(), strict=True)
    )
    losses = dict(
        zip(losses, backend.all_reduce(torch.tensor(list(losses.values()), dtype=torch.float64), "mean").tolist(), strict=True)
    )
    count = totals.pop("count")
    mean = totals.pop("reward/sum") / count
    variance = max(totals.pop("reward/sumsq") / count - mean**2, 0.0)
    values = {
        "reward/mean": mean,
        "reward/std": variance**0.5,
        **{k: v / count for k, v in totals.items()},
        **losses,
        **(extra or {}),
        "perf/gen_s": stats["perf/gen_s"],
        "perf/train_s": train_s,
    }
    if getattr(run, "overlap", None) is not None or (run.engine is not None and not isinstance(run.engine, engines.Colocated)):
        values["perf/weight_sync_s"] = weight_sync_s  # the policy's weights to the engine that holds its own
    trained = int(batch.generation.attention_mask.sum()) * options.epochs * backend.data_world_size
    return values, count, trained


def drive(
    run: Any, train: Callable[[Any, int | None], None], stop_at: int | None, export: Callable[[Any], nn.Module] | None = None
) -> Any:
    """common.drive, then the generator (grpo.max_staleness), the reward source (or environment) and the rollout
    engine are closed as well, whatever happens."""
    try:
        return common.drive(run, train, stop_at, export=export)
    finally:
        for source in (getattr(run, "overlap", None), run.reward, getattr(run, "environment", None), run.engine):
            if source is not None:
                source.close()
