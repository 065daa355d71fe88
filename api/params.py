"""The endpoints' path and query parameters, bounded as every backend stores their values."""

from typing import Annotated

from fastapi import Path, Query

from rlplane.spec.base import NAME_PATTERN
from rlplane.wire import INT32_MAX, STEP_MAX

RunId = Annotated[int, Path(ge=1, le=INT32_MAX, description="Run id")]
StepPath = Annotated[int, Path(ge=0, le=STEP_MAX, description="Optimizer step")]
ItemId = Annotated[int, Path(ge=1, le=INT32_MAX)]
Offset = Annotated[int, Query(ge=0, le=INT32_MAX)]
StepQuery = Annotated[int | None, Query(ge=0, le=STEP_MAX)]
QueueName = Annotated[str, Path(min_length=1, max_length=64, pattern=NAME_PATTERN, description="A worker queue's name")]
