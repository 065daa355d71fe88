from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base


class ProjectQuota(Base):
    """What one project may hold of one queue at once (api/runs/quotas.py); a site admin's to set. Null: no limit."""

    __tablename__ = "project_quotas"

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    queue: Mapped[str] = mapped_column(String(64), primary_key=True)
    # GPUs on a GPU queue (resources.gpus x nodes of its active runs); worker slots (nodes) on a CPU queue
    max_gpus: Mapped[int | None] = mapped_column()
    max_runs: Mapped[int | None] = mapped_column()  # active runs (starting, running, cancelling)
