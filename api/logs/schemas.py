from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

INT32_MAX = 2**31 - 1  # attempt and seq are INTEGER columns


def without_nul(text: str) -> str:
    """Postgres text cannot hold NUL; store U+FFFD (a decoder's mark for a bad byte) on every backend alike."""
    return text.replace("\x00", "\ufffd")


class LogLineIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    attempt: int = Field(default=0, ge=0, le=INT32_MAX, description="Attempt number (0: outside any lease)")
    rank: int = Field(default=0, ge=0, le=100_000)
    seq: int = Field(ge=0, le=INT32_MAX, description="Per (attempt, rank) sequence number; makes re-sent lines harmless")
    text: Annotated[str, AfterValidator(without_nul)] = Field(max_length=65_536)
    time: float | None = Field(default=None, ge=0, le=1e11)


class LogLineOut(BaseModel):
    id: int = Field(description="Offset: pass the last seen id as `offset` to read on")
    attempt: int
    rank: int
    seq: int
    text: str
    time: float


class LogIngestResult(BaseModel):
    accepted: int
    duplicates: int


class LogPage(BaseModel):
    data: list[LogLineOut]
    next_offset: int = Field(description="Pass as `offset` to get the lines after these")
