"""`rlplane usage`: what runs cost over a period, rolled up (docs/scheduling.md, "Usage")."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from cli import output
from cli.context import JsonFlag, handled, state


class By(StrEnum):
    project = "project"
    user = "user"
    queue = "queue"
    run = "run"


class Interval(StrEnum):
    hour = "hour"
    day = "day"


@handled
def usage(
    ctx: typer.Context,
    since: Annotated[str | None, typer.Option(help="Start, ISO 8601 (default: 7 days before --until)")] = None,
    until: Annotated[str | None, typer.Option(help="End, ISO 8601 (default: now)")] = None,
    by: Annotated[By, typer.Option(help="Roll up by project, user, queue or run")] = By.project,
    interval: Annotated[Interval | None, typer.Option(help="Also per hour or day")] = None,
    csv: Annotated[bool, typer.Option("--csv", help="CSV on stdout, one line per row (and interval)")] = False,
    as_json: JsonFlag = False,
) -> None:
    """GPU-hours (GPUs x wall time of each attempt) and, for CPU runs, worker-slot-hours, of the runs you may read;
    the input tokens their attempts trained on (as each attempt's worker said; the supervised recipes count them).

    \b
    Example:
      rlplane usage --since 2026-11-01 --by queue
    """
    params = {"by": by.value, **({"since": since} if since else {}), **({"until": until} if until else {})}
    params |= {"interval": interval.value} if interval else {}
    client = state(ctx).client()
    if csv:
        return typer.echo(client.usage_csv(**params), nl=False)
    report = client.usage(**params)
    if as_json:
        return output.print_json(report)
    output.say(f"usage from {output.when(report['since'])} to {output.when(report['until'])}, by {report['by']}")
    output.table(
        [by.value.upper(), "GPU HOURS", "CPU SLOT HOURS", "TOKENS", "RUNS", "ATTEMPTS"],
        (
            [
                row["key"],
                f"{row['gpu_seconds'] / 3600:.2f}",
                f"{row['cpu_slot_seconds'] / 3600:.2f}",
                f"{row['tokens']:,}",
                row["runs"],
                row["attempts"],
            ]
            for row in report["data"]
        ),
    )


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f}"
