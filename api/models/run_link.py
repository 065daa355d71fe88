from sqlalchemy import ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base


class RunLink(Base):
    """Lineage: the child run's spec names the parent as `run:<id>[@step]` at `field`."""

    __tablename__ = "run_links"
    __table_args__ = (UniqueConstraint("child_id", "field"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    parent_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    child_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    field: Mapped[str] = mapped_column(String(128))
    step: Mapped[int | None]
