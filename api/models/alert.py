from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base, JsonDoc, UtcDateTime, utcnow


class AlertRule(Base):
    """A user's rule (rlplane/alerts.py RuleSpec): a condition over a project's runs (or one run) and actions."""

    __tablename__ = "alert_rules"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    # {condition, actions}: the webhook and notify URLs are secrets, never returned whole or logged.
    spec: Mapped[dict[str, Any]] = mapped_column(JsonDoc)
    muted: Mapped[bool] = mapped_column(default=False)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Alert(Base):
    """A rule or detector that fired on a run: open until its condition clears (status alerts stay), with the
    delivery of its actions recorded attempt by attempt."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ix_alerts_run_source", "run_id", "source"), Index("ix_alerts_state", "state"))

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    rule_id: Mapped[int | None] = mapped_column(ForeignKey("alert_rules.id", ondelete="SET NULL"))
    # "rule:<id>" or "detector:<name>": one open alert per run and source
    source: Mapped[str] = mapped_column(String(160))
    name: Mapped[str] = mapped_column(String(128))
    message: Mapped[str] = mapped_column(String(2000))
    state: Mapped[str] = mapped_column(String(16))  # open, resolved
    fired_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    resolved_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # none (no action to deliver), pending, delivered, failed; each attempt in `deliveries`
    delivery: Mapped[str] = mapped_column(String(16))
    deliveries: Mapped[list[dict[str, Any]]] = mapped_column(JsonDoc)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
