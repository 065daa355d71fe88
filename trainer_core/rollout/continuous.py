"""The continuous-batching engine (gen.engine: continuous): transformers' own continuous batching
(`generate_batch`, a paged KV cache) on the live policy, colocated with training.

A padded batch (the hf engine) decodes every row until the longest one ends: a GRPO group's answers end at very
different lengths, and the rows that ended idle as padding. Here the scheduler gives a finished request's pages to
the next waiting one at once and decodes only live requests, so a step computes the tokens that exist.

Sizing. transformers sizes the paged cache from free accelerator memory when it is not told (on a GPU: the share
gen.kv_cache_share, the rest left to the training step; its first measurement on a CPU took 11 s a call here). On a
CPU the cache is sized to the call's own workload: pages for every request's prompt and its longest answer at once.
The cache lives for one call: between calls the training step has the memory back (sleep/wake have nothing to free).

Log-probabilities. transformers reports the log-probability of each token under the distribution it sampled from,
after temperature, top-k and top-p. With none of them (temperature 1, the RL default) that is the raw log-softmax the
trainer computes; with any, the engine scores its tokens again with one forward of the policy, so the engine's
numbers keep the meaning engines.py gives them (the raw distribution's).

Stop strings (gen.stop) are not among what transformers' continuous batching stops on: a response is cut after the
token that completes the first stop string in its text, which keeps exactly what generate() stopping there would have
(the tokens before it are drawn alike), at the price of decoding past it.

Reproducibility: each call seeds transformers' sampler from torch's generator, so a run's draws follow its seed and
a resumed run (whose checkpoint holds the RNG state) draws what the uninterrupted one drew.
"""

from __future__ import annotations

import gc
import math
from typing import Any

import torch
from torch import nn

from trainer_core.backends import Backend, BackendError
from trainer_core.failures import Diverged
from trainer_core.losses.policy import response_logprobs
from trainer_core.rollout.engines import Colocated, Completion, Sampling, cut_at_stop, finish_reason

PAGE = 32  # tokens per page of the paged cache on a CPU (transformers' default, 256, wastes most of a short answer's page)


class ContinuousEngine(Colocated):
    name = "continuous"

    def __init__(self, backend: Backend, policy: nn.Module, tokenizer: Any, kv_cache_share: float) -> None:
        if backend.forward_is_collective or backend.builds_partitioned:
            raise BackendError(
                "gen.engine continuous decodes from a whole policy on each rank; this backend shards it across ranks: "
                "use gen.engine hf (or auto), or a backend that keeps a whole copy (torch, deepspeed ZeRO-1/2)"
            )
        super().__init__(backend, policy, tokenizer)
        self.kv_cache_share = kv_cache_share

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Completion]:
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        processed = not sampling.greedy and (sampling.temperature != 1.0 or sampling.top_k > 0 or sampling.top_p < 1.0)
        config = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not sampling.greedy,
            temperature=sampling.temperature if processed else None,
            top_k=(sampling.top_k or None) if processed else None,
            top_p=sampling.top_p if processed else None,
            eos_token_id=eos,
            pad_token_id=pad,
        )
        seed = int(torch.randint(0, 2**31 - 1, (1,)))
        was_training = self.policy.training
        self.policy.eval()
        # transformers runs two full garbage collections as each call's manager stops: over a trainer's heap they took
        # 0.4 s a call here, 3/4 of a small call. Frozen, the objects alive before the call are not scanned (nothing
        # is kept frozen after it).
        gc.freeze()
        try:
            with torch.no_grad():
                results = self.policy.generate_batch(
                    prompts,
                    generation_config=config,
                    continuous_batching_config=self._config(prompts, sampling, seed, ContinuousBatchingConfig),
                    warmup=False,  # a manager lives for one call: capturing graphs ahead of it would cost every call
                )
        finally:
            gc.unfreeze()
            self.policy.train(was_training)
        outputs = list(results.values())
        failed = [o.error for o in outputs if o.error is not None]
        if len(outputs) != len(prompts) or failed:
            raise BackendError(
                f"the continuous engine finished {len(outputs) - len(failed)} of {len(prompts)} requests"
                + (f": {failed[0]}" if failed else " (transformers' logs above say why)")
            )
        completions = []
        for output in outputs:
            tokens, logprobs = list(output.generated_tokens), list(output.logprobs)
            if any(math.isnan(v) for v in logprobs):
                raise Diverged("diverged: the policy's next-token logits are NaN or infinite while generating")
            tokens, logprobs = self._cut(tokens, logprobs, sampling)
            completions.append(Completion(tokens, logprobs, finish_reason(tokens, eos, sampling), self.version))
        if processed:
            self._rescore(prompts, completions)
        return completions

    def _config(self, prompts: list[list[int]], sampling: Sampling, seed: int, config_type: type) -> Any:
        common = {"return_logprobs": True, "seed": seed, "auto_switch_to_flash": False}
        if self.backend.device.type == "cuda":
            return config_type(max_memory_percent=self.kv_cache_share, **common)
        pages = sum(math.ceil((len(p) + sampling.max_new_tokens) / PAGE) for p in prompts)
        return config_type(page_size=PAGE, num_blocks=pages + 1, max_batch_tokens=max(256, sum(map(len, prompts))), **common)

    def _cut(self, tokens: list[int], logprobs: list[float], sampling: Sampling) -> tuple[list[int], list[float]]:
        """The response through its first eos (transformers keeps it), then cut after the token that completes the
        first of `sampling.stop` in its text."""
        eos = self.tokenizer.eos_token_id
        if eos in tokens:
            end = tokens.index(eos) + 1
            tokens, logprobs = tokens[:end], logprobs[:end]
        return cut_at_stop(tokens, logprobs, sampling.stop, self.tokenizer)

    @torch.no_grad()
    def _rescore(self, prompts: list[list[int]], completions: list[Completion]) -> None:
        """The raw log-probability of each sampled token, from one forward of the policy over prompt and response."""
        from trainer_core.rollout.rollouts import from_completions

        generation = from_completions(prompts, completions, self.tokenizer.pad_token_id, self.backend.device)
        was_training = self.policy.training
        self.policy.eval()
        try:
            with self.backend.autocast():
                logits = self.policy(**generation.inputs()).logits
        finally:
            self.policy.train(was_training)
        raw = response_logprobs(logits.float(), generation.input_ids, generation.prompt_width).cpu()
        for row, done in zip(raw, completions, strict=True):
            done.logprobs = row[: len(done.tokens)].tolist()
