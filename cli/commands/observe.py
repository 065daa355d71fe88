"""`rlplane logs`, `rlplane metrics`, `rlplane samples`: what a run reports."""

from __future__ import annotations

import csv
import sys
import time
from typing import Annotated

import typer

from cli import output
from cli.context import JsonFlag, RunArg, handled, state
from cli.follow import print_line, print_logs
from rlplane.client import TERMINAL


@handled
def logs(
    ctx: typer.Context,
    run_id: RunArg,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until the run ends")] = False,
    rank: Annotated[int | None, typer.Option(min=0, help="Only this rank's lines")] = None,
    node: Annotated[int | None, typer.Option(min=0, help="Only the lines of this node's ranks (a multi-node run)")] = None,
    tail: Annotated[int | None, typer.Option(min=1, max=10_000, help="Start with only the last N lines")] = None,
    search: Annotated[str | None, typer.Option("--search", "-q", help="Only lines containing this (case-insensitive)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Print a run's logs (stdout and stderr of every rank, in order).

    \b
    Examples:
      rlplane logs 12 --tail 50
      rlplane logs 12 -f --rank 0
      rlplane logs 12 --node 1 --search error
    """
    client = state(ctx).client()
    filters = {"rank": rank, "node": node, "q": search}
    offset = 0
    if tail is not None:
        page = client.logs(run_id, tail=tail, **filters)
        for line in page["data"]:
            print_line(line, as_json)
        offset = page["next_offset"]
        if not follow:
            return
    while True:
        ended = not follow or client.run(run_id)["status"] in TERMINAL  # looked at first: no line is missed
        offset = print_logs(client, run_id, offset, as_json=as_json, **filters)
        if ended:
            return
        time.sleep(1.0)


@handled
def metrics(
    ctx: typer.Context,
    run_id: RunArg,
    keys: Annotated[list[str] | None, typer.Option("--key", "-k", help="Only this key (repeatable)")] = None,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print key,step,value,time rows")] = False,
    max_points: Annotated[int, typer.Option(min=2, max=20_000, help="Points per key (the API downsamples beyond)")] = 1000,
    as_json: JsonFlag = False,
) -> None:
    """Show a run's metrics: by default each key's latest value and a sparkline of its history.

    \b
    Examples:
      rlplane metrics 12
      rlplane metrics 12 --key train/loss --key eval/loss --csv > losses.csv
      rlplane metrics 12 --json | jq '.series[] | {key, last: .points[-1].value}'
    """
    client = state(ctx).client()
    if as_json or as_csv:
        series = client.metrics(run_id, keys=keys, max_points=max_points)
        if as_json:
            return output.print_json(series)
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["key", "step", "value", "time"])
        for one in series["series"]:
            writer.writerows([one["key"], p["step"], p["value"], p["time"]] for p in one["points"])
        return None
    series = client.metrics(run_id, keys=keys, max_points=64)["series"]
    summary = {k["key"]: k for k in client.metric_keys(run_id)["data"]}
    output.table(
        ["KEY", "LAST", "STEP", "POINTS", "HISTORY"],
        (
            [
                s["key"],
                output.number(summary[s["key"]]["last_value"]),
                summary[s["key"]]["last_step"],
                s["total_points"],
                output.sparkline([p["value"] for p in s["points"]]),
            ]
            for s in series
            if s["key"] in summary
        ),
    )
    if not series:
        output.say(f"run {run_id} has no metrics" + (f" for {', '.join(keys)}" if keys else " yet"))


@handled
def samples(
    ctx: typer.Context,
    run_id: RunArg,
    step: Annotated[int | None, typer.Option(min=0, help="This step (default: the latest step with samples)")] = None,
    by_reward: Annotated[bool, typer.Option("--by-reward", help="Highest reward first (look for reward hacking)")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    as_json: JsonFlag = False,
) -> None:
    """Show the samples a run logged at one step: prompt, response, reward, KL (and, for evaluation samples, what
    each response is - generation, chosen, rejected - beside the dataset's answer).

    \b
    Examples:
      rlplane samples 12
      rlplane samples 12 --step 400 --by-reward --limit 5
    """
    client = state(ctx).client()
    if step is None:
        latest = client.samples(run_id, sort="-step", limit=1)["data"]
        if not latest:
            if as_json:
                return output.print_json({"data": [], "count": 0})
            output.say(f"run {run_id} has no samples yet")
            return None
        step = latest[0]["step"]
    page = client.samples(run_id, step=step, sort="-reward" if by_reward else "step", limit=limit)
    if as_json:
        return output.print_json(page)
    # Evaluation samples (sft, reward, dpo) say what each response is and what the dataset answers.
    labelled = any(s.get("label") or s.get("reference") for s in page["data"])
    extra = ["LABEL", "REFERENCE"] if labelled else []
    output.table(
        ["STEP", "#", "PROMPT", "RESPONSE", *extra, "REWARD", "KL"],
        (
            [s["step"], s["index"], s["prompt"], s["response"]]
            + ([s.get("label") or "", s.get("reference") or ""] if labelled else [])
            + [output.number(s["reward"]), output.number(s["kl"])]
            for s in page["data"]
        ),
    )
    if page["count"] > len(page["data"]):
        output.say(f"{len(page['data'])} of {page['count']} samples at step {step}; use --limit to see more")
