"""Preference rows -> token ids and labels for both completions, and the pair collate.

Rows come from `trainer_core.data.load_examples(..., "preference")` as {prompt, chosen, rejected}:
  strings         prompt + completion (+ eos), as an sft prompt/completion row
  message lists   the prompt (a conversation) and each completion (an assistant string or message
                  list) rendered with the tokenizer's chat template
Labels hold the completion's tokens only (prompt tokens are -100), so `sequence_logprobs` gives
log π(completion | prompt) for DPO; the reward model reads the ids and ignores the labels.
Each sequence is cut to model.max_seq_len at its end, as sft does: a prompt that fills it leaves
no completion token (that pair then carries no DPO signal).

`collate_pairs` puts the chosen sequences first and the rejected ones second in one padded
batch of 2B rows, so a recipe scores both with one forward pass and splits the output in half.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlplane.spec import RunSpec
from trainer_core.data import DataError, kind_for_algorithm, load_examples
from trainer_core.data.tokenize import Example, _render, collate, cut_to, pad_id, whole_row
from trainer_core.losses import IGNORE_INDEX

PairExample = dict[str, Example]  # {"chosen": {"input_ids", "labels"}, "rejected": {...}}


@dataclass
class PairData:
    train: list[PairExample]
    eval: list[PairExample]
    eval_rows: list[dict]  # the held-out rows as loaded: their text, for samples
    train_cut: int = 0  # training pairs with a side longer than model.max_seq_len (cut at its end)


def load_pairs(spec: RunSpec, tokenizer: Any) -> PairData:
    """The spec's preference rows, tokenized at model.max_seq_len (call it after common.fit_context)."""
    split = load_examples(spec.data, kind_for_algorithm(spec.algorithm), seed=spec.train.seed)
    length = spec.model.max_seq_len
    train, cut = tokenize_pairs_counting(split.train, tokenizer, length)
    return PairData(train, tokenize_pairs(split.eval, tokenizer, length), split.eval, cut)


def tokenize_pair(row: dict[str, Any], tokenizer: Any, max_seq_len: int) -> PairExample:
    """One preference row as a chosen and a rejected example, each at most max_seq_len tokens."""
    return {side: cut_to(example, max_seq_len) for side, example in _whole_pair(row, tokenizer).items()}


def tokenize_pairs(rows: list[dict], tokenizer: Any, max_seq_len: int) -> list[PairExample]:
    return tokenize_pairs_counting(rows, tokenizer, max_seq_len)[0]


def tokenize_pairs_counting(rows: list[dict], tokenizer: Any, max_seq_len: int) -> tuple[list[PairExample], int]:
    """tokenize_pairs, and how many pairs had a side longer than max_seq_len (cut at its end)."""
    whole = [_whole_pair(row, tokenizer) for row in rows]
    cut = sum(any(len(side["input_ids"]) > max_seq_len for side in pair.values()) for pair in whole)
    return [{side: cut_to(example, max_seq_len) for side, example in pair.items()} for pair in whole], cut


def _whole_pair(row: dict[str, Any], tokenizer: Any) -> PairExample:
    return {side: _whole_side(row["prompt"], row[side], tokenizer) for side in ("chosen", "rejected")}


def collate_pairs(pairs: list[PairExample], pad_token_id: int) -> dict[str, torch.Tensor]:
    """[chosen_0..chosen_{B-1}, rejected_0..rejected_{B-1}] right-padded together: 2B rows."""
    return collate([p["chosen"] for p in pairs] + [p["rejected"] for p in pairs], pad_token_id)


def pair_batch(pairs: list[PairExample], tokenizer: Any, device: torch.device) -> dict[str, torch.Tensor]:
    """`collate_pairs` with the tokenizer's pad id, on `device`."""
    return {k: v.to(device) for k, v in collate_pairs(pairs, pad_id(tokenizer)).items()}


def pair_tokens(pairs: list[PairExample]) -> int:
    """Input tokens of both sides of every pair (for perf/tokens_per_s)."""
    return sum(len(p["chosen"]["input_ids"]) + len(p["rejected"]["input_ids"]) for p in pairs)


def tokenize_side(prompt: str | list[dict], completion: str | list[dict], tokenizer: Any, max_seq_len: int) -> Example:
    return cut_to(_whole_side(prompt, completion, tokenizer), max_seq_len)


def _whole_side(prompt: str | list[dict], completion: str | list[dict], tokenizer: Any) -> Example:
    if isinstance(prompt, str) and isinstance(completion, str):
        return whole_row({"prompt": prompt, "completion": completion}, tokenizer)
    ids, labels = _messages(_as_messages(prompt, "user"), _as_messages(completion, "assistant"), tokenizer)
    return {"input_ids": ids, "labels": labels}


def _as_messages(value: str | list[dict], role: str) -> list[dict]:
    return [{"role": role, "content": value}] if isinstance(value, str) else list(value)


def _messages(prompt: list[dict], completion: list[dict], tokenizer: Any) -> tuple[list[int], list[int]]:
    """The whole conversation through the chat template; labels on the characters after the prompt.

    Unlike sft's assistant-turn masking, earlier assistant turns inside the prompt stay masked:
    DPO compares the two completions, not the shared context.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(
            "the data has message-list preference rows but the model's tokenizer has no chat template; "
            "use string prompt/chosen/rejected rows or a model whose tokenizer has one"
        )
    text = _render(tokenizer, prompt + completion)
    head = _render(tokenizer, prompt, generation_prompt=True)
    if not text.startswith(head):
        raise DataError(
            "the chat template renders the prompt differently once a completion follows it, so the completion's "
            "tokens cannot be located; use string prompt/chosen/rejected rows for this model"
        )
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(encoded["input_ids"])
    labels = [
        token if begin >= len(head) else IGNORE_INDEX for token, (begin, _) in zip(ids, encoded["offset_mapping"], strict=True)
    ]
    return ids, labels
