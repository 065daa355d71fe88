from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, String, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base, UtcDateTime, utcnow


class RunAttempt(Base):
    """One execution of a run by one worker; its number is the lease's fencing token."""

    __tablename__ = "run_attempts"
    __table_args__ = (UniqueConstraint("run_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    number: Mapped[int]
    worker: Mapped[str] = mapped_column(String(128))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    end_reason: Mapped[str | None] = mapped_column(String(2000))
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    # Given back by its worker on shutdown (SIGTERM): requeued at once and not counted against max_attempts.
    handed_back: Mapped[bool] = mapped_column(default=False, server_default=false())
    failure: Mapped[str | None] = mapped_column(String(16))  # with a failed end: config, diverged or crashed
    # Handed back for this higher-priority run (api/runs/preemption.py).
    preempted_by: Mapped[int | None] = mapped_column()
    # Failed by the API because its script said nothing (api/runs/scripts.py): the script's own end, should it
    # arrive later, replaces that guess.
    fell_silent: Mapped[bool] = mapped_column(default=False, server_default=false())
    # Input tokens its trainer trained on, as its worker last said (with its end); None: never said (lost silently,
    # an RL recipe, a script).
    tokens: Mapped[int | None] = mapped_column(BigInteger)
