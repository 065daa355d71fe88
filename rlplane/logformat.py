"""RLPLANE_LOG_FORMAT=text|json for the API and the workers: JSON puts one object per line on stderr
(time, level, logger, message, and the exception), uvicorn's and Celery's loggers included, for log
collectors that parse lines (Loki, Elasticsearch, Cloud Logging). The API's text format and its quiet
access log are api/logging_setup.py's.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Literal

LogFormat = Literal["text", "json"]
# Loggers that bring their own handlers (and would print text beside our JSON).
_OWN_HANDLERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "celery", "celery.task", "celery.worker")
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        # Values passed with `extra=` (run=, worker=, ...) become fields of their own.
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(log_format: LogFormat, level: int = logging.INFO) -> None:
    """JSON: one stderr handler on the root logger, and the servers' own loggers propagate to it."""
    if log_format != "json":
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in _OWN_HANDLERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
