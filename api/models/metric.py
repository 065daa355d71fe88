from sqlalchemy import BigInteger, Float, ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base, BigId


class Metric(Base):
    """One point of one series; (run, key, step) is the idempotency key of ingest."""

    __tablename__ = "metrics"
    __table_args__ = (UniqueConstraint("run_id", "key", "step"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(256))
    step: Mapped[int] = mapped_column(BigInteger)
    # SQLite stores NaN as NULL, so NaN is a flag (value 0) and +-inf stay in `value` on both backends.
    value: Mapped[float] = mapped_column(Float(precision=53))
    is_nan: Mapped[bool] = mapped_column(default=False)
    time: Mapped[float] = mapped_column(Float(precision=53))
