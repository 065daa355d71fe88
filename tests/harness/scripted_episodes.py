"""Multi-turn rollouts without a run: a scripted environment, the tiny policy, and one call of episodes.play, shared
by tests/test_episodes.py and tests/test_episode_chat.py."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from rlplane.spec.environments import BuiltinEnvironment
from rlplane.spec.generation import GenSpec
from rlplane.spec.sections import TorchBackend as TorchBackendSpec
from rlplane.spec.sections import TrainSpec
from trainer_core.backends.torch_backend import TorchBackend
from trainer_core.environments import Episode, Reply, answer, end
from trainer_core.models import build_builtin
from trainer_core.rollout import episodes

TOOL = "<result>42</result>"


class Scripted:
    """Answers TOOL to every turn until the policy has had `turns` turns, then ends with reward = turns."""

    stop: tuple[str, ...] = ()

    def __init__(self, turns: int, opening: str = "") -> None:
        self.turns, self.opening = turns, opening

    def reset(self, episode: Episode) -> str:
        episode.state = "ready"
        return self.opening

    def step(self, episode: Episode, message: str) -> Reply:
        assert episode.messages[-1] == ("policy", message) and episode.state == "ready"
        if episode.turns >= self.turns:
            return end(float(episode.turns), components={"turns": float(episode.turns)})
        return answer(TOOL, tool_call=True)

    def cut_off(self, episode: Episode, why: str) -> Reply:
        return end(-1.0, reason=f"cut off by {why}")

    def close(self) -> None:
        pass


def tiny_policy() -> tuple[torch.nn.Module, object, object]:
    """tiny-gpt2 in eval mode, its tokenizer, and a one-process torch backend."""
    model, tokenizer = build_builtin("tiny-gpt2", "causal", seed=0)
    backend = TorchBackend(TorchBackendSpec(), TrainSpec(steps=1, batch_size=8))
    return model.eval(), tokenizer, backend


def play(policy, environment, rows, *, max_turns=4, max_tokens=64, max_new_tokens=5, greedy=True, repeat=1, length=96):
    model, tokenizer, backend = policy
    run = SimpleNamespace(tokenizer=tokenizer, backend=backend, spec=SimpleNamespace(model=SimpleNamespace(max_seq_len=length)))
    limits = BuiltinEnvironment(name="calculator", max_turns=max_turns, max_tokens=max_tokens)
    gen = GenSpec(max_new_tokens=max_new_tokens)
    return episodes.play(run, model, rows, gen, environment, limits, repeat=repeat, greedy=greedy)
