"""The alert conditions' checks, evaluated by the API's alert loop (api/alerts/service.py) over a run's recent points:
threshold, change and nonfinite for users' rules, and the RL detectors (DETECTORS) that watch every GRPO/PPO run
by default. Each is a pure function, so the API evaluates and the tests check exactly the same thing. The rules
that name them are the contract's (rlplane/alerts.py)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rlplane.comparisons import COMPARE
from rlplane.spec.algorithms import TABLE


@dataclass(frozen=True)
class Verdict:
    firing: bool
    message: str = ""
    # Hysteresis: whether an open alert's condition has cleared. None: as soon as it stops firing. A detector whose
    # signal hovers about its bound says False between its bounds, so its alert neither flaps nor closes too soon.
    cleared: bool | None = None


Points = Sequence[float]  # a metric's recent values, oldest first (NaN/inf as floats)


def _finite(points: Points) -> list[float]:
    return [p for p in points if math.isfinite(p)]


def threshold(points: Points, op: str, value: float, window: int, metric: str) -> Verdict:
    recent = _finite(points[-window:])
    if len(recent) < window:
        return Verdict(False)
    mean = sum(recent) / window
    what = "mean of the last {window} points of {metric}" if window > 1 else "{metric}"
    return Verdict(COMPARE[op](mean, value), f"{what.format(window=window, metric=metric)} is {mean:.4g} ({op} {value:g})")


def change(points: Points, op: str, value: float, window: int, metric: str) -> Verdict:
    if len(points) <= window or not (math.isfinite(points[-1]) and math.isfinite(points[-1 - window])):
        return Verdict(False)
    moved = points[-1] - points[-1 - window]
    return Verdict(COMPARE[op](moved, value), f"{metric} moved by {moved:+.4g} over {window} points ({op} {value:g})")


def nonfinite(points_by_key: Mapping[str, Points]) -> Verdict:
    for key, points in points_by_key.items():
        if points and not math.isfinite(points[-1]):
            return Verdict(True, f"{key} is {'NaN' if math.isnan(points[-1]) else points[-1]}")
    return Verdict(False)


# --- RL detectors: (name, what they read, defaults, the pure check) ---


@dataclass(frozen=True)
class Detector:
    name: str
    summary: str
    check: Callable[[Mapping[str, Points], Mapping[str, float]], Verdict]
    keys: tuple[str, ...]  # the series `check` reads (the API reads only these)

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The algorithms whose runs it watches: the algorithm table says which detectors watch each."""
        return tuple(entry.name for entry in TABLE if self.name in entry.detectors)


def _all_groups_equal(series: Mapping[str, Points], spec: Mapping[str, float]) -> Verdict:
    """Every GRPO group scored its responses the same for `steps` steps: advantages are all zero, nothing is learned."""
    steps = int(spec.get("steps", 5))
    recent = list(series.get("grpo/zero_std_groups", []))[-steps:]
    firing = len(recent) == steps and all(v >= 0.999 for v in recent)
    return Verdict(
        firing, f"every group had the same reward for {steps} steps (grpo/zero_std_groups = 1): the run learns nothing"
    )


def _kl_unbounded(series: Mapping[str, Points], spec: Mapping[str, float]) -> Verdict:
    """KL to the reference above `bound`, or rising at each of the last `steps` steps."""
    bound, steps = spec.get("bound", 10.0), int(spec.get("steps", 10))
    for key in ("grpo/kl", "ppo/kl"):
        points = _finite(series.get(key, []))
        if points and points[-1] > bound:
            return Verdict(True, f"{key} is {points[-1]:.4g}, above {bound:g}")
        recent = points[-steps - 1 :]
        if len(recent) == steps + 1 and all(b > a for a, b in zip(recent, recent[1:], strict=False)) and recent[-1] > 0.1:
            return Verdict(True, f"{key} rose at each of the last {steps} steps, to {recent[-1]:.4g}")
    return Verdict(False)


