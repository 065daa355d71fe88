from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base, UtcDateTime, utcnow


class AttemptNode(Base):
    """One worker's share of a multi-node attempt (a gang): granted with the others in one transaction.

    Node 0 publishes the rendezvous (its address and a port it chose) when it joins; the others start
    their ranks against it. The attempt's number stays the fencing token of every node."""

    __tablename__ = "attempt_nodes"
    __table_args__ = (UniqueConstraint("run_id", "attempt", "node_rank"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int]
    node_rank: Mapped[int]
    worker: Mapped[str] = mapped_column(String(128), index=True)
    address: Mapped[str | None] = mapped_column(String(256))  # the worker's advertised address when granted
    port: Mapped[int | None] = mapped_column(Integer)  # node 0's rendezvous port, once it joined
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))
    granted_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    joined_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    end_reason: Mapped[str | None] = mapped_column(String(2000))
    # When its worker saw its trainer fail (its own clock): of the nodes that failed, the first names the cause
    exited_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # Ended because another node ended the attempt, not by its own word: what happened to it may be learnt later
    # (its worker found dead, its own late report), and then said here and in the attempt's reason
    stopped_with_attempt: Mapped[bool] = mapped_column(default=False, server_default=false())

    @property
    def state(self) -> str:
        return "ended" if self.ended_at else "joined" if self.joined_at else "granted"
