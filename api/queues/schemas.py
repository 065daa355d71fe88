from pydantic import BaseModel, Field


class Holding(BaseModel):
    """What one project's active runs hold of a queue, beside its quota there."""

    project: str = Field(description="`(other projects)`: those you may not read, together")
    slots: int = Field(description="GPUs on a GPU queue (resources.gpus x nodes); worker slots (nodes) on a CPU queue")
    runs: int
    max_gpus: int | None = Field(description="Its quota on the queue, in the unit of slots; null: none")
    max_runs: int | None


class Waiting(BaseModel):
    """A queued run, in the order runs start: highest priority first, then oldest."""

    run_id: int | None = Field(description="Null for a run in a project you cannot read")
    name: str | None
    project: str = Field(description="`(other projects)` for a project you may not read")
    priority: int
    reason: str = Field(description="Why it waits: its queue's workers are busy, its project's quota, a gang's nodes, ...")


class QueuePublic(BaseModel):
    name: str
    workers: int = Field(description="Live workers serving it")
    idle: int = Field(description="Of those, holding no run and taking runs")
    gpus: int = Field(description="GPUs of its live workers")
    holding: list[Holding] = Field(description="Each project's share of it now, largest first")
    waiting: list[Waiting]


class QueueList(BaseModel):
    data: list[QueuePublic]
