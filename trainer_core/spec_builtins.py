"""builtin:<name> models and data, and builtin rewards, must name something that exists: a typo is refused at
submit with the closest name ("did you mean builtin:tiny-sft?"), not found 4 s later on a worker."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from trainer_core.builtin_shapes import BUILTIN_SHAPES
from trainer_core.spec_base import path_fields

if TYPE_CHECKING:
    from trainer_core.spec import RunSpec


class Violation(NamedTuple):  # the shape of spec_rules.Violation, which imports this module
    loc: tuple[str | int, ...]
    msg: str


def unknown(name: str, known: list[str], what: str, prefix: str = "builtin:") -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"did you mean {prefix}{close[0]}? " if close else ""
    return f"{prefix}{name} is not a builtin {what}; {hint}the builtin {what}s are {', '.join(prefix + k for k in known)}"


def builtin_names_exist(spec: RunSpec) -> Iterator[Violation]:
    """builtin:<name> models and data and builtin rewards must exist; a typo is answered with the closest name."""
    from trainer_core.data.tasks import BUILTIN_REWARDS, BUILTIN_SOURCES  # torch-free; loaded only when needed

    for loc, path in path_fields(spec):
        if path.startswith("builtin:") and path.removeprefix("builtin:") not in BUILTIN_SHAPES:
            yield Violation(loc, unknown(path.removeprefix("builtin:"), sorted(BUILTIN_SHAPES), "model"))
    source = spec.data.source
    if source.startswith("builtin:") and source.removeprefix("builtin:") not in BUILTIN_SOURCES:
        yield Violation(("data", "source"), unknown(source.removeprefix("builtin:"), list(BUILTIN_SOURCES), "dataset"))
    rewards = [(("reward",), spec.reward)] if spec.reward is not None else []
    rewards += [(("reward", "terms", i, "source"), t.source) for i, t in enumerate(getattr(spec.reward, "terms", None) or [])]
    for loc, reward in rewards:
        if getattr(reward, "kind", None) == "builtin" and reward.name not in BUILTIN_REWARDS:
            yield Violation((*loc, "name"), unknown(reward.name, list(BUILTIN_REWARDS), "reward", prefix=""))