def _length_at_max(series: Mapping[str, Points], spec: Mapping[str, float]) -> Verdict:
    """Mean response length at max_new_tokens (within 2%) for `steps` steps: responses are cut off, not finished."""
    limit, steps = spec.get("max_new_tokens"), int(spec.get("steps", 5))
    recent = _finite(series.get("gen/response_length", []))[-steps:]
    if not limit or len(recent) < steps:
        return Verdict(False)
    firing = all(v >= 0.98 * limit for v in recent)
    return Verdict(firing, f"mean response length {recent[-1]:.4g} stayed at max_new_tokens {limit:g} for {steps} steps")


def _entropy_collapse(series: Mapping[str, Points], spec: Mapping[str, float]) -> Verdict:
    """Policy entropy per token below `bound` nats: the policy has stopped exploring."""
    bound = spec.get("bound", 0.05)
    for key in ("grpo/entropy", "ppo/entropy"):
        points = _finite(series.get(key, []))
        if points and points[-1] < bound:
            return Verdict(True, f"{key} is {points[-1]:.4g}, below {bound:g} nats per token")
    return Verdict(False)


def _reward_falling(series: Mapping[str, Points], spec: Mapping[str, float]) -> Verdict:
    """reward/mean, smoothed over `window` steps, has lost half of what it gained (from its first window to its peak)
    and the peak is at least `window` steps behind. It clears once the reward has won back half of what it lost
    (within a quarter of the gain below the peak): a smoothed reward about the half-way line fires once."""
    window = int(spec.get("window", 10))
    points = _finite(series.get("reward/mean", []))
    if len(points) < 3 * window:
        return Verdict(False)
    smooth = [sum(points[i - window : i]) / window for i in range(window, len(points) + 1)]
    peak_at = max(range(len(smooth)), key=smooth.__getitem__)
    gain = smooth[peak_at] - smooth[0]
    if gain <= 0 or len(smooth) - 1 - peak_at < window:
        return Verdict(False)
    firing = smooth[-1] < smooth[peak_at] - 0.5 * gain
    cleared = smooth[-1] >= smooth[peak_at] - 0.25 * gain
    return Verdict(
        firing,
        f"reward/mean fell to {smooth[-1]:.4g} from its peak {smooth[peak_at]:.4g} (smoothed over {window} steps)",
        cleared=cleared,
    )


def _held(
    series: Mapping[str, Points], keys: tuple[str, ...], steps: int, holds: Callable[[float], bool]
) -> tuple[str, float] | None:
    """The first of `keys` whose last `steps` finite points all satisfy `holds`: (key, its last value)."""
    for key in keys:
        recent = _finite(series.get(key, []))[-steps:]
        if len(recent) == steps and all(holds(v) for v in recent):
            return key, recent[-1]
    return None


def _mostly_truncated(series: Mapping[str, Points], spec: Mapping[str, float]) -> Verdict:
    """More than `bound` of the responses ran to max_new_tokens (gen/truncated) for `steps` steps: they are cut off, so
    their rewards judge unfinished answers (raise max_new_tokens, or shape overlong responses: grpo.overlong_buffer)."""
    bound, steps = spec.get("bound", 0.5), int(spec.get("steps", 5))
    found = _held(series, ("gen/truncated",), steps, lambda v: v > bound)
    if found is None:
        return Verdict(False)
    return Verdict(True, f"{found[1]:.0%} of responses were cut off at max_new_tokens for {steps} steps (gen/truncated)")


def _prompts_cut(series: Mapping[str, Points], spec: Mapping[str, float]) -> Verdict:
    """More than `bound` of the prompts (with an environment's opening) lost their start to fit model.max_seq_len
    (gen/prompt_cut) for `steps` steps: the policy answers questions it saw only the end of, while the samples show
    them whole (raise model.max_seq_len, or shorten the prompts or the tools' listing)."""
    bound, steps = spec.get("bound", 0.0), int(spec.get("steps", 1))
    found = _held(series, ("gen/prompt_cut",), steps, lambda v: v > bound)
    if found is None:
        return Verdict(False)
    return Verdict(
        True, f"{found[1]:.0%} of prompts lost their start to fit model.max_seq_len (gen/prompt_cut); raise it or shorten them"
    )


