"""SFT rows -> token ids and labels, and the padding collate.

Rows come from `trainer_core.data.load_examples(..., "sft")` in one of three shapes:
  {prompt, completion}  labels on the completion (+ eos); prompt tokens are -100 unless loss_on_prompt
  {messages}            rendered with the tokenizer's chat template; labels on assistant turns only
  {text}                labels on every token (+ eos)
Every sequence is cut to model.max_seq_len. Labels are aligned with input_ids (the loss shifts).
"""

from __future__ import annotations

from typing import Any

import torch

from trainer_core.data import DataError
from trainer_core.losses import IGNORE_INDEX

Example = dict[str, list[int]]  # {"input_ids": [...], "labels": [...]}


def tokenize_row(row: dict[str, Any], tokenizer: Any, max_seq_len: int, loss_on_prompt: bool = False) -> Example:
    """One sft row as input_ids and labels (IGNORE_INDEX where no loss is taken), at most max_seq_len long."""
    return cut_to(whole_row(row, tokenizer, loss_on_prompt), max_seq_len)


def tokenize_rows(rows: list[dict], tokenizer: Any, max_seq_len: int, loss_on_prompt: bool = False) -> list[Example]:
    return tokenize_counting(rows, tokenizer, max_seq_len, loss_on_prompt)[0]


def tokenize_counting(
    rows: list[dict], tokenizer: Any, max_seq_len: int, loss_on_prompt: bool = False
) -> tuple[list[Example], int]:
    """tokenize_rows, and how many rows were longer than max_seq_len (cut at their end: their completion's last
    tokens and EOS are lost)."""
    whole = [whole_row(row, tokenizer, loss_on_prompt) for row in rows]
    return [cut_to(example, max_seq_len) for example in whole], sum(len(e["input_ids"]) > max_seq_len for e in whole)


def cut_to(example: Example, max_seq_len: int) -> Example:
    return {"input_ids": example["input_ids"][:max_seq_len], "labels": example["labels"][:max_seq_len]}


def whole_row(row: dict[str, Any], tokenizer: Any, loss_on_prompt: bool = False) -> Example:
    """tokenize_row without the cut."""
    if "messages" in row:
        ids, labels = _messages(row["messages"], tokenizer, loss_on_prompt)
    elif "text" in row:
        ids = _encode(tokenizer, row["text"], special=True) + _eos(tokenizer)
        labels = list(ids)
    else:
        prompt = _encode(tokenizer, row["prompt"], special=True)
        completion = _encode(tokenizer, row["completion"], special=False) + _eos(tokenizer)
        ids = prompt + completion
        labels = (prompt if loss_on_prompt else [IGNORE_INDEX] * len(prompt)) + completion
    return {"input_ids": ids, "labels": labels}


def pack(examples: list[Example], max_seq_len: int) -> list[Example]:
    """Greedily concatenate whole examples, in order, into sequences of at most max_seq_len tokens (sft.packing)."""
    packed: list[Example] = []
    current: Example = {"input_ids": [], "labels": []}
    for example in examples:
        if current["input_ids"] and len(current["input_ids"]) + len(example["input_ids"]) > max_seq_len:
            packed.append(current)
            current = {"input_ids": [], "labels": []}
        current["input_ids"] = current["input_ids"] + example["input_ids"]
        # The first label of an example is never predicted across the boundary from the previous one.
        current["labels"] = current["labels"] + [IGNORE_INDEX] + example["labels"][1:]
    if current["input_ids"]:
        packed.append(current)
    return packed


def collate(examples: list[Example], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest example: input_ids with pad_token_id, labels with -100, attention_mask 0."""
    width = max(len(e["input_ids"]) for e in examples)
    # Padded as Python lists and turned into one tensor per field: a tensor per row costs more than the rows.
    ids, labels, mask = [], [], []
    for example in examples:
        pad = width - len(example["input_ids"])
        ids.append([*example["input_ids"], *[pad_token_id] * pad])
        labels.append([*example["labels"], *[IGNORE_INDEX] * pad])
        mask.append([1] * len(example["input_ids"]) + [0] * pad)
    return {
        "input_ids": torch.tensor(ids, dtype=torch.long),
        "labels": torch.tensor(labels, dtype=torch.long),
        "attention_mask": torch.tensor(mask, dtype=torch.long),
    }


def model_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A collated batch's forward arguments (its labels stay out of the model)."""
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


def pad_id(tokenizer: Any) -> int:
    """The pad id, falling back to eos (gpt2 has no pad token); padding is masked either way."""
    for value in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if value is not None:
            return int(value)
    return 0


def _encode(tokenizer: Any, text: str, special: bool) -> list[int]:
    return list(tokenizer(text, add_special_tokens=special)["input_ids"])


def _eos(tokenizer: Any) -> list[int]:
    return [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]


def _render(tokenizer: Any, messages: list[dict], generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def _messages(messages: list[dict], tokenizer: Any, loss_on_prompt: bool) -> tuple[list[int], list[int]]:
    """The conversation through the chat template; labels on the characters each assistant turn adds."""
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(
            "the data has 'messages' rows but the model's tokenizer has no chat template; "
            "use prompt/completion rows or a model whose tokenizer has one"
        )
    text = _render(tokenizer, messages)
    spans: list[tuple[int, int]] = []
    cursor = 0
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before, through = (
            _render(tokenizer, messages[:i], generation_prompt=True) if i else "",
            _render(tokenizer, messages[: i + 1]),
        )
        if text.startswith(before) and text.startswith(through) and len(through) > len(before):
            spans.append((len(before), len(through)))  # the turn, its end-of-turn marker included
        else:  # a template whose prefixes are not prefixes of the whole: fall back to the content itself
            start = text.find(message["content"], cursor)
            if start < 0:
                continue
            spans.append((start, start + len(message["content"])))
        cursor = spans[-1][1]
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(encoded["input_ids"])
    if loss_on_prompt:
        return ids, list(ids)
    labels = [
        token if any(start <= begin < end for start, end in spans) else IGNORE_INDEX
        for token, (begin, _) in zip(ids, encoded["offset_mapping"], strict=True)
    ]
    return ids, labels
