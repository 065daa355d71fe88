"""Alert rules: what to watch in a run's metrics and status, and the RL detectors every RL run gets by default.

A rule is a condition and actions. Conditions are read from a run's recent points (oldest first), never code:

    threshold  the mean of the last `window` points of `metric` compared with `value` (train/loss > 5)
    change     the last point minus the point `window` points before it, compared with `value` (a fall of 0.5: < -0.5)
    nonfinite  a NaN or infinite point of `metric` (any metric if unset)
    stalled    a running run whose step has not moved for `minutes`
    status     the run became one of `statuses` (failed, lost, succeeded, cancelled)
    detector   one of DETECTORS, with its own parameters (a rule for it replaces its default; a muted one silences it)

The detectors are conditions over the metrics our RL recipes log, with defaults; they watch every GRPO/PPO run
unless a project mutes them. Their checks are the API's (api/alerts/detectors.py): a rule names one here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from rlplane.comparisons import Op
from rlplane.spec.algorithms import DETECTOR_NAMES
from rlplane.spec.base import Name, StrictModel

METRIC_KEY = r"^[A-Za-z0-9_./-]{1,256}$"


class Threshold(StrictModel):
    kind: Literal["threshold"]
    metric: str = Field(pattern=METRIC_KEY)
    op: Op
    value: float
    window: int = Field(1, ge=1, le=1000, description="Mean of the last N points (1: the last point).")


class Change(StrictModel):
    kind: Literal["change"]
    metric: str = Field(pattern=METRIC_KEY)
    op: Op
    value: float = Field(description="Compared with (last point - the point `window` points before it).")
    window: int = Field(10, ge=1, le=1000)


class NonFinite(StrictModel):
    kind: Literal["nonfinite"]
    metric: str | None = Field(None, pattern=METRIC_KEY, description="A metric; unset: any metric of the run.")


class Stalled(StrictModel):
    kind: Literal["stalled"]
    minutes: float = Field(gt=0, le=7 * 24 * 60)


class StatusChange(StrictModel):
    kind: Literal["status"]
    statuses: list[Literal["failed", "lost", "succeeded", "cancelled"]] = Field(min_length=1)


class DetectorRule(StrictModel):
    """A built-in detector with its own parameters (and actions); muting such a rule mutes that detector for the
    project's runs (or the one run)."""

    kind: Literal["detector"]
    name: Literal[DETECTOR_NAMES]  # type: ignore[valid-type]  (the algorithm table's: one list of them)
    params: dict[str, float] = Field(default_factory=dict, description="Overrides of the detector's defaults.")


Condition = Annotated[Threshold | Change | NonFinite | Stalled | StatusChange | DetectorRule, Field(discriminator="kind")]


class Actions(StrictModel):
    webhook: str | None = Field(
        None,
        max_length=2000,
        description="POST a Slack-compatible JSON message ({text, ...}) here; the URL is a secret (never logged or shown).",
    )
    notify: list[str] = Field(
        default_factory=list,
        max_length=10,
        description="Apprise URLs (mailto://, discord://, json://, ...): any service apprise knows; secrets too.",
    )
    stop_run: bool = Field(False, description="Cancel the run when the alert fires.")

    @field_validator("webhook")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError("a webhook is an http:// or https:// URL (use notify for other services)")
        return url


class RuleSpec(StrictModel):
    name: Name
    project: Name = "default"
    run_id: int | None = Field(None, ge=1, description="Only this run; unset: every run of the project.")
    condition: Condition
    actions: Actions = Field(default_factory=Actions)
