"""Value types that every backend stores alike: bounded integers and NUL-free text (no web framework here: services
and schemas use them; the endpoints' path and query parameters are api/params.py)."""

from typing import Annotated

from pydantic import AfterValidator

from rlplane.wire import INT32_MAX, STEP_MAX, Step  # noqa: F401 - the API's value types, from the contract


def without_nul(text: str) -> str:
    """Postgres text and JSONB cannot hold NUL; store U+FFFD (a decoder's mark for a bad byte) on every backend."""
    return text.replace("\x00", "\ufffd")


StoredText = Annotated[str, AfterValidator(without_nul)]
