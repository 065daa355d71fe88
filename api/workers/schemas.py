from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from api.values import INT32_MAX, Step


class Gpu(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int = Field(ge=0, le=1024)
    name: str = Field(max_length=128)
    memory_total_mb: int = Field(ge=0)
    memory_used_mb: int | None = Field(default=None, ge=0)
    utilization: float | None = Field(default=None, ge=0, le=100, description="Percent")


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}$")
    hostname: str = Field(default="", max_length=256)
    queues: list[str] = Field(min_length=1, max_length=32)
    capacity: int = Field(default=1, ge=0, le=1024, description="Runs it can hold at once")
    gpus: list[Gpu] = Field(default_factory=list, max_length=64)
    current_run_id: int | None = Field(default=None, ge=1, le=INT32_MAX)
    last_step: Step | None = None


class WorkerPublic(BaseModel):
    name: str
    hostname: str
    queues: list[str]
    capacity: int
    gpus: list[Gpu]
    current_run_id: int | None = Field(description="Hidden when the run is outside your projects")
    current_run_status: str | None = Field(
        default=None, description="In a heartbeat's answer: the held run's status (cancelling: stop it)"
    )
    last_step: int | None
    first_seen: datetime
    last_heartbeat: datetime
    seconds_since_heartbeat: float
    stale: bool = Field(description="No heartbeat for longer than the API's lost_after_s: its run is (or will be) lost")


class WorkerList(BaseModel):
    data: list[WorkerPublic]
    count: int