def _clipping_heavily(series: Mapping[str, Points], spec: Mapping[str, float]) -> Verdict:
    """The share of clipped tokens above `bound` for `steps` steps: each update moves the policy further than the clip
    allows (a lower lr, fewer epochs, or smaller minibatches)."""
    bound, steps = spec.get("bound", 0.3), int(spec.get("steps", 5))
    found = _held(series, ("grpo/clipfrac", "ppo/clipfrac"), steps, lambda v: v > bound)
    if found is None:
        return Verdict(False)
    return Verdict(True, f"{found[0]} was above {bound:g} for {steps} steps ({found[1]:.3g}): the updates overshoot the clip")


def _critic_blind(series: Mapping[str, Points], spec: Mapping[str, float]) -> Verdict:
    """PPO's value head explains none of the returns' variance (ppo/explained_variance below `bound`) for `steps`
    steps: its advantages are noise (a higher vf_coef, a critic of its own, or a lower lr)."""
    bound, steps = spec.get("bound", 0.0), int(spec.get("steps", 10))
    found = _held(series, ("ppo/explained_variance",), steps, lambda v: v < bound)
    if found is None:
        return Verdict(False)
    return Verdict(
        True, f"ppo/explained_variance stayed below {bound:g} for {steps} steps ({found[1]:.3g}): the critic predicts nothing"
    )


def _async_idle(series: Mapping[str, Points], spec: Mapping[str, float]) -> Verdict:
    """An asynchronous GRPO run's generator or trainer sat idle for more than `bound` of the wall time, on average over
    the last `window` steps: the other side is the bottleneck, and which one says what would speed the run up."""
    bound, window = spec.get("bound", 0.8), int(spec.get("window", 10))
    means: dict[str, float] = {}
    for key in ("async/trainer_idle", "async/generator_idle"):
        recent = _finite(series.get(key, []))[-window:]
        if len(recent) == window:
            means[key] = sum(recent) / window
    if not means:
        return Verdict(False)
    key = max(means, key=means.__getitem__)
    if means[key] <= bound:
        return Verdict(False)
    said = f"{means[key]:.0%} of the time over the last {window} steps ({key})"
    if key == "async/trainer_idle":
        return Verdict(
            True,
            f"the trainer sat waiting for the generator {said}: generation is the bottleneck; try a faster engine "
            "(gen.engine: continuous or vllm), a generator off the trainer's interpreter (grpo.generator: process), or "
            "a larger grpo.max_staleness",
        )
    return Verdict(
        True,
        f"the generator sat waiting on the trainer {said}: training is the bottleneck, so a grpo.max_staleness above 1 "
        "buys nothing but staler samples",
    )


DETECTORS: dict[str, Detector] = {
    d.name: d
    for d in (
        Detector(
            "all_groups_equal",
            "every GRPO group had the same reward for 5 steps",
            _all_groups_equal,
            ("grpo/zero_std_groups",),
        ),
        Detector(
            "kl_unbounded",
            "KL to the reference above 10, or rising for 10 steps",
            _kl_unbounded,
            ("grpo/kl", "ppo/kl"),
        ),
        Detector(
            "length_at_max",
            "mean response length at max_new_tokens for 5 steps",
            _length_at_max,
            ("gen/response_length",),
        ),
        Detector(
            "entropy_collapse",
            "entropy below 0.05 nats per token",
            _entropy_collapse,
            ("grpo/entropy", "ppo/entropy"),
        ),
        Detector(
            "reward_falling",
            "smoothed reward/mean lost half its gain after a peak",
            _reward_falling,
            ("reward/mean",),
        ),
        Detector(
            "mostly_truncated",
            "over half the responses cut off for 5 steps",
            _mostly_truncated,
            ("gen/truncated",),
        ),
        Detector(
            "prompts_cut",
            "prompts cut to fit model.max_seq_len",
            _prompts_cut,
            ("gen/prompt_cut",),
        ),
        Detector(
            "clipping_heavily",
            "over 30% of tokens clipped for 5 steps",
            _clipping_heavily,
            ("grpo/clipfrac", "ppo/clipfrac"),
        ),
        Detector(
            "critic_blind",
            "explained variance below 0 for 10 steps",
            _critic_blind,
            ("ppo/explained_variance",),
        ),
        Detector(
            "async_idle",
            "an asynchronous run's generator or trainer idle over 80% of the time for 10 steps",
            _async_idle,
            ("async/trainer_idle", "async/generator_idle"),
        ),
    )
}
