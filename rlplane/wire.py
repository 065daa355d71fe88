"""The records a worker and the API exchange: the lease (with the run's typed spec), status updates and
heartbeats. The API validates requests with these same models; the worker builds them and parses the lease
once, so no side restates the other's defaults."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from rlplane.limits import MAX_REASON_CHARS
from rlplane.spec import NodeRole, RunSpec
from rlplane.status import Failure

INT32_MAX = 2**31 - 1  # INTEGER columns: ids, attempt, seq
STEP_MAX = 2**62  # BIGINT step columns, with headroom
# strict: JSON `true` or "5" is not a step.
Step = Annotated[int, Field(ge=0, le=STEP_MAX, strict=True)]


class LeasedRun(BaseModel):
    """What a worker reads of the run it leased: its typed spec and where it resumes."""

    model_config = ConfigDict(extra="ignore")
    id: int
    spec: RunSpec
    latest_checkpoint_step: int | None = None  # the newest registered: where every node of a gang resumes


class Lease(BaseModel):
    """The answer to POST /runs/{id}/lease, as a worker reads it."""

    model_config = ConfigDict(extra="ignore")
    run: LeasedRun
    attempt: int = Field(description="Fencing token: send it with every status update of this attempt")
    resume_from_step: int | None = Field(description="Latest checkpoint to resume from, if any")


# The Celery tasks the API sends: a one-node run to its queue, where any worker serving it may lease it; one node
# of a gang to the worker the API granted it to, on that worker's own queue.
LAUNCH_TASK = "runs.launch"
NODE_TASK = "runs.node"


def node_queue(worker: str) -> str:
    """The broker queue only `worker` consumes: where its share of a multi-node attempt is sent."""
    return f"node.{worker}"


class NodeJoin(BaseModel):
    """POST /runs/{id}/attempts/{n}/nodes/{r}/join: a worker takes the node slot the API granted it, with its address
    and a free port there. The API keeps node 0's (the rendezvous) and a generator node's (where its generator
    listens); the two must bring them."""

    model_config = ConfigDict(extra="forbid")
    worker: str = Field(min_length=1, max_length=128)
    address: str | None = Field(
        default=None, max_length=256, description="Node 0: where the other nodes reach it; a generator node: its generator"
    )
    port: int | None = Field(
        default=None, ge=1, le=65535, description="Node 0: the rendezvous port it chose; a generator node: its generator's"
    )


class Rendezvous(BaseModel):
    """Where every node of an attempt meets: node 0's address and port (None until node 0 has joined), and where a
    generator node's generator listens (None until it has joined, or without one)."""

    model_config = ConfigDict(extra="ignore")
    nodes: int
    master_address: str | None = None
    master_port: int | None = None
    generator_address: str | None = Field(default=None, description="grpo.generator node: where the trainer reaches it")
    generator_port: int | None = None
    ended: bool = Field(default=False, description="The attempt is over (failed, lost, cancelled): do not start")


class NodeLease(BaseModel):
    """The answer to a join, as a worker reads it."""

    model_config = ConfigDict(extra="ignore")
    run: LeasedRun
    attempt: int = Field(description="Fencing token of every node of the attempt")
    node_rank: int
    role: NodeRole = Field(default="trainer", description="What it runs: its share of the trainer's ranks, or the generator")
    rendezvous: Rendezvous


EXITED_AT = (
    "When the worker saw its trainer exit (UTC): of a gang's nodes that failed, the first to exit is named as the attempt's cause"
)


class NodeEnd(BaseModel):
    """POST /runs/{id}/attempts/{n}/nodes/{r}/end: how a node other than 0 ended its part (node 0 sends the
    run's statuses, as a one-node attempt does). A non-zero exit ends the whole attempt."""

    model_config = ConfigDict(extra="forbid")
    exit_code: int | None = Field(default=None, ge=-255, le=255, description="The trainer's; None: it was stopped")
    reason: str = Field(default="", max_length=MAX_REASON_CHARS)
    failure: Failure | None = None
    exited_at: AwareDatetime | None = Field(default=None, description=EXITED_AT)


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
    exited_at: AwareDatetime | None = Field(default=None, description=EXITED_AT)
    tokens: int | None = Field(
        default=None,
        ge=0,
        le=STEP_MAX,
        description="Input tokens this attempt's trainer trained on so far (its last perf/attempt_tokens); the usage "
        "reports add them up",
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
    current_attempt: int | None = Field(default=None, ge=1, le=INT32_MAX, description="Of the run it holds")
    last_step: Step | None = None
    address: str = Field(default="", max_length=256, description="Where other nodes of a gang reach this worker")
