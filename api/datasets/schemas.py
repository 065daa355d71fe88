from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

DatasetKind = Literal["sft", "preference", "prompts"]


class DatasetPublic(BaseModel):
    id: int
    project: str
    name: str
    kind: DatasetKind
    format: Literal["jsonl", "json", "parquet"]
    size: int
    sha256: str
    rows: int
    columns: list[str]
    created_at: datetime
    source: str = Field(description="Use as data.source in a run spec")


class DatasetList(BaseModel):
    data: list[DatasetPublic]
    count: int


class DatasetPreview(BaseModel):
    id: int
    rows: list[dict[str, Any]]
