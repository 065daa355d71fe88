from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base, JsonDoc, UtcDateTime, utcnow


class Sweep(Base):
    """A search over a run spec's fields (rlplane/sweep.py); its trials are ordinary runs."""

    __tablename__ = "sweeps"
    __table_args__ = (Index("ix_sweeps_project_created", "project_id", "created_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16), index=True)  # running, succeeded, failed, cancelled
    reason: Mapped[str] = mapped_column(String(2000), default="")
    document: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class SweepTrial(Base):
    __tablename__ = "sweep_trials"
    __table_args__ = (UniqueConstraint("sweep_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), index=True)
    number: Mapped[int]
    params: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), index=True)
    state: Mapped[str] = mapped_column(String(16))  # running, complete, pruned, failed, cancelled
    value: Mapped[float | None] = mapped_column(Float(precision=53))
    reason: Mapped[str] = mapped_column(String(2000), default="")
    # The pruner's own notes on the trial (successive halving's rungs), kept so a rebuilt study remembers them.
    attrs: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
