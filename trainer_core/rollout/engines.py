"""Rollout engines (gen.engine): what samples an RL step's responses, behind one interface.

    hf          transformers' generate() on the unwrapped policy (torch, deepspeed, fsdp2); gen.static_cache decodes
                with a static KV cache, which transformers compiles with torch.compile (CUDA graphs) on a GPU
    megatron    megatron-core KV-cache decoding from the policy's shards (backends/megatron/generate.py)
    continuous  transformers' continuous batching on the policy (paged KV cache: a finished row's slot goes to the
                next prompt at once instead of idling as padding; rollout/continuous.py)
    vllm        a vLLM server for the run, in its own interpreter, over HTTP (rollout/vllm.py)

The `Engine` protocol is the common part of what TRL, veRL, NeMo RL and prime-rl expose of their engines: token ids
in; each prompt's response tokens, the engine's log-probability of each, why it ended and the policy version that
sampled it out; `update_weights` to a new version; `pause`/`resume` around a weight update; `sleep`/`wake` where an
engine holds memory the training step wants back; `close`. The colocated engines (hf, megatron, continuous) sample
the live policy, so a weight update only moves their version; vllm holds its own copy of the weights.

An engine's log-probability of a token is the log-softmax of the raw next-token logits (fp32, before temperature,
top-k or top-p), which is what the trainer's forward computes for the same tokens. The recipes report how far the
two are apart (rollout/*: `mismatch_sums`) and GRPO and PPO can correct for it (tis_cap: `truncated_is_weights`),
whatever the engine. On one device in fp32 they agree to float noise; a GPU engine's kernels, precision or batch
shapes move them apart (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training").

The hf and megatron engines read the log-probabilities through a logits processor that runs first on each step's
raw scores: at step t the ids end with the token drawn at t-1, so it keeps one step's log-softmax ([B, vocab]) at a
time, never the whole response's logits.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from torch import nn
from transformers import LogitsProcessor, LogitsProcessorList

from rlplane.layout import GENERATOR_ADDRESS_ENV
from rlplane.spec.generation import GenSpec
from trainer_core.backends import Backend, BackendError
from trainer_core.data.tokenize import pad_id
from trainer_core.failures import Diverged

Weights = Mapping[str, torch.Tensor] | Path | None  # a state dict, a directory of safetensors, or the live policy's


@dataclass(frozen=True)
class Sampling:
    """How one call samples: greedy, or at `temperature` with top-k (0: off) and top-p; at most `max_new_tokens`; a
    response also ends with the first of the `stop` strings it writes (kept, like eos)."""

    max_new_tokens: int
    greedy: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()

    @staticmethod
    def of(gen: GenSpec, greedy: bool = False) -> Sampling:
        return Sampling(gen.max_new_tokens, greedy, gen.temperature, gen.top_k or 0, gen.top_p, tuple(gen.stop or ()))


@dataclass
class Completion:
    tokens: list[int]  # the response, through its eos (or stop string) when it ended by one
    logprobs: list[float]  # the engine's log-probability of each token
    finish_reason: Literal["stop", "length"]  # stop: eos or a stop string; length: max_new_tokens reached
    version: int  # the policy version (optimizer steps) whose weights sampled it


class Engine(Protocol):
    name: str
    version: int  # the policy version it samples with

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Completion]:
        """One completion per prompt (token ids), in the prompts' order."""
        ...

    def update_weights(self, weights: Weights, version: int) -> None:
        """Sample with these weights from now on, as policy `version`. Colocated engines already sample the live
        policy: they take None and move their version."""
        ...

    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def sleep(self) -> None: ...
    def wake(self) -> None: ...
    def close(self) -> None: ...


class HoldsNothing:
    """pause, resume, sleep and wake as no-ops: for an engine with no requests of its own to hold still around a weight
    update and no memory to give back between calls (the protocol's defaults)."""

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def sleep(self) -> None:
        pass

    def wake(self) -> None:
        pass


