"""builtin:<name> models and data, and builtin rewards, must name something that exists: a typo is refused at
submit with the closest name ("did you mean builtin:tiny-sft?"), not found 4 s later on a worker; builtin data must
have the rows the algorithm reads (builtin:tiny-sft for a PPO run is refused, naming the datasets that fit)."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rlplane.spec.base import path_fields
from rlplane.spec.shapes import BUILTIN_SHAPES
from rlplane.spec.violation import Violation

if TYPE_CHECKING:
    from rlplane.spec import RunSpec


# builtin:<name> data -> the kinds of rows it has; the trainer's generators (trainer_core.data.tasks) are these,
# and tests/test_spec.py holds the two lists equal.
BUILTIN_SOURCES: dict[str, tuple[str, ...]] = {
    "arithmetic": ("sft", "preference", "prompts"),
    "tiny-sft": ("sft",),
    "tiny-preference": ("preference",),
    "tiny-prompts": ("prompts",),
    "randomwalks": ("sft", "preference", "prompts"),
    "calculator": ("sft", "prompts"),
    "arithmetic-graded": ("sft", "prompts"),
    "arithmetic-partly-graded": ("sft", "prompts"),
}
# reward: {kind: builtin, name: <name>}
BUILTIN_REWARDS: tuple[str, ...] = ("arithmetic", "randomwalks")


def unknown(name: str, known: list[str], what: str, prefix: str = "builtin:") -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"did you mean {prefix}{close[0]}? " if close else ""
    return f"{prefix}{name} is not a builtin {what}; {hint}the builtin {what}s are {', '.join(prefix + k for k in known)}"


def builtin_names_exist(spec: RunSpec) -> Iterator[Violation]:
    """builtin:<name> models and data and builtin rewards must exist; a typo is answered with the closest name."""
    for loc, path in path_fields(spec):
        if path.startswith("builtin:") and path.removeprefix("builtin:") not in BUILTIN_SHAPES:
            yield Violation(loc, unknown(path.removeprefix("builtin:"), sorted(BUILTIN_SHAPES), "model"))
    source = spec.data.source if spec.data is not None else ""
    name = source.removeprefix("builtin:") if source.startswith("builtin:") else None
    if name is not None and name not in BUILTIN_SOURCES:
        yield Violation(("data", "source"), unknown(name, list(BUILTIN_SOURCES), "dataset"))
    elif name is not None and (reads := spec.rows) and reads not in BUILTIN_SOURCES[name]:
        fits = ", ".join(f"builtin:{n}" for n, kinds in BUILTIN_SOURCES.items() if reads in kinds)
        yield Violation(
            ("data", "source"),
            f"builtin:{name} has {'/'.join(BUILTIN_SOURCES[name])} rows but algorithm {spec.algorithm} reads {reads} "
            f"rows; use one of {fits}",
        )
    rewards = [(("reward",), spec.reward)] if spec.reward is not None else []
    rewards += [(("reward", "terms", i, "source"), t.source) for i, t in enumerate(getattr(spec.reward, "terms", None) or [])]
    for loc, reward in rewards:
        if getattr(reward, "kind", None) == "builtin" and reward.name not in BUILTIN_REWARDS:
            yield Violation((*loc, "name"), unknown(reward.name, list(BUILTIN_REWARDS), "reward", prefix=""))
