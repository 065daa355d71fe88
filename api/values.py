"""Value types that every backend stores alike: bounded integers and NUL-free text."""

from typing import Annotated

from fastapi import Path, Query
from pydantic import AfterValidator, Field

INT32_MAX = 2**31 - 1  # INTEGER columns: ids, attempt, seq
STEP_MAX = 2**62  # BIGINT step columns, with headroom


def without_nul(text: str) -> str:
    """Postgres text and JSONB cannot hold NUL; store U+FFFD (a decoder's mark for a bad byte) on every backend."""
    return text.replace("\x00", "\ufffd")


StoredText = Annotated[str, AfterValidator(without_nul)]
# strict: JSON `true` or "5" is not a step.
Step = Annotated[int, Field(ge=0, le=STEP_MAX, strict=True)]

RunId = Annotated[int, Path(ge=1, le=INT32_MAX, description="Run id")]
StepPath = Annotated[int, Path(ge=0, le=STEP_MAX, description="Optimizer step")]
ItemId = Annotated[int, Path(ge=1, le=INT32_MAX)]
Offset = Annotated[int, Query(ge=0, le=INT32_MAX)]
StepQuery = Annotated[int | None, Query(ge=0, le=STEP_MAX)]
