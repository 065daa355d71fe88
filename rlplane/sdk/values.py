"""What the SDK's calls accept, checked at the call: a bad metric raises there, in the training script, where the
line that made it is in the traceback (not as a 422 in a background thread minutes later)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from numbers import Real
from typing import Any

from rlplane.limits import KEY_PATTERN
from rlplane.reporting.events import Sample

_KEY = re.compile(KEY_PATTERN)
_SAMPLE_FIELDS = ("prompt", "response", "reward", "kl", "label", "reference", "scores", "advantage", "group", "turns")
ROLES = ("policy", "environment")
LABELS = ("rollout", "generation", "chosen", "rejected")


class SdkError(ValueError):
    """A call the API would refuse; the message names the argument and the fix."""


def number(value: Any, where: str) -> float:
    """A real number (int, float, numpy or 0-d torch scalar) as a float; NaN and infinity are kept (the API stores
    them, and a diverging run should show it)."""
    if isinstance(value, bool) or value is None:
        raise SdkError(f"{where}: {value!r} is not a number; log numbers only (a bool as 0/1: int(flag))")
    if isinstance(value, Real):
        return float(value)
    item = getattr(value, "item", None)  # numpy scalars and one-element tensors
    if callable(item) and getattr(value, "ndim", 0) == 0:
        return number(item(), where)
    raise SdkError(f"{where}: {type(value).__name__} {str(value)[:80]!r} is not a number; log a float (e.g. loss.item())")


def check_key(key: Any) -> str:
    if not isinstance(key, str) or not _KEY.match(key):
        raise SdkError(f"metric key {key!r}: use 1-256 letters, digits and _ . / @ : - (namespaced with /, e.g. train/loss)")
    return key


def check_step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0 or step > 2**62:
        raise SdkError(f"step {step!r}: give a whole number >= 0 (the training step the values belong to)")
    return step


def metrics(values: Mapping[str, Any]) -> dict[str, float]:
    if not isinstance(values, Mapping):
        raise SdkError(f"log() takes a mapping of metric key to number, not {type(values).__name__}")
    return {check_key(key): number(value, f"metric {key!r}") for key, value in values.items()}


def sample(item: Mapping[str, Any], where: str) -> Sample:
    """One response as the API stores it. `advantage` and any `scores` go to scores; `group` (GRPO's prompt group)
    is kept as scores["group"] when it is a number, and otherwise the prompt is the group, as for our recipes."""
    if not isinstance(item, Mapping):
        raise SdkError(f"{where}: a sample is a mapping with prompt and response, not {type(item).__name__}")
    unknown = sorted(set(item) - set(_SAMPLE_FIELDS))
    if unknown:
        raise SdkError(f"{where}: unknown field(s) {', '.join(unknown)}; a sample has {', '.join(_SAMPLE_FIELDS)}")
    for name in ("prompt", "response"):
        if not isinstance(item.get(name), str):
            raise SdkError(f"{where}.{name}: give the text (a str)")
    scores = {}
    for name, value in dict(item.get("scores") or {}).items():
        scores[str(name)] = number(value, f"{where}.scores[{name!r}]")
    if item.get("advantage") is not None:
        scores["advantage"] = number(item["advantage"], f"{where}.advantage")
    if item.get("group") is not None:
        scores["group"] = number(item["group"], f"{where}.group")
    label = item.get("label")
    if label is not None and label not in LABELS:
        raise SdkError(f"{where}.label: {label!r} is not one of {', '.join(LABELS)}")
    reference = item.get("reference")
    turns = item.get("turns")
    if turns is not None:
        turns = tuple(_turn(turn, f"{where}.turns[{i}]") for i, turn in enumerate(_listed(turns, f"{where}.turns")))
    return Sample(
        prompt=item["prompt"],
        response=item["response"],
        reward=None if item.get("reward") is None else number(item["reward"], f"{where}.reward"),
        kl=None if item.get("kl") is None else number(item["kl"], f"{where}.kl"),
        scores=scores,
        label=label,
        reference=None if reference is None else str(reference),
        turns=turns,
    )


def _listed(value: Any, where: str) -> Sequence[Any]:
    if isinstance(value, str | Mapping) or not isinstance(value, Sequence):
        raise SdkError(f"{where}: give a list of turns, each {{'role': 'policy' or 'environment', 'text': ...}}")
    return value


def _turn(turn: Any, where: str) -> tuple[str, str]:
    """A multi-turn episode's turn: the policy's or the environment's, with its text."""
    if not isinstance(turn, Mapping) or turn.get("role") not in ROLES or not isinstance(turn.get("text"), str):
        raise SdkError(f"{where}: a turn is {{'role': 'policy' or 'environment', 'text': a str}}, not {turn!r:.100}")
    return turn["role"], turn["text"]


def samples(items: Sequence[Mapping[str, Any]]) -> list[Sample]:
    if isinstance(items, Mapping) or not isinstance(items, Sequence):
        raise SdkError("log_samples() takes a list of samples (mappings with prompt, response, reward, ...)")
    return [sample(item, f"samples[{i}]") for i, item in enumerate(items)]
