"""How the CLI prints: rich tables for people, stable JSON for scripts, and small text helpers."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def _console(**kwargs: Any) -> Console:
    console = Console(soft_wrap=True, **kwargs)
    if not console.is_terminal:  # piped or in CI: wide enough that tables do not truncate ids and paths
        console.width = int(os.environ.get("COLUMNS") or 200)
    return console


stdout = _console()
stderr = _console(stderr=True)


def _fit(console: Console) -> Console:
    """Its width decided when printing, not when this module was imported (the environment may have changed
    since, as under a test runner): piped or in CI, COLUMNS (else 200) wide."""
    if not console.is_terminal:
        console.width = int(os.environ.get("COLUMNS") or 200)
    return console


_BARS = "▁▂▃▄▅▆▇█"


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=True) + "\n")
    sys.stdout.flush()


def say(message: str) -> None:
    """A message for the user on stderr, printed as is (no rich markup: run names may hold brackets)."""
    stderr.print(message, markup=False, highlight=False)


def print_compact(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, allow_nan=True) + "\n")
    sys.stdout.flush()


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> None:
    out = Table(*columns, title=title, header_style="bold", box=None, pad_edge=False)
    for row in rows:
        out.add_row(*(Text("" if v is None else str(v)) for v in row))  # Text: no markup from data
    _fit(stdout).print(out)


def fields(pairs: Iterable[tuple[str, Any]]) -> None:
    """A two-column 'name  value' block, skipping empty values."""
    out = Table.grid(padding=(0, 2))
    out.add_column(style="bold")
    out.add_column()
    for name, value in pairs:
        if value not in (None, "", []):
            out.add_row(name, Text(str(value)))
    _fit(stdout).print(out)


def sparkline(values: Sequence[float], width: int = 32) -> str:
    finite = [v for v in values if isinstance(v, int | float) and math.isfinite(v)]
    if not finite:
        return ""
    if len(values) > width:  # keep the last point of each bucket, as the API's downsampling does
        values = [values[min(len(values) - 1, (i + 1) * len(values) // width - 1)] for i in range(width)]
    low, high = min(finite), max(finite)
    span = (high - low) or 1.0
    return "".join(
        _BARS[int((v - low) / span * (len(_BARS) - 1))] if isinstance(v, int | float) and math.isfinite(v) else " "
        for v in values
    )


def number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def size(n: int | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _parse(ts: str | None) -> datetime | None:
    if not ts:
        return None
    moment = datetime.fromisoformat(ts)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def when(ts: str | None) -> str:
    """An API timestamp as 'YYYY-MM-DD HH:MM:SS' (UTC)."""
    moment = _parse(ts)
    return "" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def seconds(total: float | None) -> str:
    if total is None:
        return ""
    total = int(total)
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m{total % 60:02d}s"
    return f"{total // 3600}h{total % 3600 // 60:02d}m"


def ago(ts: str | None) -> str:
    moment = _parse(ts)
    return "" if moment is None else seconds((datetime.now(UTC) - moment).total_seconds()) + " ago"


def duration(start: str | None, end: str | None) -> str:
    begin = _parse(start)
    if begin is None:
        return ""
    return seconds(((_parse(end) or datetime.now(UTC)) - begin).total_seconds())
