from pydantic import BaseModel, Field


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
