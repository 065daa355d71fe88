"""`rlplane sweep FILE` and `rlplane sweeps ...`: searches over a run spec's fields, each trial a run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from cli import output
from cli.context import EXIT_CANCELLED, EXIT_RUN_FAILED, JsonFlag, handled, state

app = typer.Typer(help="List sweeps and act on them (start one with `rlplane sweep sweep.yaml`).", no_args_is_help=True)

SweepArg = Annotated[int, typer.Argument(help="Sweep id", min=1, metavar="SWEEP_ID")]
ENDED = {"succeeded": 0, "failed": EXIT_RUN_FAILED, "cancelled": EXIT_CANCELLED}


def _value(value: float | str | None) -> str:
    return "-" if value is None else (f"{value:.6g}" if isinstance(value, float) else str(value))


def _params(params: dict) -> str:
    return " ".join(f"{k}={_value(v)}" for k, v in params.items())


@handled
def sweep(
    ctx: typer.Context,
    sweep_file: Annotated[Path, typer.Argument(metavar="SWEEP", help="A sweep (.yaml or .json): spec, space, metric, ...")],
    wait: Annotated[
        bool, typer.Option("--wait", help="Show trials as they end; exit 0 succeeded, 1 failed, 2 cancelled")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Start a sweep: trials of a run spec over a search space (grid, random, TPE), scored on a metric, weak ones
    stopped early; prints the sweep id.

    \b
    Example:
      rlplane sweep examples/sweeps/sft-lr.yaml --wait
    """
    from cli.commands.runs import _invalid
    from rlplane.client import ApiError
    from rlplane.spec import SpecError, read_spec_file
    from rlplane.sweep import load_sweep

    try:
        data = read_spec_file(sweep_file)
        load_sweep(data)
    except SpecError as exc:
        raise _invalid(exc.errors) from None
    client = state(ctx).client()
    text = sweep_file.read_text() if sweep_file.suffix.lower() != ".json" else None
    try:
        created = client.submit_sweep(text if text is not None else data)
    except ApiError as exc:
        if exc.status == 422 and exc.field_errors:
            raise _invalid(exc.detail) from None
        raise
    output.say(
        f"started sweep {created['id']} ({created['name']}, {created['budget']} trials): {client.url}/sweeps/{created['id']}"
    )
    if not wait:
        output.print_json(created) if as_json else typer.echo(created["id"])
        return
    if not as_json:
        typer.echo(created["id"])
    said: dict[int, str] = {}
    current = created
    while True:
        for t in current["trial_list"]:
            if said.get(t["number"]) != t["state"]:
                said[t["number"]] = t["state"]
                why = f" ({t['reason']})" if t["reason"] else ""
                output.say(
                    f"trial {t['number']} {t['state']} {_params(t['params'])} {current['metric']}={_value(t['value'])}{why}"
                )
        if current["status"] != "running":
            break
        time.sleep(2)
        current = client.sweep(created["id"])
    output.say(f"sweep {current['id']} {current['status']}" + (f": {current['reason']}" if current["reason"] else ""))
    if as_json:
        output.print_json(current)
    raise typer.Exit(ENDED[current["status"]])


@app.command("list")
@handled
def list_sweeps(
    ctx: typer.Context,
    project: Annotated[str | None, typer.Option(help="Only this project")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    as_json: JsonFlag = False,
) -> None:
    """Sweeps, newest first: method, metric, trials started of the budget, the best value so far."""
    page = state(ctx).client().sweeps(project=project, limit=limit)
    if as_json:
        return output.print_json(page)
    output.table(
        ["ID", "NAME", "PROJECT", "STATUS", "METHOD", "METRIC", "TRIALS", "BEST"],
        (
            [
                s["id"],
                s["name"],
                s["project"],
                s["status"],
                s["method"],
                f"{s['metric']} ({s['goal']})",
                f"{s['trials']}/{s['budget']}",
                _value(s["best_value"]),
            ]
            for s in page["items"]
        ),
    )


@app.command("show")
@handled
def show(ctx: typer.Context, sweep_id: SweepArg, as_json: JsonFlag = False) -> None:
    """A sweep's trials: their values, runs, states, scores and why a trial was stopped early."""
    current = state(ctx).client().sweep(sweep_id)
    if as_json:
        return output.print_json(current)
    output.say(
        f"sweep {current['id']} {current['name']}: {current['status']}" + (f" ({current['reason']})" if current["reason"] else "")
    )
    output.table(
        ["TRIAL", "STATE", "RUN", current["metric"].upper(), "PARAMS", "REASON"],
        (
            [t["number"], t["state"], t["run_id"] or "-", _value(t["value"]), _params(t["params"]), t["reason"] or ""]
            for t in current["trial_list"]
        ),
    )


@app.command("cancel")
@handled
def cancel(ctx: typer.Context, sweep_id: SweepArg) -> None:
    """Cancel a sweep: its running trials' runs are cancelled and no new trial starts."""
    current = state(ctx).client().cancel_sweep(sweep_id)
    output.say(f"sweep {current['id']} {current['status']}")
