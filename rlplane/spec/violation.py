"""What a cross-field rule of a run spec yields (rules.py, backend_rules.py, builtin_names.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple


class Violation(NamedTuple):
    loc: tuple[str | int, ...]  # the field to fix
    msg: str  # how


Rules = Iterator[Violation]
