from sqlalchemy import BigInteger, Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base


class MetricRollup(Base):
    """Min, max, count and last point of one series over a fixed-width block of steps.

    Kept up to date by ingest, so a chart of a million points reads a thousand rows (see
    api/metrics/rollups.py). `width` is the block's width in steps; block = step // width.
    """

    __tablename__ = "metric_rollups"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(256), primary_key=True)
    width: Mapped[int] = mapped_column(Integer, primary_key=True)
    block: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)
    # NULL when every point of the block is NaN: min/max skip NaN, as the raw downsampling does.
    min: Mapped[float | None] = mapped_column(Float(precision=53))
    max: Mapped[float | None] = mapped_column(Float(precision=53))
    first_step: Mapped[int] = mapped_column(BigInteger)
    last_step: Mapped[int] = mapped_column(BigInteger)
    last_value: Mapped[float] = mapped_column(Float(precision=53))
    last_is_nan: Mapped[bool] = mapped_column(default=False)
    last_time: Mapped[float] = mapped_column(Float(precision=53))
