from pydantic import BaseModel, Field

from rlplane.floats import AnyFloat, MaybeFloat


class SeriesPoint(BaseModel):
    step: int = Field(description="The last step of the bucket")
    value: AnyFloat = Field(description="The value at that step")
    min: MaybeFloat = Field(description="Smallest non-NaN value in the bucket")
    max: MaybeFloat = Field(description="Largest non-NaN value in the bucket")
    count: int = Field(description="Points in the bucket")
    time: float
    first_nan_step: int | None = Field(
        default=None,
        description="The bucket's first step whose value is NaN, so a NaN inside a bucket is not lost to its last "
        "value; null when there is none. Series over 50,000 points (answered from rollups) only know a NaN at the "
        "bucket's last step",
    )


class Series(BaseModel):
    key: str
    total_points: int
    downsampled: bool
    points: list[SeriesPoint]


class SeriesResponse(BaseModel):
    run_id: int
    max_points: int
    series: list[Series]


_RAW_OMITS = "Only in a downsampled series (in one that is not, follows from the point's value and step)"


class SeriesColumns(BaseModel):
    """A Series as one list per field: item i of each list is point (bucket) i.

    `min`, `max`, `count` and `first_nan_step` come only with a downsampled series: each point of one that is not is
    a stored point, its min and max its value (null for NaN), its count 1, its first NaN step its step where it is NaN.
    """

    key: str
    total_points: int
    downsampled: bool
    step: list[int]
    value: list[AnyFloat]
    time: list[float]
    min: list[MaybeFloat] | None = Field(None, description=_RAW_OMITS)
    max: list[MaybeFloat] | None = Field(None, description=_RAW_OMITS)
    count: list[int] | None = Field(None, description=_RAW_OMITS)
    first_nan_step: list[int | None] | None = Field(None, description=_RAW_OMITS)


class ColumnsResponse(BaseModel):
    run_id: int
    max_points: int
    series: list[SeriesColumns]


class KeySummary(BaseModel):
    key: str
    count: int
    last_step: int
    last_value: AnyFloat
    last_time: float


class KeyList(BaseModel):
    data: list[KeySummary]
    count: int
