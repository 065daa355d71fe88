"""The records a worker and the API exchange: the lease (with the run's typed spec), status updates and
heartbeats. The API validates requests with these same models; the worker builds them and parses the lease
once, so no side restates the other's defaults."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlplane.limits import MAX_REASON_CHARS
from rlplane.spec import RunSpec
from rlplane.status import Failure

INT32_MAX = 2**31 - 1  # INTEGER columns: ids, attempt, seq
STEP_MAX = 2**62  # BIGINT step columns, with headroom
# strict: JSON `true` or "5" is not a step.
Step = Annotated[int, Field(ge=0, le=STEP_MAX, strict=True)]


class LeasedRun(BaseModel):
    """What a worker reads of the leased run (the API's answer holds the whole run detail)."""

    model_config = ConfigDict(extra="ignore")
    id: int
    spec: RunSpec


class Lease(BaseModel):
    """The answer to POST /runs/{id}/lease, as a worker reads it."""

    model_config = ConfigDict(extra="ignore")
    run: LeasedRun
    attempt: int = Field(description="Fencing token: send it with every status update of this attempt")
    resume_from_step: int | None = Field(description="Latest checkpoint to resume from, if any")


class StatusUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    attempt: int = Field(ge=1, le=INT32_MAX, description="The fencing token from the lease")
    status: Literal["running", "succeeded", "failed", "cancelled", "lost"]
    reason: str = Field(default="", max_length=MAX_REASON_CHARS)
    last_step: Step | None = None
    failure: Failure | None = Field(
        default=None, description="With status failed: config (exit 2: the spec, data or model), diverged (exit 3), crashed"
    )
    handed_back: bool = Field(
        default=False,
        description="With status lost: the worker is shutting down and gives the run back; it is requeued at once "
        "and this attempt does not count against resources.max_attempts",
    )


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
