"""RLPLANE_LOG_FORMAT=text|json for the API and the workers: JSON puts one object per line on stderr
(time, level, logger, message, and the exception), uvicorn's and Celery's loggers included, for log
collectors that parse lines (Loki, Elasticsearch, Cloud Logging). Text is uvicorn's own format with the
time in front of every line. Either way the workers' routine traffic (heartbeats, report batches that
succeed: several a second per worker) is not logged at INFO.

Kept free of heavy imports: workers import it too.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import sys
import time
from typing import Any, Literal

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


# Every worker posts these every second or few: logged only when they fail.
_ROUTINE = re.compile(r"^/api/v1/(?:workers/heartbeat|runs/\d+/reports)(?:\?|$)")


class QuietRoutineTraffic(logging.Filter):
    """Drops uvicorn's access line of a worker's heartbeat or report batch that succeeded."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:  # (client, method, path, http version, status)
            _, method, path, _, status = args
            return not (method == "POST" and isinstance(status, int) and status < 400 and _ROUTINE.match(str(path)))
        return True


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's logging with the time on every line and routine worker traffic left out."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["default"]["fmt"] = "%(asctime)s %(levelprefix)s %(message)s"
    config["formatters"]["access"]["fmt"] = '%(asctime)s %(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'
    config["filters"] = {"routine": {"()": QuietRoutineTraffic}}
    config["loggers"]["uvicorn.access"]["filters"] = ["routine"]  # on the logger: JSON logging swaps its handlers
    return config
