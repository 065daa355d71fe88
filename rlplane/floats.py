"""Floats that may be NaN or +-inf: JSON has no literal for them, so they travel as strings."""

import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

NonFiniteName = Literal["NaN", "Infinity", "-Infinity"]
_NAMES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _parse(value: Any) -> Any:
    return _NAMES.get(value, value) if isinstance(value, str) else value


def encode(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


_SCHEMA = {"anyOf": [{"type": "number"}, {"type": "string", "enum": list(_NAMES)}]}

# Accepts a number, the JSON extensions NaN/Infinity, or those names as strings; serialises non-finite as strings.
AnyFloat = Annotated[float, BeforeValidator(_parse), PlainSerializer(encode, return_type=Any), WithJsonSchema(_SCHEMA)]
MaybeFloat = Annotated[
    float | None,
    BeforeValidator(_parse),
    PlainSerializer(encode, return_type=Any),
    WithJsonSchema({"anyOf": [*_SCHEMA["anyOf"], {"type": "null"}]}),
]
