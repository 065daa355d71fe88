"""The comparisons a rule or a gate may make: an alert's threshold and change (rlplane/alerts.py), a pipeline stage's
gate (rlplane/pipeline.py)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Literal

Op = Literal["<", "<=", ">", ">=", "==", "!="]
COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
