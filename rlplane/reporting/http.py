"""The trainer's reports straight to the API (a trainer run without a worker, or beside one): a sink of
the reporter over the contract's sender (rlplane.reports), which retries and spools."""

from collections.abc import Iterator

import orjson

from rlplane.limits import MAX_REASON_CHARS
from rlplane.reporting.events import Batch, checkpoint_record, log_record, metric_record, sample_record
from rlplane.reports import ReportSender, Request, report_requests


class ControlPlaneSink(ReportSender):
    def write(self, batch: Batch) -> None:
        self.send(list(self._requests(batch)))

    def _requests(self, batch: Batch) -> Iterator[Request]:
        metrics = [metric_record(p) for p in batch.metrics]
        logs = [log_record(line, self.attempt) for line in batch.logs]
        yield from report_requests(metrics, [sample_record(s) for s in batch.samples], logs)
        for event in batch.checkpoints:
            yield "checkpoints", orjson.dumps(checkpoint_record(event))
        for status in batch.statuses:
            body = {"attempt": self.attempt, "status": status.status, "reason": status.reason[:MAX_REASON_CHARS]}
            if status.last_step is not None:
                body["last_step"] = status.last_step
            yield "status", orjson.dumps(body)