class Colocated(HoldsNothing):
    """An engine that samples the live policy in the trainer's process: nothing to load on a weight update, nothing
    to pause, no memory of its own held between calls."""

    name = "colocated"

    def __init__(self, backend: Backend, policy: nn.Module, tokenizer: Any) -> None:
        self.backend, self.policy, self.tokenizer = backend, policy, tokenizer
        self.version = 0

    def update_weights(self, weights: Weights, version: int) -> None:
        if weights is not None:
            raise BackendError(f"the {self.name} engine samples the live policy; it takes no weights of its own")
        self.version = version

    def close(self) -> None:
        pass


class OwnWeights(HoldsNothing):
    """A colocated engine over a private copy of the policy (grpo.max_staleness: rollout/overlap.py): it samples while
    the trainer updates the live policy, and holds the version it was last given until the next update."""

    def __init__(self, inner: Colocated, copy: nn.Module) -> None:
        self.inner, self.copy = inner, copy
        self.name = inner.name

    @property
    def version(self) -> int:
        return self.inner.version

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Completion]:
        return self.inner.generate(prompts, sampling)

    @torch.no_grad()
    def update_weights(self, weights: Weights, version: int) -> None:
        if weights is not None:
            if not isinstance(weights, Mapping):
                raise BackendError(f"the {self.name} engine's copy of the policy loads a state dict, not {weights!r}")
            self.copy.load_state_dict(weights)
        self.inner.version = version

    def close(self) -> None:
        self.inner.close()


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


