from pydantic import BaseModel, ConfigDict, Field

from api.values import INT32_MAX, StoredText
from rlplane.limits import MAX_LOG_CHARS


class LogLineIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    attempt: int = Field(default=0, ge=0, le=INT32_MAX, description="Attempt number (0: outside any lease)")
    rank: int = Field(default=0, ge=0, le=100_000)
    seq: int = Field(ge=0, le=INT32_MAX, description="Per (attempt, rank) sequence number; makes re-sent lines harmless")
    text: StoredText = Field(max_length=MAX_LOG_CHARS)
    time: float | None = Field(default=None, ge=0, le=1e11)


class LogLineOut(BaseModel):
    id: int = Field(description="Offset: pass the last seen id as `offset` to read on")
    attempt: int
    rank: int
    node: int = Field(default=0, description="The node its rank ran on (rank // ranks per node); 0 on one node")
    seq: int
    text: str
    time: float


class LogPage(BaseModel):
    data: list[LogLineOut]
    next_offset: int = Field(description="Pass as `offset` to get the lines after these")
