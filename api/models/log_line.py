from sqlalchemy import Float, ForeignKey, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base, BigId


class LogLine(Base):
    """A log line of one rank in one attempt; (run, attempt, rank, seq) makes re-sent batches harmless."""

    __tablename__ = "log_lines"
    __table_args__ = (UniqueConstraint("run_id", "attempt", "rank", "seq"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    attempt: Mapped[int]
    rank: Mapped[int]
    seq: Mapped[int]
    text: Mapped[str] = mapped_column(Text)
    time: Mapped[float] = mapped_column(Float(precision=53))
