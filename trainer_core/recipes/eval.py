"""Evaluation of a model (a checkpoint, a run's output, a stage of a pipeline): answers to prompts, judged by a reward.

    setup()     backend, the model (frozen, placed on this rank's device), the reward source, the prompts
                (eval.split: the held-out ones, or all; the first eval.max_prompts; with eval.attributes each
                carries the attribute values asked of a SteerLM-conditioned model)
    evaluate()  eval.samples answers to each prompt (greedy or sampled with eval.gen), scored by spec.reward:
                eval/reward, eval/accuracy and eval/pass@k (answers whose reward reaches eval.correct_at),
                eval/length, eval/truncated (rollouts.evaluate: what ppo and grpo run every train.eval_every
                steps too), reported as step 1 of a one-step run; with eval.environment, an episode per answer
                judged by the environment (episodes.evaluate, as grpo.environment's runs evaluate)

Nothing is trained or exported. The API shows the result beside the checkpoint the spec's model.path names
(docs/evaluation.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from rlplane.spec import RunSpec
from rlplane.spec.attributes import attribute_text
from trainer_core.backends import Backend
from trainer_core.data import load_examples
from trainer_core.environments import Environment
from trainer_core.models import load_from_spec
from trainer_core.recipes import common, online, steering
from trainer_core.reporting import Reporter
from trainer_core.rewards import Reward
from trainer_core.rollout import episodes, rollouts


@dataclass
class EvalRun:
    spec: RunSpec
    backend: Backend
    reporter: Reporter
    tokenizer: Any
    policy: nn.Module
    reward: Reward | None  # None with an environment and no reward section
    environment: Environment | None  # eval.environment
    rows: list[dict]
    out_dir: Path
    step: int = 0
    engine: Any = None  # the rollout engine (rollout/engines.py: opened on first use)
    weight_sync_s: float = 0.0


def setup(spec: RunSpec, out_dir: Path, *, stdout: bool = True) -> EvalRun:
    options = spec.eval
    with common.started(spec, out_dir, stdout) as (backend, reporter):
        policy, tokenizer = load_from_spec(spec.model, "causal", seed=spec.train.seed)
        spec = common.fit_context(spec, policy)
        policy = backend.prepare_frozen(policy)
        split = load_examples(spec.data, "prompts", seed=spec.train.seed)
        rows = (split.eval or split.train) if options.split == "eval" else [*split.train, *split.eval]
        rows = steering.steered(rows[: options.max_prompts], options.attributes)  # SteerLM: the values asked for
        reward, environment = online.reward_or_environment(spec, options.environment, "eval", backend, reporter, tokenizer)
        which = "held-out" if options.split == "eval" and split.eval else "all"
        asked = f", asking for {attribute_text(options.attributes.values)}" if options.attributes is not None else ""
        reporter.log(f"evaluating {spec.model.path} on {len(rows)} prompts ({which}), {options.samples} answer(s) each{asked}")
    return EvalRun(spec, backend, reporter, tokenizer, policy, reward, environment, rows, out_dir)


def evaluate(run: EvalRun) -> dict[str, float]:
    options = run.spec.eval
    plan = rollouts.EvalPlan(
        samples=options.samples,
        greedy=options.greedy,
        correct_at=options.correct_at,
        k=tuple(options.k),
        batch_size=options.batch_size,
    )
    if run.environment is not None:
        return episodes.evaluate(run, run.policy, run.rows, options.gen, run.environment, options.environment, plan)
    return rollouts.evaluate(run, run.policy, run.rows, options.gen, run.reward, plan)


def run_eval(spec: RunSpec, out_dir: Path, resume_from: Path | None = None, *, stop_at: int | None = None) -> EvalRun:
    """setup, evaluate, report; the reporter, backend, reward source and environment are closed whatever happens. A resumed
    evaluation starts again (it keeps no state worth a checkpoint)."""
    run = setup(spec, out_dir)
    return common.drive_one_step(run, lambda: _evaluated(run), lambda: (run.reward, run.environment, run.engine))


def _evaluated(run: EvalRun) -> None:
    run.reporter.status("running", "answering the prompts")
    values = evaluate(run)
    run.step = 1
    run.reporter.metrics(1, values)
    shown = ", ".join(f"{k.removeprefix('eval/')} {v:.4g}" for k, v in sorted(values.items()))
    run.reporter.log(f"evaluated: {shown}")


run = run_eval  # the name trainer_core.cli calls every recipe by
