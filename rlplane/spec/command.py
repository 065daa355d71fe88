"""A command run's argv with its {dotted.path} placeholders filled from the spec: checked at submit (a placeholder
that names nothing is refused there, naming the argument), filled by the worker at launch."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlplane.spec import RunSpec

# {train.lr}, {command.config.warmup}, {run.id}; {{ and }} are literal braces (str.format's convention).
_FIELD = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
# Known only at launch: the worker gives their values; at submit they stand for themselves.
RUN_FIELDS = ("run.id", "run.dir", "run.attempt")


class PlaceholderError(ValueError):
    pass


def fill(argument: str, values: dict[str, Any], run: dict[str, str]) -> str:
    """`argument` with each {path} replaced by its value in `values` (the spec as JSON) or `run`; raises
    PlaceholderError naming the placeholder and what it could have been."""

    def one(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        path = match.group(1)
        if path is None:
            raise PlaceholderError(f"a lone {token!r}; write {token * 2} for a literal brace")
        if path in RUN_FIELDS:
            return run.get(path, "{" + path + "}")
        value: Any = values
        for part in path.split("."):
            if not isinstance(value, dict) or part not in value:
                known = ", ".join(sorted(k for k in values if isinstance(values[k], dict)))
                raise PlaceholderError(
                    f"{{{path}}} names nothing in the spec; use a dotted path into it (sections: {known}) or one of "
                    + ", ".join("{" + f + "}" for f in RUN_FIELDS)
                )
            value = value[part]
        if isinstance(value, dict | list):
            raise PlaceholderError(f"{{{path}}} is a whole section; name one value in it")
        if value is None:
            raise PlaceholderError(f"{{{path}}} is null in this spec; set it or drop the argument")
        return str(value).lower() if isinstance(value, bool) else str(value)

    return _FIELD.sub(one, argument)


def render_argv(spec: RunSpec, run: dict[str, str] | None = None) -> list[str]:
    """The command to start; raises PlaceholderError for the first argument whose placeholder does not resolve."""
    assert spec.command is not None
    values = spec.model_dump(mode="json")
    return [fill(argument, values, run or {}) for argument in spec.command.argv]
