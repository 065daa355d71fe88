from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from rlplane.floats import AnyFloat

PipelineStatus = Literal["running", "succeeded", "failed", "cancelled"]
StageStatus = Literal["waiting", "running", "succeeded", "failed", "skipped", "cancelled", "stale"]


class StageBrief(BaseModel):
    name: str
    status: StageStatus


class Headline(BaseModel):
    key: str
    value: AnyFloat | None = Field(description="The last value logged; null if it was NaN")
    decoding: str | None = Field(default=None, description="How the stage's run drew its answers (its config's decoding)")


class StagePublic(BaseModel):
    name: str
    status: StageStatus
    reason: str | None = Field(description="Why it was skipped, failed, is stale or was retried")
    needs: list[str] = Field(description="The stages it waits for: the graph's edges")
    when: str | None = Field(description="Its gate, if any")
    gate: list[str] = Field(
        default_factory=list,
        description="Each comparison of its gate with the value it reads now, and whether it holds "
        '(`stages.sft.metrics["eval/loss"] < 1.5: it is 1.2, holds`); empty without a gate',
    )
    run_id: int | None = Field(description="Its latest run")
    run_status: str | None
    runs: list[int] = Field(description="Every run it has had, oldest first")
    sweep_id: int | None = Field(description="A tuned stage's sweep; its run is the best trial's once it has ended")
    headline: Headline | None = Field(
        description="Its `best` metric if set, else the metric the runs list shows for its algorithm (eval/loss or "
        "train/loss for sft, reward/mean for grpo and ppo, eval/accuracy or eval/success for eval, ...): the last value"
    )


class PipelineSummary(BaseModel):
    id: int
    name: str
    project: str
    status: PipelineStatus
    created_at: datetime
    updated_at: datetime
    stages: list[StageBrief]


class PipelineDetail(BaseModel):
    id: int
    name: str
    project: str
    status: PipelineStatus
    reason: str | None
    created_at: datetime
    updated_at: datetime
    stages: list[StagePublic]
    document: dict[str, Any] = Field(description="The pipeline as submitted (after replaces: as it stands)")


class PipelineList(BaseModel):
    items: list[PipelineSummary]


class StageRetry(BaseModel):
    spec: dict[str, Any] | None = Field(
        None, description="A new run spec for the stage (a replace); omitted: run it again as it is"
    )


class StageNeeds(BaseModel):
    name: str
    needs: list[str]


class PipelineCheck(BaseModel):
    valid: Literal[True] = True
    stages: list[StageNeeds] = Field(description="Each stage and the stages it waits for, in document order")
