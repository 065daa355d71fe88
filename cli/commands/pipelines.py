"""`rlplane pipelines ...` (and `rlplane submit` of a pipeline document): chains of runs submitted once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from cli import output
from cli.context import EXIT_CANCELLED, EXIT_RUN_FAILED, JsonFlag, handled, state

app = typer.Typer(help="List pipelines and act on them (submit one with `rlplane submit pipeline.yaml`).", no_args_is_help=True)

PipelineArg = Annotated[int, typer.Argument(help="Pipeline id", min=1, metavar="PIPELINE_ID")]
ENDED = {"succeeded": 0, "failed": EXIT_RUN_FAILED, "cancelled": EXIT_CANCELLED}


def submit(ctx: typer.Context, data: dict, text: str | None, wait: bool, as_json: bool) -> None:
    """Validate a pipeline here (every stage, references, gates, cycles), send it, and print its id."""
    from cli.commands.runs import _invalid
    from rlplane.client import ApiError
    from rlplane.pipeline import load_pipeline
    from rlplane.spec import SpecError

    try:
        load_pipeline(data)
    except SpecError as exc:
        raise _invalid(exc.errors) from None
    client = state(ctx).client()
    try:
        pipeline = client.submit_pipeline(text if text is not None else data)
    except ApiError as exc:
        if exc.status == 422 and exc.field_errors:
            raise _invalid(exc.detail) from None
        raise
    output.say(f"submitted pipeline {pipeline['id']} ({pipeline['name']}): {client.url}/pipelines/{pipeline['id']}")
    if not wait:
        output.print_json(pipeline) if as_json else typer.echo(pipeline["id"])
        return
    if not as_json:
        typer.echo(pipeline["id"])
    seen: dict[str, str] = {}
    while pipeline["status"] == "running":
        for stage in pipeline["stages"]:
            if seen.get(stage["name"]) != stage["status"]:
                seen[stage["name"]] = stage["status"]
                run = f" (run {stage['run_id']})" if stage["run_id"] else ""
                why = f": {stage['reason']}" if stage["reason"] else ""
                output.say(f"stage {stage['name']} {stage['status']}{run}{why}")
        time.sleep(2)
        pipeline = client.pipeline(pipeline["id"])
    output.say(f"pipeline {pipeline['id']} {pipeline['status']}" + (f": {pipeline['reason']}" if pipeline["reason"] else ""))
    if as_json:
        output.print_json(pipeline)
    raise typer.Exit(ENDED[pipeline["status"]])


def _stages(pipeline: dict) -> str:
    return " -> ".join(f"{s['name']}:{s['status']}" for s in pipeline["stages"])


@app.command("list")
@handled
def list_pipelines(
    ctx: typer.Context,
    project: Annotated[str | None, typer.Option(help="Only this project")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List pipelines, newest first, with each stage's status."""
    page = state(ctx).client().pipelines(project=project, limit=limit)
    if as_json:
        return output.print_json(page)
    output.table(
        ["ID", "NAME", "PROJECT", "STATUS", "STAGES", "UPDATED"],
        ([p["id"], p["name"], p["project"], p["status"], _stages(p), p["updated_at"][:19]] for p in page["items"]),
    )


def _show(pipeline: dict, as_json: bool) -> None:
    if as_json:
        return output.print_json(pipeline)
    reason = f" ({pipeline['reason']})" if pipeline["reason"] else ""
    output.say(f"pipeline {pipeline['id']} {pipeline['name']} [{pipeline['project']}]: {pipeline['status']}{reason}")
    output.table(
        ["STAGE", "STATUS", "NEEDS", "RUN", "HEADLINE", "REASON"],
        (
            [
                s["name"],
                s["status"],
                ",".join(s["needs"]) or "-",
                s["run_id"] or "-",
                f"{s['headline']['key']}={s['headline']['value']:.4g}"
                if s["headline"] and s["headline"]["value"] is not None
                else "-",
                s["reason"] or "",
            ]
            for s in pipeline["stages"]
        ),
    )


@app.command("show")
@handled
def show(ctx: typer.Context, pipeline_id: PipelineArg, as_json: JsonFlag = False) -> None:
    """A pipeline's stages: status, what each needs, its run, headline metric, and why it was skipped or failed."""
    _show(state(ctx).client().pipeline(pipeline_id), as_json)


@app.command("cancel")
@handled
def cancel(ctx: typer.Context, pipeline_id: PipelineArg, as_json: JsonFlag = False) -> None:
    """Cancel a pipeline: waiting stages at once, running stages through their runs."""
    _show(state(ctx).client().cancel_pipeline(pipeline_id), as_json)


@app.command("retry")
@handled
def retry(
    ctx: typer.Context,
    pipeline_id: PipelineArg,
    stage: Annotated[str, typer.Argument(help="The stage to run again")],
    spec: Annotated[Path | None, typer.Option("--spec", help="Replace the stage's run spec with this file first")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run a stage again (from a new spec with --spec); stages downstream that had run become stale.

    \b
    Example:
      rlplane pipelines retry 7 grpo --spec grpo-lower-lr.yaml
    """
    from cli.commands.runs import _invalid
    from rlplane.spec import SpecError, read_spec_file

    document = None
    if spec is not None:
        try:
            document = read_spec_file(spec)
        except SpecError as exc:
            raise _invalid(exc.errors) from None
    _show(state(ctx).client().retry_stage(pipeline_id, stage, document), as_json)
