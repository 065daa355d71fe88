from datetime import datetime

from pydantic import BaseModel, Field

from rlplane.wire import Gpu, Heartbeat  # noqa: F401 - the worker's records, from the contract


class GangPlace(BaseModel):
    run_id: int
    attempt: int
    node_rank: int
    nodes: int
    workers: list[str] = Field(description="The gang's workers, by node rank")


class WorkerPublic(BaseModel):
    name: str
    hostname: str
    address: str = Field(description="Where the other nodes of a gang reach it")
    queues: list[str]
    capacity: int
    gpus: list[Gpu]
    current_run_id: int | None = Field(description="Hidden when the run is outside your projects")
    current_run_status: str | None = Field(
        default=None, description="In a heartbeat's answer: the held run's status (cancelling: stop it)"
    )
    current_run_attempt: int | None = Field(
        default=None, description="In a heartbeat's answer: the held run's current attempt (another one: stop)"
    )
    current_run_preempted_by: int | None = Field(
        default=None,
        description="In a heartbeat's answer: the higher-priority run the held run is preempted for (hand it back: "
        "checkpoint after the current step, within preempt_grace_s)",
    )
    preempt_grace_s: float | None = Field(
        default=None, description="In a heartbeat's answer that preempts: how long the trainer has for its checkpoint"
    )
    gang: "GangPlace | None" = Field(default=None, description="Its place in the multi-node attempt it works on, if any")
    last_step: int | None
    first_seen: datetime
    last_heartbeat: datetime
    seconds_since_heartbeat: float
    stale: bool = Field(description="No heartbeat for longer than the API's lost_after_s: its run is (or will be) lost")


class WorkerList(BaseModel):
    data: list[WorkerPublic]
    count: int
