from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlplane.floats import AnyFloat
from rlplane.spec import ALGORITHMS, NodeRole, RunSpec
from rlplane.status import FAILURES, STATUSES
from rlplane.wire import StatusUpdate  # noqa: F401 - the worker's record, from the contract

Status = Literal[STATUSES]  # type: ignore[valid-type]
Failure = Literal[FAILURES]  # type: ignore[valid-type]
Algorithm = Literal[ALGORITHMS]  # type: ignore[valid-type]
RunSort = Literal["created_at", "-created_at", "updated_at", "-updated_at", "name", "-name", "status", "-status", "id", "-id"]


class RunLinkPublic(BaseModel):
    run_id: int
    name: str
    algorithm: str
    status: Status
    field: str = Field(description="Where the child's spec names the parent, e.g. model.path")
    step: int | None


class NodePublic(BaseModel):
    node_rank: int
    role: NodeRole = Field("trainer", description="What it runs: its share of the trainer's ranks, or the generator")
    worker: str
    address: str | None = Field(description="The worker's advertised address (node 0's: the rendezvous)")
    port: int | None = Field(description="Node 0: the rendezvous port; a generator node: its generator's")
    state: Literal["granted", "joined", "ended"]
    ended_at: datetime | None
    end_reason: str | None


class AttemptPublic(BaseModel):
    number: int
    worker: str = Field(description="Its worker; for a multi-node attempt, `gang of N` (its nodes are listed)")
    started_at: datetime
    ended_at: datetime | None
    end_reason: str | None
    last_step: int | None
    handed_back: bool = Field(description="Its worker gave the run back on shutdown; not counted against max_attempts")
    failure: Failure | None = Field(
        None, description="With a failed end, why: config (its spec, data or model), diverged (NaN/inf), crashed"
    )
    nodes: list[NodePublic] = Field(default_factory=list, description="A multi-node attempt's nodes, by node rank")
    preempted_by: int | None = Field(
        None, description="Handed back for this higher-priority run, which could not start otherwise (docs/scheduling.md)"
    )
    gpu_seconds: float = Field(0.0, description="GPUs x its wall time, start to end (now, while it runs)")
    cpu_slot_seconds: float = Field(0.0, description="On a CPU queue: worker slots (nodes) x its wall time")
    tokens: int | None = Field(
        None, description="Input tokens its trainer trained on, as its worker said at its end; null: not said"
    )


class RunPublic(BaseModel):
    id: int
    name: str
    project: str
    algorithm: str
    backend: str
    queue: str
    priority: int = Field(description="0-100 (low 25, normal 50, high 75, urgent 100): waiting runs start highest first")
    preempted_by: int | None = Field(
        description="The waiting higher-priority run this run's current attempt is being handed back for, until it ends"
    )
    status: Status
    status_reason: str
    archived: bool
    total_steps: int
    last_step: int | None
    created_by: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    failure: Failure | None = Field(description="Why a failed run failed: config, diverged or crashed")
    resumable: bool = Field(
        description="POST /resume would requeue it: failed, cancelled or lost, and not failed on its own configuration "
        "or by diverging (it would fail the same way)"
    )
    config: dict[str, Any] = Field(
        description="A few spec fields for lists and tables: model, lr, batch_size, steps, backend, precision, and "
        "decoding (how its accuracies were drawn: greedy or sampled at T=<temperature>; eval, grpo and ppo runs)"
    )


class RunOutput(BaseModel):
    step: int
    path: str = Field(description="Relative to the artifact root")
    size: int
    sha256: str


class SlurmJobPublic(BaseModel):
    """A Slurm job of a run on a queue bound to a Slurm cluster: one per attempt it served (docs/slurm.md)."""

    job_id: int
    state: str = Field(description="squeue's: PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, CANCELLED, ...")
    reason: str | None = Field(description="While pending, Slurm's reason: Resources, Priority, QOSMaxGpuPerUser, ...")
    node_list: str | None = Field(description="Its nodes once running, in Slurm's notation (n[1-2])")
    restarts: int = Field(description="How often Slurm requeued it (a node failure): each time its workers start anew")
    output: str = Field(description="The batch script's output file, in the queue's job directory")
    submitted_at: datetime
    ended_at: datetime | None


class RunDetail(RunPublic):
    spec: RunSpec = Field(description="The spec with every default filled in, as it was stored at submit")
    spec_text: str | None = Field(
        description="The spec as it was submitted (YAML comments kept; JSON as sent); null for runs from before it was kept"
    )
    parents: list[RunLinkPublic]
    children: list[RunLinkPublic]
    attempts: list[AttemptPublic]
    slurm_jobs: list[SlurmJobPublic] = Field(default_factory=list, description="Its Slurm jobs, oldest first")
    gpu_seconds: float = Field(0.0, description="The sum of its attempts' GPU-seconds (docs/scheduling.md, usage)")
    cpu_slot_seconds: float = Field(0.0, description="The sum of its attempts' worker-slot-seconds, on a CPU queue")
    latest_checkpoint_step: int | None
    output: RunOutput | None = Field(
        description="The final model export, once registered (download: checkpoints/{step}/files?kind=export)"
    )
    environment: dict[str, Any] | None = Field(
        None,
        description="Where a command run's script ran, as the SDK recorded it: python, packages (name: version), "
        "hostname, platform, argv, cwd, config, and git (commit, dirty, diff) for a script started outside a worker",
    )


class ScriptedRunCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spec: dict[str, Any] = Field(description="A run spec of algorithm command; command.external is set for you")
    environment: dict[str, Any] | None = Field(
        None, description="Where the script runs (interpreter, packages, machine, git), as POST /runs/{id}/environment"
    )


class SpecWarningPublic(BaseModel):
    loc: list[str] = Field(description="The field, as a path into the spec (like an error's loc)")
    msg: str


class RunCreated(RunDetail):
    warnings: list[SpecWarningPublic] = Field(description="Settings accepted but almost certainly a mistake (train.lr >= 1)")


class HeadlineMetric(BaseModel):
    key: str
    step: int
    value: AnyFloat


class RunListItem(RunPublic):
    headline: HeadlineMetric | None = Field(
        description="The metric that says most about a run of its algorithm (eval/loss, else train/loss for SFT; "
        "reward/mean for PPO and GRPO; ...) at its last logged step; null while it has logged none of them"
    )


class RunList(BaseModel):
    data: list[RunListItem]
    count: int


class SpecCheck(BaseModel):
    valid: Literal[True] = True
    spec: dict[str, Any] = Field(description="The spec with every default filled in, as a submit would store it")
    total_steps: int
    parents: list[RunLinkPublic] = Field(description="The runs this spec names (model: run:<id>@<step>, ...)")
    warnings: list[SpecWarningPublic] = Field(description="Settings accepted but almost certainly a mistake (train.lr >= 1)")


class Lineage(BaseModel):
    run_id: int
    parents: list[RunLinkPublic]
    children: list[RunLinkPublic]


class LeaseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    worker: str = Field(min_length=1, max_length=128, description="The leasing worker's name")
