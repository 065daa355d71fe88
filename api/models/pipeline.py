from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base, JsonDoc, UtcDateTime, utcnow


class Pipeline(Base):
    """A chain of stages submitted once (rlplane/pipeline.py); its stages' runs are ordinary runs."""

    __tablename__ = "pipelines"
    __table_args__ = (Index("ix_pipelines_project_created", "project_id", "created_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(128))
    # running, succeeded, failed, cancelled
    status: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str] = mapped_column(String(2000), default="")
    document: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    # Stages start as this user (their runs are created with the user's project roles at that moment).
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class PipelineStage(Base):
    __tablename__ = "pipeline_stages"
    __table_args__ = (UniqueConstraint("pipeline_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    pipeline_id: Mapped[int] = mapped_column(ForeignKey("pipelines.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    position: Mapped[int]
    # The stage's document ({spec, needs, when, best}); a replace changes its spec.
    stage: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    needs: Mapped[list[str]] = mapped_column(JsonDoc)
    # waiting, running, succeeded, failed, skipped, cancelled, stale
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String(2000), default="")
    # The latest run; every run the stage had, oldest first, in `runs`.
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), index=True)
    runs: Mapped[list[int]] = mapped_column(JsonDoc)
    # A tuned stage's sweep (its `sweep` field); its run_id is the best trial's once the sweep has ended.
    sweep_id: Mapped[int | None] = mapped_column(ForeignKey("sweeps.id", ondelete="SET NULL"))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
