from datetime import datetime

from sqlalchemy import ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base, UtcDateTime, utcnow


class SlurmJob(Base):
    """One Slurm job of a run on a queue bound to a Slurm cluster (api/executors/slurm.py): the pilot job whose
    workers serve one attempt. Slurm may requeue it (a node failure): the same job runs again and serves the next
    attempt. Its token (a worker token minted for it) is revoked when the job has ended."""

    __tablename__ = "slurm_jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    queue: Mapped[str] = mapped_column(String(128))
    job_id: Mapped[int] = mapped_column(Integer)  # Slurm's
    state: Mapped[str] = mapped_column(String(32), default="PENDING")  # squeue's State: PENDING, RUNNING, ...; or ended
    reason: Mapped[str | None] = mapped_column(String(300))  # squeue's Reason while pending (Resources, Priority, ...)
    node_list: Mapped[str | None] = mapped_column(String(2000))  # squeue's NodeList once running
    restarts: Mapped[int] = mapped_column(Integer, default=0)  # squeue's RestartCnt: which run of the job this is
    output: Mapped[str] = mapped_column(String(1000))  # the batch script's output file, on the job directory
    directory: Mapped[str] = mapped_column(String(1000))  # the job's files: script, token (0600), output
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))
    submitted_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
