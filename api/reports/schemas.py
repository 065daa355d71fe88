from pydantic import BaseModel, ConfigDict, Field

from api.inserts import IngestResult
from api.logs.schemas import LogLineIn
from api.metrics.schemas import MetricPoint
from api.samples.schemas import SampleIn


class ReportIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metrics: list[MetricPoint] = Field(default_factory=list, max_length=10_000)
    samples: list[SampleIn] = Field(default_factory=list, max_length=5_000)
    logs: list[LogLineIn] = Field(default_factory=list, max_length=10_000)


class ReportResult(BaseModel):
    metrics: IngestResult
    samples: IngestResult
    logs: IngestResult
