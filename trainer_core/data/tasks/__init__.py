"""Builtin tasks: generated examples (builtin:<name> data sources) and the rewards that score them."""

from __future__ import annotations

from collections.abc import Callable

from rlplane.dataset_rows import DataError
from trainer_core.data.split import Split
from trainer_core.data.tasks import arithmetic, calculator, randomwalks

Examples = Callable[..., Split]
Reward = Callable[..., float]

# builtin:<name> -> {kind: example generator}. The tiny-* names are the arithmetic task with one
# kind each, for the shipped example specs.
BUILTIN_SOURCES: dict[str, dict[str, Examples]] = {
    "arithmetic": {
        "sft": arithmetic.sft_examples,
        "preference": arithmetic.preference_examples,
        "prompts": arithmetic.prompt_examples,
    },
    "tiny-sft": {"sft": arithmetic.sft_examples},
    "tiny-preference": {"preference": arithmetic.preference_examples},
    "tiny-prompts": {"prompts": arithmetic.prompt_examples},
    "randomwalks": {
        "sft": randomwalks.sft_examples,
        "preference": randomwalks.preference_examples,
        "prompts": randomwalks.prompt_examples,
    },
    # rewarded by the calculator environment (grpo.environment), not by a reward of its own
    "calculator": {"sft": calculator.sft_examples, "prompts": calculator.prompt_examples},
    # SteerLM's attribute rows: each problem right and wrong, with correctness and verbosity (the attribute model's
    # and the conditioned SFT's data); its prompts are arithmetic's, held out alike
    "arithmetic-graded": {"sft": arithmetic.graded_examples, "prompts": arithmetic.prompt_examples},
    "arithmetic-partly-graded": {"sft": arithmetic.partly_graded_examples, "prompts": arithmetic.prompt_examples},
}

# reward: {kind: builtin, name: <name>} -> reward(prompt, response, answer=None) -> float
BUILTIN_REWARDS: dict[str, Reward] = {"arithmetic": arithmetic.reward, "randomwalks": randomwalks.reward}
# What each builtin reward's mean is called in eval metrics: eval/accuracy, eval/optimality.
BUILTIN_EVAL_NAMES: dict[str, str] = {"arithmetic": "accuracy", "randomwalks": "optimality"}


def builtin_examples(name: str, kind: str, *, seed: int, eval_fraction: float) -> Split:
    """The rows of builtin:<name> as `kind`, split by problem into train and eval."""
    kinds = BUILTIN_SOURCES.get(name)
    if kinds is None:
        raise DataError(
            f"builtin:{name} is not a builtin dataset; use one of {', '.join(f'builtin:{n}' for n in BUILTIN_SOURCES)}"
        )
    if kind not in kinds:
        fits = [f"builtin:{n}" for n, k in BUILTIN_SOURCES.items() if kind in k]
        raise DataError(f"builtin:{name} has {'/'.join(kinds)} rows but this run reads {kind} rows; use one of {', '.join(fits)}")
    return kinds[kind](seed=seed, eval_fraction=eval_fraction)


def builtin_task(source: str) -> str | None:
    """The builtin task a data source names (builtin:randomwalks -> randomwalks), if it has a reward."""
    name = source.removeprefix("builtin:") if source.startswith("builtin:") else None
    name = {"arithmetic-graded": "arithmetic", "arithmetic-partly-graded": "arithmetic"}.get(name, name)  # graded
    return name if name in BUILTIN_REWARDS else None


def builtin_reward(name: str) -> Reward:
    """The reward function of a builtin reward spec."""
    try:
        return BUILTIN_REWARDS[name]
    except KeyError:
        raise DataError(f"{name!r} is not a builtin reward; use one of {', '.join(BUILTIN_REWARDS)}") from None
