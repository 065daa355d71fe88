"""Waiting for a run: a progress bar (or plain lines in CI logs), optional log streaming, exit codes."""

from __future__ import annotations

import time
from collections.abc import Iterator

from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from cli import output
from cli.context import EXIT_CANCELLED, EXIT_RUN_FAILED
from rlplane.client import TERMINAL, Client

HEADLINE_KEYS = ("reward/mean", "train/loss", "eval/loss")
PLAIN_EVERY_S = 15.0


def exit_code(run: dict) -> int:
    return {"succeeded": 0, "cancelled": EXIT_CANCELLED}.get(run["status"], EXIT_RUN_FAILED)


def headline(client: Client, run_id: int) -> str:
    """The latest reward (for RL runs) or loss, e.g. 'train/loss 0.412'."""
    keys = {k["key"]: k for k in client.metric_keys(run_id)["data"]}
    for key in HEADLINE_KEYS:
        if key in keys:
            return f"{key} {output.number(keys[key]['last_value'])}"
    return ""


def log_text(line: dict) -> str:
    """A stored log line as printed: the local time it was printed at, and for ranks other than 0 which rank."""
    when = time.strftime("%H:%M:%S", time.localtime(line["time"])) + " " if line.get("time") else ""
    return when + (f"[rank {line['rank']}] " if line["rank"] else "") + line["text"]


def log_lines(client: Client, run_id: int, offset: int, **filters: object) -> Iterator[tuple[int, dict]]:
    """(next offset, line) for every log line after `offset`, page by page."""
    while True:
        page = client.logs(run_id, offset=offset, limit=1000, **filters)
        for line in page["data"]:
            yield page["next_offset"], line
        if len(page["data"]) < 1000:
            return
        offset = page["next_offset"]


def wait_for(client: Client, run: dict, *, logs: bool, poll_s: float = 1.0) -> dict:
    """Follow the run until it ends; returns its final detail. Progress goes to stderr, logs to stdout."""
    if logs or not output.stderr.is_terminal:
        return _plain(client, run, logs, poll_s)
    return _bar(client, run, poll_s)


def _final_line(run: dict) -> None:
    colour = {"succeeded": "green", "cancelled": "yellow"}.get(run["status"], "red")
    reason = f" ({run['status_reason']})" if run["status_reason"] else ""
    step = f"{run['last_step'] or 0}/{run['total_steps']}"
    output.stderr.print(f"run {run['id']} [bold {colour}]{run['status']}[/] at step {step}{escape(reason)}", highlight=False)


def _doing(run: dict) -> str:
    """Its status, and while it runs what its trainer says it does (a cold DeepSpeed node builds its ops for
    minutes at step 0; a resumed run starts at its checkpoint's step)."""
    reason = run.get("status_reason") or ""
    if run["status"] != "running" or not reason:
        return run["status"]
    return f"{run['status']} ({reason if len(reason) <= 90 else reason[:87] + '...'})"


def _bar(client: Client, run: dict, poll_s: float) -> dict:
    columns = (
        TextColumn("run {task.fields[run]} {task.fields[status]}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f}"),
        TextColumn("{task.fields[metric]}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=output.stderr, transient=False) as progress:
        task = progress.add_task("run", total=run["total_steps"], run=run["id"], status=run["status"], metric="")
        while True:
            run = client.run(run["id"])
            progress.update(task, completed=run["last_step"] or 0, status=_doing(run), metric=headline(client, run["id"]))
            if run["status"] in TERMINAL:
                break
            time.sleep(poll_s)
    _final_line(run)
    return run


def print_logs(client: Client, run_id: int, offset: int, *, as_json: bool = False, **filters: object) -> int:
    """Print every line after `offset` to stdout (as JSON objects, one a line, with as_json); the new offset."""
    for next_offset, line in log_lines(client, run_id, offset, **filters):
        print_line(line, as_json)
        offset = next_offset
    return offset


def print_line(line: dict, as_json: bool = False) -> None:
    if as_json:  # one object per line, so a follower can be piped into jq
        output.print_compact(line)
    else:
        output.stdout.out(log_text(line), highlight=False)


def _plain(client: Client, run: dict, logs: bool, poll_s: float) -> dict:
    offset, said, said_status, said_at = 0, "", "", 0.0
    while True:
        run = client.run(run["id"])
        if logs:  # read after the status, so that the lines of a run seen ended are all printed
            offset = print_logs(client, run["id"], offset)
        if run["status"] in TERMINAL:
            _final_line(run)
            return run
        line = f"run {run['id']} {_doing(run)} step {run['last_step'] or 0}/{run['total_steps']} {headline(client, run['id'])}"
        if run["status"] != said_status or (line != said and time.monotonic() - said_at >= PLAIN_EVERY_S):
            output.say(line.rstrip())
            said, said_status, said_at = line, run["status"], time.monotonic()
        time.sleep(poll_s)
