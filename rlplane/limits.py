"""What one request to the API may carry: the API refuses more (HTTP 422/413), and the trainer's and the
worker's senders split or cut what they send to fit."""

from __future__ import annotations

# Rows of one report request, per kind.
MAX_ROWS = {"metrics": 10_000, "logs": 10_000, "samples": 5_000}
# Characters of one log line (longer lines are cut by the sender) and of a status reason (the tail is kept:
# a traceback's last lines say what went wrong).
MAX_LOG_CHARS = 65_536
MAX_REASON_CHARS = 2_000
# The API's default request body limit (RLPLANE_MAX_BODY_BYTES); senders aim for half of it.
MAX_BODY_BYTES = 16 * 1024 * 1024
SEND_BODY_BYTES = MAX_BODY_BYTES // 2
# A metric key: namespaced with "/" (train/loss), at most 256 of these characters.
KEY_PATTERN = r"^[A-Za-z0-9_./@:-]{1,256}$"
# A code snapshot (rlplane submit --code DIR): the API's default limit on the archive (RLPLANE_MAX_CODE_BYTES).
MAX_CODE_BYTES = 100 * 1024 * 1024


def fit_reason(reason: str) -> str:
    """`reason` within MAX_REASON_CHARS (a run's, an attempt's, a node's, a stage's or a trial's reason, an alert's
    message): a reason built on an earlier one ("...; retrying from ...") keeps its start and its newest end, the
    middle cut."""
    if len(reason) <= MAX_REASON_CHARS:
        return reason
    half = (MAX_REASON_CHARS - 5) // 2
    return f"{reason[:half]} ... {reason[-half:]}"
