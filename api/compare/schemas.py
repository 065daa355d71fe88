"""Compare's poll and its charts' series, for many runs in one request each."""

from __future__ import annotations

from pydantic import BaseModel, Field

from api.metrics.schemas import KeySummary, SeriesColumns
from api.runs.schemas import RunDetail
from rlplane.wire import INT32_MAX, STEP_MAX

MAX_RUNS = 100
MAX_SERIES = 2_000


class RunProblem(BaseModel):
    """Why a run cannot be shown: its HTTP status as its own request would have answered, and the reason."""

    status: int
    detail: str


class KeyDelta(BaseModel):
    """A run's metric keys since the client's cursor: all of them (`full`), or only the keys whose last step is past
    the cursor's step. The client merges them into what it holds; if its per-key counts then do not add up to `count`
    (points arrived at earlier steps), it asks again without a cursor."""

    cursor: str = Field(description="Send back as this run's cursor in the next poll")
    full: bool
    count: int = Field(description="The run's points over all keys")
    data: list[KeySummary]


class ComparedRun(BaseModel):
    id: int
    run: RunDetail | None = None
    error: RunProblem | None = None
    keys: KeyDelta | None = None


class Comparison(BaseModel):
    runs: list[ComparedRun]


class SeriesWanted(BaseModel):
    run_id: int = Field(ge=1, le=INT32_MAX)
    key: str = Field(min_length=1, max_length=256)
    after_step: int | None = Field(
        default=None,
        ge=0,
        le=STEP_MAX,
        description="Only the points after this step (what the client lacks); unset: the whole series, downsampled",
    )


class SeriesQuery(BaseModel):
    max_points: int = Field(default=1000, ge=2, le=20_000)
    series: list[SeriesWanted] = Field(min_length=1, max_length=MAX_SERIES)


class RunSeriesColumns(SeriesColumns):
    """A series of one run: with `after_step` set, the points after it (to append); unset, the whole series (to
    replace what the client holds: asked so, or more new points than max_points)."""

    run_id: int
    after_step: int | None


class RunsColumnsResponse(BaseModel):
    max_points: int
    series: list[RunSeriesColumns]
