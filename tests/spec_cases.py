"""Small valid specs and error helpers shared by the spec tests."""

import pytest

from rlplane.spec import SpecError, parse_spec


def sft_spec() -> dict:
    return {
        "name": "t",
        "algorithm": "sft",
        "model": {"path": "builtin:tiny-gpt2"},
        "data": {"source": "builtin:tiny-sft"},
        "train": {"steps": 10, "batch_size": 8},
    }


def ppo_spec() -> dict:
    return {
        **sft_spec(),
        "algorithm": "ppo",
        "reward": {"kind": "builtin", "name": "randomwalks"},
        "data": {"source": "builtin:randomwalks"},
    }


def errors_of(data: dict) -> list[dict]:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return info.value.errors


def error_at(data: dict, loc: list) -> dict:
    errors = errors_of(data)
    matching = [e for e in errors if e["loc"] == loc]
    assert matching, f"no error at {loc}; got {errors}"
    return matching[0]
