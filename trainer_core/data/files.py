"""Read the rows of a local .jsonl, .json or .parquet file, or say exactly why not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from rlplane.dataset_rows import DataError
from rlplane.spec.base import DATA_FILE_SUFFIXES as SUFFIXES


def file_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise DataError(
            f"{path}: cannot read {suffix or 'a file without a suffix'}; data files must be .jsonl, .json or .parquet"
        )
    return suffix[1:]


def read_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number from 1, row) for every row; blank JSONL lines are skipped but still counted."""
    fmt = file_format(path)
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise DataError(f"data file {path} {what}; check data.source (relative paths start from {Path.cwd()})")
    if fmt == "parquet":
        yield from _parquet_rows(path)
    elif fmt == "json":
        yield from _json_rows(path)
    else:
        yield from _jsonl_rows(path)


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise DataError(f"{path}: cannot read the file as parquet ({exc})") from exc
    yield from enumerate(table.to_pylist(), start=1)


def _json_rows(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeError) as exc:
        raise DataError(f"{path}: not valid JSON ({exc}); a .json data file holds one array of row objects") from exc
    if not isinstance(rows, list):
        raise DataError(
            f"{path}: a .json data file must hold an array of row objects, got a {type(rows).__name__}; "
            "for one object per line name the file .jsonl"
        )
    yield from enumerate(rows, start=1)


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open("rb") as handle:
        for row_no, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                yield row_no, json.loads(raw)
            except (json.JSONDecodeError, UnicodeError) as exc:
                raise DataError(f"{path}: row {row_no} is not valid JSON ({exc}); each line must be one JSON object") from exc
