"""reward: {kind: python, entrypoint: module:function}: an allow-listed function scores each batch.

The allow-list is checked before the module is imported (importing runs its code), here in the
trainer as well as at submit, because a spec file can reach the trainer without the API.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from rlplane.allowlist import allowed_from_env, is_allowed, refusal
from trainer_core.rewards.base import RewardError, checked_scores


class PythonScorer:
    def __init__(self, entrypoint: str, field: str) -> None:
        patterns = allowed_from_env()
        if not is_allowed(entrypoint, patterns):
            raise RewardError(refusal(entrypoint, field, patterns))
        self.entrypoint = entrypoint
        self.module_name, self.function_name = entrypoint.split(":")
        self.function = _load(self.module_name, self.function_name, field)

    def __call__(self, prompts: list[str], responses: list[str], metadata: list[dict]) -> list[float]:
        values = self.function(list(prompts), list(responses), [dict(meta) for meta in metadata])
        return checked_scores(values, len(responses), f"python reward {self.entrypoint}")

    def close(self) -> None:
        pass


def _load(module_name: str, function_name: str, field: str) -> Callable:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise RewardError(
            f"{field}: cannot import module {module_name!r} ({exc}); install it on the workers or put it on their PYTHONPATH"
        ) from exc
    function = getattr(module, function_name, None)
    if not callable(function):
        raise RewardError(
            f"{field}: module {module_name!r} has no function {function_name!r}; "
            "write module:function naming a function f(prompts, responses, metadata) -> list[float]"
        )
    return function
