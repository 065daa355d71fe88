"""What a valid spec may still get wrong: settings that are allowed but almost certainly a mistake. A submit
with them is accepted and answered with these warnings (the API's 201 and /runs/validate, the CLI, the New run
page); a refusal is for what cannot run (rules.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from rlplane.spec import RunSpec

# AdamW at lr >= 1 moves every weight by about lr per step: no model trains like that.
ADAMW_LR_LIMIT = 1.0


class SpecWarning(NamedTuple):
    loc: tuple[str, ...]
    msg: str


def spec_warnings(spec: RunSpec) -> list[SpecWarning]:
    found = []
    if spec.train.lr >= ADAMW_LR_LIMIT:
        found.append(
            SpecWarning(
                ("train", "lr"),
                f"train.lr {spec.train.lr:g} is almost certainly a mistake: AdamW moves every weight by about lr per "
                "step, so the run will diverge; fine-tuning uses 1e-6 to 1e-4 (tiny builtin models up to ~5e-3)",
            )
        )
    return found
