from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from rlplane.floats import AnyFloat

SweepStatus = Literal["running", "succeeded", "failed", "cancelled"]
# queued: running as the sweep sees it, its run still waiting for a worker
TrialState = Literal["queued", "running", "complete", "pruned", "failed", "cancelled"]


class TrialPublic(BaseModel):
    number: int
    params: dict[str, Any] = Field(description="The trial's value at each searched path")
    run_id: int | None
    run_status: str | None
    state: TrialState
    value: AnyFloat | None = Field(description="The metric's last value, once the trial's run succeeded")
    reason: str | None = Field(description="Why it was stopped early or failed")
    decoding: str | None = Field(
        default=None, description="How its run drew its answers (its config's decoding): beside an accuracy metric"
    )


class SweepSummary(BaseModel):
    id: int
    name: str
    project: str
    status: SweepStatus
    method: str
    metric: str
    goal: Literal["min", "max"]
    trials: int = Field(description="Trials started so far")
    budget: int
    best_value: AnyFloat | None
    created_at: datetime
    updated_at: datetime


class SweepDetail(SweepSummary):
    reason: str | None
    parallel: int
    space: dict[str, Any]
    early_stopping: dict[str, Any] | None
    best: TrialPublic | None
    trial_list: list[TrialPublic]


class SweepList(BaseModel):
    items: list[SweepSummary]
