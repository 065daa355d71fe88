"""Check every row of an uploaded file against its kind, and report the row and column at fault."""

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from rlplane.dataset_rows import apply_columns, column_map, row_problems
from rlplane.spec.base import DATA_FILE_SUFFIXES as SUFFIXES
from rlplane.spec.sections import DataColumns

FORMATS = {suffix: suffix[1:] for suffix in SUFFIXES}  # what the trainer reads
MAX_ERRORS = 20
ROWS_NAMED = 5  # a problem many rows share is said once, naming the first few
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# The trainer reads rows through the default data.columns (an sft "response" is its "completion"): so does the check.
_DEFAULT_COLUMNS = column_map(DataColumns())


@dataclass
class Report:
    rows: int = 0
    columns: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    # (column, message) -> (rows that have it, how many): one error each, however many rows share it
    shared: dict[tuple[str | None, str], tuple[list[int], int]] = field(default_factory=dict)

    def error(self, row: int, column: str | None, msg: str) -> None:
        """A problem of this row alone (it is not JSON, the file cannot be read)."""
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(_error(row, column, msg))

    def problem(self, row: int, column: str | None, msg: str) -> None:
        """A rule a row breaks, which other rows may break alike."""
        rows, count = self.shared.get((column, msg), ([], 0))
        self.shared[(column, msg)] = (rows if len(rows) >= ROWS_NAMED else [*rows, row], count + 1)

    def finish(self) -> None:
        found = f"; the file's columns are {', '.join(self.columns)}" if self.columns else ""
        for (column, msg), (rows, count) in self.shared.items():
            if len(self.errors) >= MAX_ERRORS:
                break
            said = f"{msg}{found if msg == 'is missing' else ''}"
            if count == 1:
                self.errors.append(_error(rows[0], column, said))
                continue
            named = ", ".join(map(str, rows)) + (", ..." if count > len(rows) else "")
            where = f"column '{column}' " if column else ""
            message = f"{where}in {count} of {self.rows} rows (rows {named}): {said}"
            self.errors.append({"loc": ["body", "file", *([column] if column else [])], "msg": message, "type": "value_error"})


def _error(row: int, column: str | None, msg: str) -> dict[str, Any]:
    where = f"row {row}" + (f", column '{column}'" if column else "")
    return {"loc": ["body", "file", f"row {row}", *([column] if column else [])], "msg": f"{where}: {msg}", "type": "value_error"}


def check_row(kind: str, row_no: int, row: Any, report: Report) -> None:
    # The rules live in trainer_core so an upload and a training run judge a row alike.
    for problem in row_problems(kind, apply_columns(row, _DEFAULT_COLUMNS)):
        report.problem(row_no, problem.column, problem.message)


def iter_rows(path: Path, fmt: str, report: Report) -> Iterator[tuple[int, Any]]:
    if fmt == "json":
        try:
            rows = json.loads(path.read_bytes())
        except (json.JSONDecodeError, UnicodeError) as exc:
            report.error(0, None, f"is not valid JSON ({exc}); a .json data file holds one array of row objects")
            return
        if not isinstance(rows, list):
            report.error(0, None, f"a .json data file must hold an array of row objects, not a {type(rows).__name__}")
            return
        yield from enumerate(rows, start=1)
        return
    if fmt == "parquet":
        parquet = pq.ParquetFile(path)
        row_no = 0
        for batch in parquet.iter_batches(batch_size=4096):
            for row in batch.to_pylist():
                row_no += 1
                yield row_no, row
        return
    with path.open("rb") as handle:
        for row_no, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
                if _SURROGATE_ESCAPE.search(raw):
                    json.dumps(row, ensure_ascii=False).encode()  # a lone \ud800 parses but can be neither stored nor served
            except (json.JSONDecodeError, UnicodeError) as exc:
                report.error(row_no, None, f"is not valid JSON ({exc})")
                continue
            yield row_no, row


def validate_file(path: Path, fmt: str, kind: str) -> Report:
    report = Report()
    columns: dict[str, None] = {}
    try:
        for row_no, row in iter_rows(path, fmt, report):
            report.rows += 1
            check_row(kind, row_no, row, report)
            if isinstance(row, dict) and len(columns) < 256:
                columns.update(dict.fromkeys(name.replace("\x00", "\ufffd") for name in row))  # JSONB cannot hold NUL
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        report.error(0, None, f"cannot read the file as {fmt}: {exc}")
    if report.rows == 0 and not report.errors:
        report.error(0, None, "the file has no rows")
    report.columns = list(columns)
    report.finish()
    return report


def preview(path: Path, fmt: str, rows: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _row_no, row in iter_rows(path, fmt, Report()):
        out.append(json.loads(json.dumps(row, default=str)))
        if len(out) >= rows:
            break
    return out
