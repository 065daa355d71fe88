from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.values import Step
from rlplane.floats import AnyFloat

CheckpointKind = Literal["checkpoint", "export"]


class CheckpointCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: Step
    kind: CheckpointKind = Field(
        default="checkpoint", description="checkpoint: full training state; export: the final model as a plain HF directory"
    )
    path: str = Field(min_length=1, max_length=1024, description="Relative to the artifact root, e.g. runs/12/step-100")
    size: int = Field(ge=0, description="Total bytes")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Of the manifest or the single file")
    metadata: dict[str, Any] = Field(default_factory=dict)


class CheckpointEvaluation(BaseModel):
    """An eval run of this checkpoint (its spec's model.path names it) and what it has reported so far."""

    run_id: int
    name: str
    status: str
    data: str = Field(description="The eval run's data.source")
    reward: str = Field(
        description="What judges the eval run's answers, in short: its reward (builtin:<name>, model:<path>, "
        "python:<entrypoint>, ...), or its environment (environment:builtin:calculator, environment:openenv, ...; "
        "+ the reward it adds)"
    )
    samples: int = Field(description="Answers per prompt")
    decoding: str | None = Field(description="How its answers were drawn: greedy, or sampled at T=<temperature>")
    metrics: dict[str, AnyFloat] = Field(description="The last value of each eval/* metric, e.g. eval/pass@4")


class CheckpointPublic(BaseModel):
    id: int
    run_id: int
    step: int
    kind: CheckpointKind
    path: str
    size: int
    sha256: str
    metadata: dict[str, Any]
    created_at: datetime
    evaluations: list[CheckpointEvaluation] = Field(
        default_factory=list, description="Eval runs of this checkpoint (an export: of the run's output), oldest first"
    )


class CheckpointList(BaseModel):
    data: list[CheckpointPublic]
    count: int


class CheckpointFile(BaseModel):
    name: str = Field(description="Path inside the checkpoint; append it to .../files/ to download")
    size: int


class CheckpointFileList(BaseModel):
    data: list[CheckpointFile]
    count: int


class DownloadUrlCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str | None = Field(
        default=None, max_length=1024, description="A file of the checkpoint (a name from .../files); omitted: the whole tar"
    )


class DownloadUrl(BaseModel):
    url: str = Field(
        description="The download route with ?kind, expires, token_id and sig instead of the bearer token, relative to the "
        "API's origin; no Authorization header needed"
    )
    expires_at: datetime = Field(description="Follow it before then (a download already started is not cut off)")
