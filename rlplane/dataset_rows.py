"""The row rules of the three dataset kinds, shared by the API's upload check and the trainer's loader.

sft         {"prompt", "completion"} | {"messages": [{"role", "content"}, ...]} | {"text"}
preference  {"prompt", "chosen", "rejected"}; chosen and rejected may be strings or message lists
prompts     {"prompt"} with an optional "answer" (for rewards that check one); the prompt a string or a message list
            (a conversation the chat template renders, the assistant's turn opened)

Extra columns are allowed everywhere and passed through untouched. Torch-free, pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlplane.spec.algorithms import ALGORITHM_ROWS

KINDS = ("sft", "preference", "prompts")

# The kind of rows each algorithm trains on (the spec's table: a builtin dataset of the wrong kind is refused at submit).
ALGORITHM_KINDS = ALGORITHM_ROWS

# data.columns field -> the column name rows carry after mapping (the spec calls the sft target "response").
CANONICAL_COLUMNS = {"prompt": "prompt", "response": "completion", "chosen": "chosen", "rejected": "rejected", "reward": "reward"}


class DataError(ValueError):
    """A data source that cannot be read, or whose rows break the rules of their kind."""


@dataclass(frozen=True)
class Problem:
    """One rule a row breaks: the column at fault (None: the row as a whole) and what is wrong."""

    column: str | None
    message: str

    def describe(self, row_no: int) -> str:
        where = f"row {row_no}" + (f", column '{self.column}'" if self.column else "")
        return f"{where}: {self.message}"


def kind_for_algorithm(algorithm: str) -> str:
    """The row kind an algorithm reads: sft/spin/ilql -> sft, reward/dpo -> preference, ppo/grpo/eval -> prompts."""
    try:
        return ALGORITHM_KINDS[algorithm]
    except KeyError:
        raise DataError(f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHM_KINDS)}") from None


def is_messages(value: Any) -> bool:
    """A non-empty list of {"role": str, "content": str} objects."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)
    )


def _need_text(row: dict, column: str, allow_messages: bool = False) -> list[Problem]:
    if column not in row:
        return [Problem(column, "is missing")]
    if isinstance(row[column], str) or (allow_messages and is_messages(row[column])):
        return []
    wanted = "a string or a list of {role, content} messages" if allow_messages else "a string"
    return [Problem(column, f"must be {wanted}, got {type(row[column]).__name__}")]


def row_problems(kind: str, row: Any) -> list[Problem]:
    """Every rule `row` breaks as a row of `kind` (sft, preference or prompts); [] when it fits."""
    if kind not in KINDS:
        raise ValueError(f"unknown dataset kind {kind!r}; expected one of {', '.join(KINDS)}")
    if not isinstance(row, dict):
        return [Problem(None, f"must be a JSON object, got {type(row).__name__}")]
    if kind == "prompts":
        return _need_text(row, "prompt", allow_messages=True)
    if kind == "preference":
        return [p for column in ("prompt", "chosen", "rejected") for p in _need_text(row, column, column != "prompt")]
    if "messages" in row:
        return (
            [] if is_messages(row["messages"]) else [Problem("messages", "must be a non-empty list of {role, content} objects")]
        )
    if "text" in row:
        return _need_text(row, "text")
    if "prompt" in row or "completion" in row:
        return _need_text(row, "prompt") + _need_text(row, "completion")
    return [Problem(None, "an sft row needs 'messages', 'text', or 'prompt' and 'completion'")]


def check_row(kind: str, row_no: int, row: Any) -> list[str]:
    """Messages such as "row 17, column 'chosen': is missing"; [] when the row fits its kind."""
    return [problem.describe(row_no) for problem in row_problems(kind, row)]


def column_map(columns: Any = None) -> dict[str, str]:
    """data.columns (a DataColumns, a dict of field -> source column, or None) as {source column: row column}.

    Only renames that change something are kept. A column left at its default never overwrites a
    row column of the canonical name: default columns map "response" to "completion" only in rows
    that have no "completion" (see apply_columns).
    """
    if columns is None:
        return {}
    if isinstance(columns, Mapping):
        chosen = dict(columns)
    else:
        chosen = {name: getattr(columns, name) for name in CANONICAL_COLUMNS}
    unknown = sorted(set(chosen) - set(CANONICAL_COLUMNS))
    if unknown:
        raise DataError(f"data.columns has unknown fields {unknown}; expected some of {', '.join(CANONICAL_COLUMNS)}")
    return {source: CANONICAL_COLUMNS[name] for name, source in chosen.items() if source != CANONICAL_COLUMNS[name]}


def apply_columns(row: Any, mapping: Mapping[str, str]) -> Any:
    """A copy of `row` with source columns renamed to the names the rules (and recipes) use.

    A canonical column already in the row wins over a mapped one of the same meaning, so a file
    with both "completion" and "response" keeps its "completion".
    """
    if not mapping or not isinstance(row, dict):
        return row
    out = {key: value for key, value in row.items() if key not in mapping or mapping[key] in row}
    for source, target in mapping.items():
        if source in row and target not in row:
            out[target] = row[source]
    return out
