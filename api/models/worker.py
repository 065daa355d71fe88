from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base, JsonDoc, UtcDateTime, utcnow


class Worker(Base):
    """The last heartbeat of one worker process, keyed by the name it reports."""

    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))
    hostname: Mapped[str] = mapped_column(String(256), default="")
    address: Mapped[str] = mapped_column(String(256), default="", server_default="")  # where other nodes reach it
    queues: Mapped[list[str]] = mapped_column(JsonDoc)
    capacity: Mapped[int]
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JsonDoc)
    current_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    first_seen: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_heartbeat: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
