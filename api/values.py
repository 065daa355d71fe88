"""Value types that every backend stores alike: bounded integers and NUL-free text."""

from typing import Annotated

from fastapi import Path, Query
from pydantic import AfterValidator

from rlplane.wire import INT32_MAX, STEP_MAX, Step  # noqa: F401 - the API's value types, from the contract


def without_nul(text: str) -> str:
    """Postgres text and JSONB cannot hold NUL; store U+FFFD (a decoder's mark for a bad byte) on every backend."""
    return text.replace("\x00", "\ufffd")


StoredText = Annotated[str, AfterValidator(without_nul)]

RunId = Annotated[int, Path(ge=1, le=INT32_MAX, description="Run id")]
StepPath = Annotated[int, Path(ge=0, le=STEP_MAX, description="Optimizer step")]
ItemId = Annotated[int, Path(ge=1, le=INT32_MAX)]
Offset = Annotated[int, Query(ge=0, le=INT32_MAX)]
StepQuery = Annotated[int | None, Query(ge=0, le=STEP_MAX)]
