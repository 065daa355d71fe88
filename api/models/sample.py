from typing import Any

from sqlalchemy import BigInteger, Float, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from api.models.base import Base, BigId, JsonDoc


class Sample(Base):
    """One generated response with its prompt and scores, at one step."""

    __tablename__ = "samples"
    __table_args__ = (
        UniqueConstraint("run_id", "step", "index"),
        Index("ix_samples_run_prompt_hash", "run_id", "prompt_hash"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(BigInteger)
    index: Mapped[int]
    prompt: Mapped[str] = mapped_column(Text)
    prompt_hash: Mapped[str] = mapped_column(String(64))
    response: Mapped[str] = mapped_column(Text)
    # A NaN reward means a broken reward source, not a missing one; SQLite would turn it into NULL.
    reward: Mapped[float | None] = mapped_column(Float(precision=53))
    reward_is_nan: Mapped[bool] = mapped_column(default=False)
    kl: Mapped[float | None] = mapped_column(Float(precision=53))
    kl_is_nan: Mapped[bool] = mapped_column(default=False)
    scores: Mapped[dict[str, Any]] = mapped_column(JsonDoc, doc="non-finite scores are kept as 'NaN'/'Infinity' strings")
    # What the response is: chosen / rejected (a preference pair), generation (at an evaluation), rollout; null: rollout.
    label: Mapped[str | None] = mapped_column(String(32))
    reference: Mapped[str | None] = mapped_column(Text)  # the dataset's own answer to the prompt, where it has one
    # A multi-turn episode's response turn by turn: [{"role": "policy" | "environment", "text": ...}]; null: one turn.
    turns: Mapped[list[dict[str, str]] | None] = mapped_column(JsonDoc, nullable=True)
    time: Mapped[float] = mapped_column(Float(precision=53))