class FiniteLogits(LogitsProcessor):
    """Stops sampling from a policy whose next-token logits hold NaN or +inf (its weights went too far, finite or
    not): torch's sampler would fail on them (on a GPU, in a device-side assert) with no word of why. -inf is left
    alone: filters put it there on purpose. Either train.on_nonfinite mode ends such a run: no step can be skipped
    to mend a policy that is already broken."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if bool(torch.isnan(scores).any() or torch.isposinf(scores).any()):
            raise Diverged("diverged: the policy's next-token logits are NaN or infinite while generating")
        return scores


def response_mask(response: torch.Tensor, eos: int | None, pad: int, stop_strings: bool = False) -> torch.Tensor:
    """True up to and including each row's first eos; generate() pads finished rows after that. With `stop_strings`
    a row that one of them finished is padded without an eos, so its first pad ends it too (without them a pad id the
    policy drew is a token like any other)."""
    if eos is None:
        return (response != pad).long().cumprod(-1).bool()
    is_eos = response == eos
    ended_before = (is_eos.long().cumsum(-1) - is_eos.long()) > 0
    real = ~ended_before
    if stop_strings and pad != eos:
        real &= (response != pad).long().cumprod(-1).bool()
    return real


def finish_reason(tokens: list[int], eos: int | None, sampling: Sampling) -> Literal["stop", "length"]:
    """stop when the response ended before max_new_tokens or with eos; length when it ran out of room."""
    ended = len(tokens) < sampling.max_new_tokens or (bool(tokens) and tokens[-1] == eos)
    return "stop" if ended else "length"


def cut_at_stop(tokens: list[int], logprobs: list[float], stop: tuple[str, ...], tokenizer: Any) -> tuple[list[int], list[float]]:
    """The response through the token that completes the first of `stop` in its text, as generate()'s stop strings
    end it: for the engines that decode past a stop string (continuous batching, a tokens-only vLLM server)."""
    if not stop or not any(s in tokenizer.decode(tokens, skip_special_tokens=True) for s in stop):
        return tokens, logprobs  # most answers hold none: one decode
    for end in range(1, len(tokens) + 1):
        if any(s in tokenizer.decode(tokens[:end], skip_special_tokens=True) for s in stop):
            return tokens[:end], logprobs[:end]
    return tokens, logprobs


class BackendEngine(Colocated):
    """Sampling through the backend's generate (a sharded policy keeps every rank generating until the longest
    response on any rank ends; megatron's decodes from its shards)."""

    def options(self) -> dict[str, Any]:
        return {}

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Completion]:
        tokenizer, device = self.tokenizer, self.backend.device
        pad, eos = pad_id(tokenizer), tokenizer.eos_token_id
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], dtype=torch.long, device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long, device=device)
        settings: dict[str, Any] = (
            {"do_sample": False}
            if sampling.greedy
            else {"do_sample": True, "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p}
        )
        if sampling.stop:
            settings |= {"stop_strings": list(sampling.stop), "tokenizer": tokenizer}
        reader = TakenLogprobs()
        was_training = self.policy.training
        self.policy.eval()
        try:
            out = self.backend.generate(
                self.policy,
                input_ids=ids,
                attention_mask=mask,
                logits_processor=LogitsProcessorList([reader, FiniteLogits()]),
                max_new_tokens=sampling.max_new_tokens,
                pad_token_id=pad,
                eos_token_id=eos,
                use_cache=True,
                **settings,
                **self.options(),
            )
        finally:
            self.policy.train(was_training)
        response = out[:, width:]
        logprobs = reader.collected(out, response.shape[1]).cpu()
        keep = response_mask(response, eos, pad, bool(sampling.stop)).cpu()
        completions = []
        for row, kept, drawn in zip(response.cpu(), keep, logprobs, strict=True):
            tokens = row[kept].tolist()
            completions.append(Completion(tokens, drawn[kept].tolist(), finish_reason(tokens, eos, sampling), self.version))
        return completions


class HfEngine(BackendEngine):
    """transformers' generate() on the unwrapped policy; with `static_cache`, a static KV cache (compiled, with CUDA
    graphs, by transformers on a GPU)."""

    name = "hf"

    def __init__(self, backend: Backend, policy: nn.Module, tokenizer: Any, static_cache: bool = False) -> None:
        super().__init__(backend, policy, tokenizer)
        self.static_cache = static_cache

    def options(self) -> dict[str, Any]:
        return {"cache_implementation": "static"} if self.static_cache else {}


class MegatronEngine(BackendEngine):
    """megatron-core KV-cache decoding from the policy's tensor- and pipeline-parallel shards."""

    name = "megatron"


def make_engine(
    gen: GenSpec,
    backend: Backend,
    policy: nn.Module,
    tokenizer: Any,
    *,
    run_dir: Path | None = None,
    reporter: Any = None,
    weights: Mapping[str, torch.Tensor] | None = None,
) -> Engine:
    """The engine gen.engine names (auto: the backend's own), checked against the backend. The vllm engine starts a
    server that lives as long as the run: it needs the run's directory (its weights and log go there) and, where
    the policy is sharded, its gathered `weights` on rank 0 (`policy_state`)."""
    own, name = getattr(backend, "rollout_engine", "hf"), engine_name(gen, backend)
    if name == "megatron" or own == "megatron":
        if name != own:
            raise BackendError(f"gen.engine {name} cannot sample on this backend, whose policy only the {own} engine runs")
        if gen.static_cache:
            raise BackendError("gen.static_cache is for the hf engine; megatron's decoding keeps its own cache")
        return MegatronEngine(backend, policy, tokenizer)
    if gen.static_cache and name != "hf":
        raise BackendError(f"gen.static_cache is for the hf engine; the {name} engine keeps its own cache")
    if name == "continuous":
        from trainer_core.rollout.continuous import ContinuousEngine

        return ContinuousEngine(backend, policy, tokenizer, gen.kv_cache_share)
    if name == "vllm":
        if run_dir is None:
            raise BackendError("gen.engine vllm serves a whole run: it is opened with the run (engines.make_engine run_dir)")
        from trainer_core.rollout.vllm import VllmEngine

        return VllmEngine.start(gen.vllm, backend, policy, tokenizer, run_dir, reporter, weights)
    return HfEngine(backend, policy, tokenizer, gen.static_cache)


def engine_name(gen: GenSpec, backend: Backend) -> str:
    """The engine gen.engine names on `backend`: for auto, the backend's own."""
    return getattr(backend, "rollout_engine", "hf") if gen.engine == "auto" else gen.engine


def generator_engine(
    gen: GenSpec,
    placement: str,
    backend: Backend,
    model: nn.Module,
    policy: nn.Module,
    tokenizer: Any,
    run_dir: Path,
    reporter: Any,
) -> tuple[Engine, nn.Module]:
    """The engine of asynchronous GRPO's generator (rollout/overlap.py), one that holds weights of its own, and the
    policy its sampling is handed: with `placement` process, gen.engine (hf or continuous) in a child process
    (rollout/own_process.py); with node, in the generator node's process (at GENERATOR_ADDRESS_ENV); the vllm server;
    else gen.engine on a private copy of the policy (OwnWeights). All but the last start on the policy's state
    (`policy_state`: every rank must call it)."""
    if placement in ("process", "node"):
        from trainer_core.rollout.own_process import ProcessEngine

        settings = {"static_cache": gen.static_cache, "kv_cache_share": gen.kv_cache_share}
        settings["weights"] = policy_state(backend, model, policy)
        name = engine_name(gen, backend)
        if placement == "process":
            engine = ProcessEngine.start(name, policy, tokenizer, backend, run_dir, **settings)
        else:
            address = os.environ.get(GENERATOR_ADDRESS_ENV)
            if not address:
                raise BackendError(
                    f"grpo.generator node: no generator node to reach ({GENERATOR_ADDRESS_ENV} is unset); a run with a "
                    "generator node runs on an rlplane gang (resources.nodes 2), or set grpo.generator process to run here"
                )
            engine = ProcessEngine.connect(address, name, policy, tokenizer, run_dir, **settings)
        return engine, policy  # the process holds the weights; sampling only hands the policy on
    if gen.engine == "vllm":
        state = policy_state(backend, model, policy)
        return make_engine(gen, backend, policy, tokenizer, run_dir=run_dir, reporter=reporter, weights=state), policy
    copy = deepcopy(policy).eval().requires_grad_(False)
    inner = make_engine(gen, backend, copy, tokenizer)
    if not isinstance(inner, Colocated):
        raise BackendError(f"the {inner.name} engine cannot sample a private copy of the policy")
    return OwnWeights(inner, copy), copy


def policy_state(backend: Backend, model: nn.Module, policy: nn.Module) -> Mapping[str, torch.Tensor] | None:
    """On rank 0 the policy's whole state: `model` as the backend prepared it, gathered from the ranks where it is
    sharded; of it, the part that is `policy` (PPO's actor-critic holds its policy), under the policy's own names.
    None on the other ranks. Every rank must call it."""
    whole = backend.unwrap(model)
    state, _ = backend.full_state(model)
    if state is None and backend.is_rank_zero:
        state = whole.state_dict()
    if state is not None and policy is not whole:
        prefix = next(name for name, module in whole.named_modules() if module is policy) + "."
        state = {key.removeprefix(prefix): value for key, value in state.items() if key.startswith(prefix)}
    return state


def push_weights(engine: Engine, backend: Backend, model: nn.Module, version: int, policy: nn.Module | None = None) -> float:
    """Bring `engine` to policy `version` (optimizer steps): a colocated engine moves its version; one with its own
    weights gets the policy's state (`policy_state`; `policy` defaults to the whole prepared model), paused
    meanwhile, and every rank waits until it has them. Every rank must call it. The seconds it took."""
    if engine.version == version:
        return 0.0
    started = time.perf_counter()
    if isinstance(engine, Colocated):
        engine.update_weights(None, version)
        return time.perf_counter() - started
    state = policy_state(backend, model, policy if policy is not None else backend.unwrap(model))
    engine.pause()
    try:
        engine.update_weights(state, version)
    finally:
        engine.resume()
    backend.all_reduce(torch.zeros(1, device=backend.device), "sum")  # no rank samples before rank 0 has reloaded
    return time.perf_counter() - started


def opened(run: Any, gen: GenSpec, policy: nn.Module) -> Engine:
    """The run's engine (run.engine; opened on first use, from `gen`, and closed with the run), at the run's policy
    version (run.step): weights pushed to it first when it holds its own. `policy` is the causal LM it samples."""
    engine, model = getattr(run, "engine", None), getattr(run, "model", policy)
    if engine is None:
        run_dir, reporter = getattr(run, "out_dir", None), getattr(run, "reporter", None)
        weights = policy_state(run.backend, model, policy) if gen.engine == "vllm" else None  # what its server starts on
        engine = make_engine(gen, run.backend, policy, run.tokenizer, run_dir=run_dir, reporter=reporter, weights=weights)
        run.engine = engine
    synced = push_weights(engine, run.backend, model, getattr(run, "step", 0), policy)
    run.weight_sync_s = getattr(run, "weight_sync_s", 0.0) + synced
    return engine


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
