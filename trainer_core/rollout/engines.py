"""Rollout engines (gen.engine): what samples an RL step's responses, behind one interface.

    hf        transformers' generate() on the unwrapped policy (torch, deepspeed, fsdp2); gen.static_cache decodes
              with a static KV cache, which transformers compiles with torch.compile (CUDA graphs) on a GPU
    megatron  megatron-core KV-cache decoding from the policy's shards (backends/megatron/generate.py)

`Engine.sample` returns the sampled ids and the engine's own log-probabilities of the sampled tokens: the log-softmax
of the raw next-token logits (fp32, before temperature, top-k or top-p), which is what the trainer's forward computes
for the same tokens. The recipes report how far the two are apart (rollout/*: `mismatch_sums`) and GRPO can correct
for it (grpo.tis_cap: `truncated_is_weights`). On one device in fp32 they agree to float noise; a GPU engine's
kernels, precision or batch shapes move them apart (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings
You Off-Policy RL Training"). An engine for vLLM or SGLang would be one more class with `sample`.

Both engines read the log-probabilities through a logits processor that runs first on each step's raw scores: at
step t the ids end with the token drawn at t-1, so it keeps one step's log-softmax ([B, vocab]) at a time, never the
whole response's logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn
from transformers import LogitsProcessor, LogitsProcessorList

from rlplane.spec.algorithms import GenSpec
from trainer_core.backends import Backend, BackendError


@dataclass
class Sampled:
    ids: torch.Tensor  # [B, P + R]: the prompts as given, then the R generated positions
    logprobs: torch.Tensor  # [B, R]: the engine's log-probability of each generated token (padding after a row ended)


class Engine(Protocol):
    name: str

    def sample(
        self, policy: nn.Module, input_ids: torch.Tensor, logits_processor: LogitsProcessorList, **settings: Any
    ) -> Sampled:
        """Sample continuations of the left-padded `input_ids` (generate()'s keyword settings: attention_mask,
        max_new_tokens, sampling, eos/pad ids); `logits_processor` runs on every step's raw scores."""
        ...


class TakenLogprobs(LogitsProcessor):
    """Each sampled token's log-probability under the raw scores it was drawn from: at step t the ids end with the
    token drawn at t-1, whose log-probability the previous step's scores hold. Leaves the scores as they are."""

    def __init__(self) -> None:
        self.previous: torch.Tensor | None = None
        self.taken: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.previous is not None:
            self.taken.append(self.previous.gather(-1, input_ids[:, -1:].to(self.previous.device)).squeeze(-1))
        self.previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def collected(self, ids: torch.Tensor, generated: int) -> torch.Tensor:
        """[B, generated]: the log-probabilities of the generated ids (the last one read from the final step's scores)."""
        taken = list(self.taken)
        if self.previous is not None and len(taken) < generated:
            taken.append(self.previous.gather(-1, ids[:, -1:].to(self.previous.device)).squeeze(-1))
        if len(taken) != generated:
            raise RuntimeError(f"the engine scored {len(taken)} steps but generated {generated} tokens")
        return torch.stack(taken, dim=1) if taken else ids.new_zeros((ids.shape[0], 0), dtype=torch.float32)


class BackendEngine:
    """Sampling through the backend's generate (a sharded policy keeps every rank generating until the longest
    response on any rank ends; megatron's decodes from its shards)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def options(self) -> dict[str, Any]:
        return {}

    def sample(
        self, policy: nn.Module, input_ids: torch.Tensor, logits_processor: LogitsProcessorList, **settings: Any
    ) -> Sampled:
        reader = TakenLogprobs()
        processors = LogitsProcessorList([reader, *logits_processor])
        ids = self.backend.generate(policy, input_ids=input_ids, logits_processor=processors, **settings, **self.options())
        generated = ids.shape[1] - input_ids.shape[1]
        return Sampled(ids, reader.collected(ids, generated).to(ids.device))


class HfEngine(BackendEngine):
    """transformers' generate() on the unwrapped policy; with `static_cache`, a static KV cache (compiled, with CUDA
    graphs, by transformers on a GPU)."""

    name = "hf"

    def __init__(self, backend: Backend, static_cache: bool = False) -> None:
        super().__init__(backend)
        self.static_cache = static_cache

    def options(self) -> dict[str, Any]:
        return {"cache_implementation": "static"} if self.static_cache else {}


class MegatronEngine(BackendEngine):
    """megatron-core KV-cache decoding from the policy's tensor- and pipeline-parallel shards."""

    name = "megatron"


def make_engine(gen: GenSpec, backend: Backend) -> Engine:
    """The engine gen.engine names (auto: the backend's own), checked against the backend."""
    own = getattr(backend, "rollout_engine", "hf")
    name = own if gen.engine == "auto" else gen.engine
    if name != own:
        raise BackendError(f"gen.engine {name} cannot sample on this backend, whose policy only the {own} engine runs")
    if name == "megatron":
        if gen.static_cache:
            raise BackendError("gen.static_cache is for the hf engine; megatron's decoding keeps its own cache")
        return MegatronEngine(backend)
    return HfEngine(backend, gen.static_cache)


# --- what the recipes make of the engine's log-probabilities ---


def mismatch_sums(trainer: torch.Tensor, engine: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[Σ|Δ|, Σ k3, max |Δ|, tokens] over the response tokens, Δ = trainer - engine log-probability of each sampled
    token: rollout/logprob_diff (mean |Δ|), rollout/kl (k3's estimate of KL(engine ‖ trainer), the tokens being the
    engine's samples: Schulman 2020) and rollout/logprob_diff_max."""
    delta = (trainer.float() - engine.float()) * mask
    k3 = (torch.exp(delta) - 1 - delta) * mask
    return torch.stack(
        [delta.abs().sum(), k3.sum(), delta.abs().max() if mask.any() else delta.new_zeros(()), mask.sum()]
    ).double()


def truncated_is_weights(trainer: torch.Tensor, engine: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling (Yao et al. 2025): min(π_trainer / π_engine, cap) of each sampled token, a
    constant (no gradient) that weighs its policy-gradient term, since the engine, not the trainer's policy, drew it."""
    return torch.exp(trainer.detach().float() - engine.float()).clamp(max=cap)


def merged_mismatch(parts: list[torch.Tensor]) -> torch.Tensor:
    """This rank's `mismatch_sums` as one: the sums added, the largest |Δ| kept (zeros: nothing compared)."""
    if not parts:
        return torch.zeros(4, dtype=torch.float64)
    stacked = torch.stack(parts).double().cpu()
    merged = stacked.sum(0)
    merged[2] = stacked[:, 2].max()
    return merged


def mismatch_metrics(backend: Backend, mine: torch.Tensor) -> dict[str, float]:
    """rollout/logprob_diff, rollout/kl and rollout/logprob_diff_max over every rank's response tokens, from this
    rank's `merged_mismatch` (no tokens: nothing compared); the same on every rank. Every rank must call it."""
    abs_sum, k3_sum, _, tokens = backend.all_reduce(mine.to(backend.device), "sum").tolist()
    if not tokens:
        return {}
    return {
        "rollout/logprob_diff": abs_sum / tokens,
        "rollout/kl": k3_sum / tokens,
        "rollout/logprob_diff_max": float(backend.all_reduce(mine[2:3].to(backend.device), "max")[0]),
    }
