from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

GroupBy = Literal["project", "user", "queue", "run"]


class UsageBucket(BaseModel):
    start: datetime
    gpu_seconds: float
    cpu_slot_seconds: float
    tokens: int = 0


class UsageRow(BaseModel):
    key: str = Field(description="The project, user or queue name; a run's `<id> <name>`")
    gpu_seconds: float = Field(description="GPUs x wall time of the attempts within the period, from start to end")
    cpu_slot_seconds: float = Field(description="Worker slots (one per node) x wall time, for runs on CPU (0 GPUs)")
    tokens: int = Field(
        0,
        description="Input tokens trained on, as each attempt's worker said at its end (spread over its wall time); "
        "attempts that never said (RL recipes, scripts, attempts lost silently) add none",
    )
    tokens_per_gpu_second: float | None = Field(
        None, description="tokens / the GPU-seconds of the attempts that said theirs; null: none on GPUs did"
    )
    attempts: int
    runs: int
    over_time: list[UsageBucket] = Field(default_factory=list, description="Per interval, when one was asked for")


class UsageReport(BaseModel):
    since: datetime
    until: datetime
    by: GroupBy
    interval: Literal["hour", "day"] | None
    data: list[UsageRow] = Field(description="Largest use first")
