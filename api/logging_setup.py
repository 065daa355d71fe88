"""The API's uvicorn logging: the time on every text line, and the workers' routine traffic (heartbeats,
report batches that succeed: several a second per worker) not logged at INFO. JSON lines are the
contract's (rlplane.logformat), shared with the workers.
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any

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


_SIGNATURE = re.compile(r"([?&]sig=)[^&]*")


class HideSignatures(logging.Filter):
    """Writes a signed download link's `sig=` as `sig=...` in uvicorn's access line: until it expires it is a
    credential, and logs outlive it in places more people read."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and "sig=" in str(args[2]):
            record.args = (*args[:2], _SIGNATURE.sub(r"\1...", str(args[2])), *args[3:])
        return True


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's logging with the time on every line and routine worker traffic left out."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["default"]["fmt"] = "%(asctime)s %(levelprefix)s %(message)s"
    config["formatters"]["access"]["fmt"] = '%(asctime)s %(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'
    config["filters"] = {"routine": {"()": QuietRoutineTraffic}, "signatures": {"()": HideSignatures}}
    # On the logger: JSON logging swaps its handlers.
    config["loggers"]["uvicorn.access"]["filters"] = ["routine", "signatures"]
    return config
