from pydantic import BaseModel, ConfigDict, Field

from api.inserts import IngestResult
from api.logs.schemas import LogLineIn
from api.metrics.schemas import MetricPoint
from api.samples.schemas import SampleIn
from rlplane.limits import MAX_ROWS


class ReportIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metrics: list[MetricPoint] = Field(default_factory=list, max_length=MAX_ROWS["metrics"])
    samples: list[SampleIn] = Field(default_factory=list, max_length=MAX_ROWS["samples"])
    logs: list[LogLineIn] = Field(default_factory=list, max_length=MAX_ROWS["logs"])


class ReportResult(BaseModel):
    metrics: IngestResult
    samples: IngestResult
    logs: IngestResult
