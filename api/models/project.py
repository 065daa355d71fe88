from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base, UtcDateTime, utcnow


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    description: Mapped[str] = mapped_column(String(2000), default="")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # A run's priority when its spec names none, and the highest a member may ask for (above: the project's admins).
    default_priority: Mapped[int] = mapped_column(default=50, server_default="50")
    member_max_priority: Mapped[int] = mapped_column(default=50, server_default="50")
    # Its weight in fair share between projects of one priority on a queue (api/runs/priorities.py)
    share: Mapped[float] = mapped_column(default=1.0, server_default="1")
