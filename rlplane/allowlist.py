"""Which python reward entrypoints may run: RLPLANE_REWARD_ENTRYPOINTS, comma-separated fnmatch patterns.

The API refuses a run whose entrypoint does not match (422 at submit) and the trainer refuses to
import one (the worker's environment reaches the trainer), so a spec alone can never make a
worker import arbitrary code. Unset or empty allows nothing.
"""

from __future__ import annotations

import fnmatch
import os

ENV_VAR = "RLPLANE_REWARD_ENTRYPOINTS"


def parse_patterns(text: str | None) -> list[str]:
    """Split the setting: "a.*:score, b:*" -> ["a.*:score", "b:*"]."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def allowed_from_env() -> list[str]:
    return parse_patterns(os.environ.get(ENV_VAR))


def is_allowed(entrypoint: str, patterns: list[str]) -> bool:
    # fnmatchcase: the same answer on every OS (fnmatch folds case on Windows).
    return any(fnmatch.fnmatchcase(entrypoint, pattern) for pattern in patterns)


def refusal(entrypoint: str, field: str, patterns: list[str]) -> str:
    """Why `entrypoint` may not run, and how an operator allows it."""
    now = f"it allows only {', '.join(patterns)}" if patterns else "it is unset, so no python reward may run"
    return (
        f"{field} {entrypoint!r} is not allowed by the server's {ENV_VAR} ({now}); ask the operator to add "
        f"{entrypoint!r} (or a pattern such as '{entrypoint.split(':')[0]}:*') to {ENV_VAR} on the API server and the "
        "workers, or use a builtin, model or http reward"
    )
