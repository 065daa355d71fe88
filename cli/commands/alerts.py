"""`rlplane alerts ...`: what fired on runs, the rules that watch them, and muting."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli import output
from cli.context import JsonFlag, handled, state

app = typer.Typer(help="Alerts on runs: what fired, the rules, muting (docs/alerts.md).", no_args_is_help=True)

RuleArg = Annotated[int, typer.Argument(help="Rule id", min=1, metavar="RULE_ID")]


@app.command("list")
@handled
def list_alerts(
    ctx: typer.Context,
    run: Annotated[int | None, typer.Option("--run", min=1, help="Only this run")] = None,
    project: Annotated[str | None, typer.Option(help="Only this project")] = None,
    open_only: Annotated[bool, typer.Option("--open", help="Only alerts still open")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: JsonFlag = False,
) -> None:
    """What fired, newest first: the rule or detector, the run, why, and whether it was delivered."""
    page = state(ctx).client().alerts(run_id=run, project=project, state="open" if open_only else None, limit=limit)
    if as_json:
        return output.print_json(page)
    output.table(
        ["ID", "RUN", "NAME", "STATE", "FIRED", "DELIVERY", "MESSAGE"],
        ([a["id"], a["run_id"], a["name"], a["state"], a["fired_at"][:19], a["delivery"], a["message"]] for a in page["items"]),
    )


@app.command("rules")
@handled
def list_rules(
    ctx: typer.Context,
    project: Annotated[str | None, typer.Option(help="Only this project")] = None,
    as_json: JsonFlag = False,
) -> None:
    """The rules (webhook and notify URLs shown masked) and the built-in RL detectors."""
    client = state(ctx).client()
    rules = client.alert_rules(project)
    if as_json:
        return output.print_json(rules)
    output.table(
        ["ID", "NAME", "PROJECT", "RUN", "CONDITION", "MUTED"],
        (
            [r["id"], r["name"], r["project"], r["run_id"] or "all", r["condition"]["kind"], "yes" if r["muted"] else ""]
            for r in rules["items"]
        ),
    )
    output.say("detectors on every GRPO/PPO run unless muted: " + ", ".join(d["name"] for d in client.alert_detectors()["items"]))


@app.command("add")
@handled
def add(ctx: typer.Context, rule_file: Annotated[Path, typer.Argument(metavar="RULE", help="A rule (.yaml or .json)")]) -> None:
    """Add a rule from a file; prints its id.

    \b
    Example (rule.yaml):
      name: loss-spike
      project: default
      condition: {kind: threshold, metric: train/loss, op: ">", value: 5, window: 10}
      actions: {webhook: https://hooks.slack.com/services/..., stop_run: false}
    """
    from cli.commands.runs import _invalid
    from rlplane.spec import SpecError
    from rlplane.spec.io import read_document

    try:
        rule = read_document(rule_file.read_text(), "json" if rule_file.suffix.lower() == ".json" else "yaml")
    except (SpecError, OSError) as exc:
        errors = exc.errors if isinstance(exc, SpecError) else [{"loc": [], "msg": str(exc)}]
        raise _invalid(errors) from None
    from rlplane.client import ApiError

    try:
        created = state(ctx).client().create_alert_rule(rule)
    except ApiError as exc:
        if exc.status == 422 and exc.field_errors:
            raise _invalid(exc.detail) from None
        raise
    output.say(f"rule {created['id']} ({created['name']}) watches {created['project']}")
    typer.echo(created["id"])


@app.command("mute")
@handled
def mute(
    ctx: typer.Context,
    rule_id: RuleArg,
    undo: Annotated[bool, typer.Option("--undo", help="Unmute")] = False,
) -> None:
    """Mute a rule (a muted detector rule silences that detector for its project or run)."""
    rule = state(ctx).client().mute_alert_rule(rule_id, not undo)
    output.say(f"rule {rule['id']} ({rule['name']}) {'muted' if rule['muted'] else 'unmuted'}")
