"""reward: {kind: builtin, name: ...}: a builtin task's reward, reading the prompt row's "answer" when it has one."""

from __future__ import annotations

from trainer_core.data.tasks import builtin_reward


class BuiltinScorer:
    def __init__(self, name: str) -> None:
        self.reward = builtin_reward(name)  # a DataError naming the builtins when `name` is not one

    def __call__(self, prompts: list[str], responses: list[str], metadata: list[dict]) -> list[float]:
        return [
            float(self.reward(prompt, response, meta.get("answer")))
            for prompt, response, meta in zip(prompts, responses, metadata, strict=True)
        ]

    def close(self) -> None:
        pass
