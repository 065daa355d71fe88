from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base, JsonDoc, UtcDateTime, utcnow


class Checkpoint(Base):
    """A registered full-state checkpoint (kind "checkpoint") or the run's final model export (kind
    "export", a plain Hugging Face directory); `path` is relative to the artifact root."""

    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("run_id", "step", "kind"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16), default="checkpoint", server_default="checkpoint")
    path: Mapped[str] = mapped_column(String(1024))
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JsonDoc)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
