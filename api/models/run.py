from datetime import datetime
from functools import cached_property
from typing import Any

from pydantic import ValidationError
from sqlalchemy import BigInteger, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from api.exceptions import Conflict
from api.models.base import Base, JsonDoc, UtcDateTime, utcnow
from rlplane.spec import RunSpec


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_project_created", "project_id", "created_at"),
        Index("ix_runs_status", "status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(128), index=True)
    algorithm: Mapped[str] = mapped_column(String(16), index=True)
    backend: Mapped[str] = mapped_column(String(16))
    queue: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str] = mapped_column(String(2000), default="")
    spec: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    # The body as it was submitted (YAML comments kept), shown by the Spec tab and used by Clone; null before 0005.
    spec_text: Mapped[str | None] = mapped_column(Text)
    # A few spec fields for run lists (views.config_summary): the list does not load the spec itself.
    config: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc)
    # Where it ran, as its script recorded it through the SDK (POST /runs/{id}/environment); null for our recipes
    environment: Mapped[dict[str, Any] | None] = mapped_column(JsonDoc, deferred=True)
    # Started by its own script (rlplane.init: spec.command.external), so no worker can run it again. A column, not
    # read from the spec: run lists do not load the spec.
    scripted: Mapped[bool] = mapped_column(default=False)
    # Why the run last failed: config (its spec, data or model), diverged (train.on_nonfinite), crashed.
    failure: Mapped[str | None] = mapped_column(String(16))
    total_steps: Mapped[int]
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    archived: Mapped[bool] = mapped_column(default=False)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # The lease: which token's worker executes the current attempt, fenced by the attempt number.
    lease_token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))
    attempt_count: Mapped[int] = mapped_column(default=0)
    # resources.priority, or its project's default, at submit (api/runs/priorities.py): waiting runs start highest first.
    priority: Mapped[int] = mapped_column(default=50, server_default="50")
    # What it holds of its queue while active (api/runs/quotas.py): GPUs per node, and GPUs in all (gpus x nodes) or,
    # on a CPU queue, worker slots (nodes). Columns, so quotas and usage are counted without reading specs.
    gpus: Mapped[int] = mapped_column(default=0, server_default="0")
    slots: Mapped[int] = mapped_column(default=1, server_default="1")
    # The waiting run this one's current attempt is being handed back for (api/runs/preemption.py), until it ends.
    preempted_by: Mapped[int | None] = mapped_column()

    @cached_property
    def run_spec(self) -> RunSpec:
        """The stored spec, typed: the API reads a run's spec through this, so the contract's defaults and rules
        (its nodes, ranks, roles, attempts) are never restated here. A spec is stored as its model dumped at submit
        and never changes after, so it is parsed once per loaded row. One this version no longer accepts (stored by
        an older one) is a Conflict that says so, never a server error."""
        try:
            return RunSpec.model_validate(self.spec)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise Conflict(
                f"run {self.id}'s stored spec does not validate with this version of rlplane ({where}: {first['msg']})"
            ) from None
