"""The samples a run shows, beside its metrics: what the model answers, on prompts that stay the same across steps.

    RL (ppo, grpo)   the tracked prompts (the first samples_to_log held-out prompts, else training prompts):
                     every samples_every steps, freshly sampled responses (a GRPO prompt's whole group) with
                     reward, reward components, length, truncation, KL and (grpo) advantage
    sft, dpo         at each evaluation, greedy answers to the first held-out prompts, beside the dataset's answer
    reward, dpo      at each evaluation, the first held-out pairs: chosen and rejected with their scores

The samples of one step that share a prompt are its group. Sampling for them is only observed: the reward's
running normaliser is left as it was, and every rank runs the same generation and forwards (a sharded model's
are collectives) while rank zero reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rlplane.spec.generation import GenSpec
from trainer_core.recipes.common import is_due
from trainer_core.reporting import Sample
from trainer_core.rollout import rollouts


def due(step: int, every: int, last: int) -> bool:
    """Samples at the first step (a short run shows some), every `every` steps, and at the last."""
    return step == 1 or is_due(step, every, last)


def tracked_rows(run: Any, count: int) -> list[dict]:
    """The prompts followed across steps: the first held-out ones (training ones when none are held out)."""
    return rollouts.eval_rows(run)[:count]


def response_samples(
    scored: rollouts.Scored,
    gen: GenSpec,
    kls: Sequence[float] | None = None,
    extra: Mapping[str, Sequence[float]] | None = None,
    label: str | None = None,
    turns: Sequence[tuple[tuple[str, str], ...]] | None = None,
) -> list[Sample]:
    """One Sample per scored response: its reward, each reward component, its length in tokens, whether it ran
    out of tokens (truncated: 1), its KL, any `extra` per-response numbers (advantage), and an episode's `turns`."""
    lengths = scored.generation.response_mask.long().sum(1).tolist()
    out = []
    for i, (prompt, response) in enumerate(zip(scored.prompts, scored.responses, strict=True)):
        scores = {f"reward/{name}": float(values[i]) for name, values in scored.scores.components.items()}
        scores |= {"length": float(lengths[i]), "truncated": float(lengths[i] >= gen.max_new_tokens)}
        scores |= {name: float(values[i]) for name, values in (extra or {}).items()}
        kl = None if kls is None else float(kls[i])
        reward, turn = float(scored.scores.total[i]), None if turns is None else turns[i]
        out.append(Sample(prompt=prompt, response=response, reward=reward, kl=kl, scores=scores, label=label, turns=turn))
    return out


def reference_answer(row: dict) -> str | None:
    """The dataset's own answer to a row's prompt: an sft completion, the last assistant message, a task's answer,
    a preference pair's chosen response."""
    for column in ("completion", "chosen", "answer"):
        value = row.get(column)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and isinstance(value[-1], dict):
            return str(value[-1].get("content", ""))
    messages = row.get("messages")
    if isinstance(messages, list) and messages and messages[-1].get("role") == "assistant":
        return str(messages[-1]["content"])
    return None


def prompt_of(row: dict) -> str | list[dict]:
    """A row's prompt as rollouts.generate takes it: the text, or the conversation before the last answer."""
    if "prompt" in row:
        return row["prompt"]
    messages = row.get("messages") or []
    return messages[:-1] if messages and messages[-1].get("role") == "assistant" else messages


@torch.no_grad()
def generations(run: Any, policy: torch.nn.Module, rows: list[dict], max_new_tokens: int) -> list[Sample]:
    """Greedy answers of `policy` to the rows' prompts, each beside the dataset's own answer (every rank runs it)."""
    rows = [row for row in rows if prompt_of(row)]
    if not rows:
        return []
    # Prompt and answer share model.max_seq_len: the answer gets at most half of it.
    length = run.spec.model.max_seq_len
    gen = GenSpec(max_new_tokens=max(1, min(max_new_tokens, length // 2)))
    prompts = [{"prompt": prompt_of(row)} for row in rows]
    budget = length - gen.max_new_tokens
    generation = rollouts.generate(
        policy, rollouts.encode_prompts(prompts, run.tokenizer, budget), run.tokenizer, gen, run.backend, greedy=True
    )
    responses = rollouts.decode(run.tokenizer, generation)
    return [
        Sample(prompt=rollouts.prompt_text(p), response=r, label="generation", reference=reference_answer(row))
        for p, r, row in zip(prompts, responses, rows, strict=True)
    ]


def pair_samples(rows: Sequence[dict], chosen: Sequence[float], rejected: Sequence[float], what: str) -> list[Sample]:
    """Each pair as two samples of one group: chosen and rejected with their scores (`what` says which: the reward
    model's, DPO's implicit reward) and the margin."""
    out = []
    for row, good, bad in zip(rows, chosen, rejected, strict=True):
        prompt = rollouts.prompt_text({"prompt": row["prompt"]})
        for side, score in (("chosen", good), ("rejected", bad)):
            response = row[side] if isinstance(row[side], str) else str(row[side][-1].get("content", ""))
            scores = {what: float(score), "margin": float(good - bad)}
            out.append(Sample(prompt=prompt, response=response, reward=float(score), scores=scores, label=side))
    return out
