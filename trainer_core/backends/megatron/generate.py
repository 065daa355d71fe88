"""Sampling from a GPTModel shard with megatron-core's KV cache: rollouts come from the tensor-parallel
shards themselves, no rank ever holds the whole model for them.

The prompt runs once (prefill) into a megatron `StaticInferenceContext`, whose per-layer key/value
buffers hold this rank's heads; then one token at a time, each forward reading the cache. The
logits are gathered over TP (`runtime_gather_output`), so every rank of a TP group sees the same
whole-vocabulary scores and, seeded alike, draws the same tokens: the group stays in step without
exchanging the samples.

What a step does with the scores is what Hugging Face's `generate()` does, with its own classes, in
its order and with the same RNG calls, so a spec samples here what it samples on the other backends
(up to the float noise of TP's summation order): scores in fp32, temperature, top-k, top-p
(`TemperatureLogitsWarper`, `TopKLogitsWarper`, `TopPLogitsWarper`) when sampling, `softmax` then
`torch.multinomial` (else `argmax`); a finished row continues with `pad_token_id`; a row finishes at
an eos id or a stop string (`StopStringCriteria`); generation ends when every row has finished or
after `max_new_tokens`. Prompts are left-padded with an attention mask, as the recipes build them.

Sequence parallelism is switched off for the duration (megatron's `set_model_to_sequence_parallel`,
as its own inference engine does): a one-token step cannot be split over the sequence. Under pipeline
parallelism each step runs through the pipeline forward-only (`step`; pipeline.py): every stage keeps
its own layers' cache and every stage gets the last stage's logits, so they all draw the same token.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from megatron.core.inference.contexts import StaticInferenceContext
from megatron.core.models.gpt import GPTModel
from megatron.core.transformer.utils import set_model_to_sequence_parallel
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.generation.stopping_criteria import StopStringCriteria

from trainer_core.backends.megatron.causal_lm import attention_inputs

# What rollouts.generate passes that changes nothing here (the cache is always used).
_IGNORED = ("use_cache",)
# (input ids, positions, megatron's mask, the KV cache) -> the last position's logits [batch, 1, padded vocab].
StepForward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, StaticInferenceContext], torch.Tensor]


@torch.no_grad()
def generate(
    gpt: GPTModel,
    vocab_size: int,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    pad_token_id: int,
    attention_mask: torch.Tensor | None = None,
    eos_token_id: int | list[int] | None = None,
    do_sample: bool = False,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    stop_strings: list[str] | None = None,
    tokenizer: Any = None,
    logits_processor: LogitsProcessorList | None = None,
    step: StepForward | None = None,
    **options: Any,
) -> torch.Tensor:
    """[batch, prompt + generated] token ids, as `PreTrainedModel.generate(...)` returns them. `logits_processor` runs
    on each step's logits before the warpers, as in generate(). `step`: how one forward runs (the whole pipeline,
    under pipeline parallelism); by default `gpt` itself."""
    unknown = sorted(set(options) - set(_IGNORED))
    if unknown:
        raise TypeError(f"megatron generation does not support {unknown}; it takes what the RL recipes pass.")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    warpers = _warpers(do_sample, temperature, top_k, top_p)
    stop = StopStringCriteria(tokenizer, stop_strings) if stop_strings else None
    eos = torch.tensor([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id or [], device=input_ids.device)
    batch, width = input_ids.shape
    sequence_parallel = gpt.config.sequence_parallel
    if sequence_parallel:
        set_model_to_sequence_parallel(gpt, False)
    was_training = gpt.training
    gpt.eval()
    try:
        context = StaticInferenceContext(max_batch_size=batch, max_sequence_length=width + max_new_tokens)
        ids, mask = input_ids, attention_mask.long()
        unfinished = torch.ones(batch, dtype=torch.long, device=input_ids.device)
        step_ids, step_positions = ids, _positions(mask)
        _, step_mask = attention_inputs(ids, mask, step_positions)
        forward = step or partial(_one_stage, gpt)
        for _ in range(max_new_tokens):
            logits = forward(step_ids, step_positions, step_mask, context)
            context.sequence_len_offset += step_ids.shape[1]
            scores = logits[:, -1, :vocab_size].to(dtype=torch.float32)
            scores = warpers(ids, logits_processor(ids, scores) if logits_processor else scores)
            if do_sample:
                next_tokens = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
            else:
                next_tokens = torch.argmax(scores, dim=-1)
            if len(eos):
                next_tokens = next_tokens * unfinished + pad_token_id * (1 - unfinished)
            ids = torch.cat([ids, next_tokens[:, None]], dim=-1)
            mask = torch.cat([mask, mask.new_ones(batch, 1)], dim=-1)
            finished = torch.isin(next_tokens, eos) if len(eos) else torch.zeros_like(next_tokens, dtype=torch.bool)
            if stop is not None:
                finished |= stop(ids, None)
            unfinished = unfinished & ~finished.long()
            if unfinished.max() == 0:
                break
            step_ids, step_positions = next_tokens[:, None], _positions(mask)[:, -1:]
            step_mask = ~mask.bool()[:, None, None, :]  # megatron's convention: True is masked
        return ids
    finally:
        gpt.train(was_training)
        if sequence_parallel:
            set_model_to_sequence_parallel(gpt, True)


def _one_stage(
    gpt: GPTModel, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, context: StaticInferenceContext
) -> torch.Tensor:
    return gpt(ids, positions, mask, inference_context=context, runtime_gather_output=True)


def _warpers(do_sample: bool, temperature: float | None, top_k: int | None, top_p: float | None) -> LogitsProcessorList:
    """Hugging Face's sampling warpers for these settings, in generate()'s order (none when greedy)."""
    warpers = LogitsProcessorList()
    if not do_sample:
        return warpers
    if temperature is not None and temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k is not None and top_k != 0:
        warpers.append(TopKLogitsWarper(top_k=top_k, min_tokens_to_keep=1))
    if top_p is not None and top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))
    return warpers


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Each token's position counted over the real tokens of its row (left padding at 0), as HF counts them."""
    return (mask.cumsum(-1) - 1).clamp(min=0)
