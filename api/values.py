"""Value types that every backend stores alike: bounded integers and NUL-free text (no web framework here: services
and schemas use them; the endpoints' path and query parameters are api/params.py)."""

from rlplane.rows import StoredText, without_nul  # noqa: F401 - the API's value types, from the contract
from rlplane.wire import INT32_MAX, STEP_MAX, Step  # noqa: F401
