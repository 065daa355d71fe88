"""RLPLANE_* settings (pydantic-settings models of the API and the worker): a bad one said by its variable's name."""

from __future__ import annotations

from pydantic import ValidationError


def settings_problems(exc: ValidationError) -> str:
    """Each problem of a settings model's validation as `RLPLANE_<FIELD>: why`, joined by '; '. The value is not
    repeated: it may be a secret (a token, a database password)."""
    return "; ".join(f"RLPLANE_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
