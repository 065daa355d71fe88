"""`rlplane datasets ...`: upload training data once, use it from any spec as `dataset:<id>`."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from cli import output
from cli.context import JsonFlag, fail, handled, state

app = typer.Typer(help="Upload and inspect datasets.", no_args_is_help=True)


class Kind(StrEnum):
    sft = "sft"
    preference = "preference"
    prompts = "prompts"


@app.command()
@handled
def upload(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A .jsonl, .json (one array of rows) or .parquet file")],
    kind: Annotated[Kind, typer.Option(help="sft: prompt/completion rows; preference: prompt/chosen/rejected; prompts")],
    project: Annotated[str | None, typer.Option(help="Project (default: default)")] = None,
    name: Annotated[str | None, typer.Option(help="Display name (default: the file name)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Upload a dataset; the server checks every row and answers with the source to put in a spec.

    \b
    Example:
      rlplane datasets upload prefs.jsonl --kind preference --project nlp
    """
    if not file.is_file():
        raise fail(f"{file}: no such file", 2)
    dataset = state(ctx).client().upload_dataset(file, kind.value, project, name)
    if as_json:
        return output.print_json(dataset)
    typer.echo(dataset["source"])
    output.say(f"dataset {dataset['id']} ({dataset['name']}): {dataset['rows']} rows; use it as data.source: {dataset['source']}")


@app.command("list")
@handled
def list_datasets(
    ctx: typer.Context,
    project: Annotated[str | None, typer.Option(help="Only this project")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List datasets.

    \b
    Example:
      rlplane datasets list --project nlp
    """
    page = state(ctx).client().datasets(project=project)
    if as_json:
        return output.print_json(page)
    output.table(
        ["ID", "NAME", "PROJECT", "KIND", "ROWS", "SIZE", "SOURCE", "CREATED"],
        (
            [
                d["id"],
                d["name"],
                d["project"],
                d["kind"],
                d["rows"],
                output.size(d["size"]),
                d["source"],
                output.when(d["created_at"]),
            ]
            for d in page["data"]
        ),
    )


@app.command()
@handled
def show(ctx: typer.Context, dataset_id: Annotated[int, typer.Argument(min=1)], as_json: JsonFlag = False) -> None:
    """Show a dataset and its first rows.

    \b
    Example:
      rlplane datasets show 3
    """
    client = state(ctx).client()
    dataset = client.dataset(dataset_id)
    preview = client.dataset_preview(dataset_id)
    if as_json:
        return output.print_json({**dataset, "preview": preview["rows"]})
    output.fields(
        [
            ("dataset", f"{dataset['id']} {dataset['name']}"),
            ("project", dataset["project"]),
            ("kind", dataset["kind"]),
            ("rows", dataset["rows"]),
            ("size", output.size(dataset["size"])),
            ("columns", ", ".join(dataset["columns"])),
            ("sha256", dataset["sha256"]),
            ("source", dataset["source"]),
        ]
    )
    if preview["rows"]:
        columns = dataset["columns"]
        output.table([c.upper() for c in columns], ([row.get(c) for c in columns] for row in preview["rows"]))
