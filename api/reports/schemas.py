from pydantic import BaseModel

from api.inserts import IngestResult


class ReportResult(BaseModel):
    metrics: IngestResult
    samples: IngestResult
    logs: IngestResult
