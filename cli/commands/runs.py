"""`rlplane submit` and `rlplane runs ...`: create runs, list them, act on them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from cli import output
from cli.commands import pipelines
from cli.context import EXIT_INVALID_SPEC, JsonFlag, RunArg, handled, state
from cli.follow import exit_code, wait_for
from cli.submission import Submission, prepare, with_value
from rlplane.client import ApiError, Client
from rlplane.spec.algorithms import ALGORITHMS
from rlplane.spec.sections import PRIORITIES

app = typer.Typer(help="List runs and act on them.", no_args_is_help=True)

Sets = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY=VALUE", help="Override a spec field, e.g. train.lr=3e-5 (repeatable; values are YAML)"),
]
Name = Annotated[str | None, typer.Option("--name", help="Run name (overrides the spec's name)")]
Wait = Annotated[bool, typer.Option("--wait", help="Show progress until the run ends; exit 0 succeeded, 1 failed, 2 cancelled")]
Follow = Annotated[bool, typer.Option("--follow", "-f", help="Like --wait, and stream the run's logs")]


def validated(text: str | None, data: dict, sets: list[str] | None, name: str | None) -> Submission:
    """Apply overrides and validate locally, so a bad spec is explained before anything is sent."""
    from rlplane.spec import SpecError

    try:
        return prepare(text, data, sets, name)
    except SpecError as exc:
        raise _invalid(exc.errors) from None


def _invalid(errors: list[dict]) -> typer.Exit:
    from rlplane.spec.base import format_loc

    output.stderr.print(
        f"[bold red]invalid spec[/] ({len(errors)} problem{'s' if len(errors) != 1 else ''}); nothing was submitted:"
    )
    for err in errors:
        loc = [p for p in err.get("loc", []) if p != "body"]
        where, why = escape(format_loc(loc) or "(spec)"), escape(str(err.get("msg", "")))
        output.stderr.print(f"  [bold]{where}[/]: {why}", highlight=False)
    return typer.Exit(EXIT_INVALID_SPEC)


def _print_warnings(warnings: list[dict]) -> None:
    """What the server accepted but thinks a mistake (train.lr >= 1, ...): said on stderr, the run stands."""
    from rlplane.spec.base import format_loc

    for warning in warnings:
        where, why = escape(format_loc(warning["loc"])), escape(warning["msg"])
        output.stderr.print(f"[bold yellow]warning[/] [bold]{where}[/]: {why}", highlight=False)


def _upload_local_data(client: Client, submission: Submission) -> Submission:
    """A data.source that is a file relative to here (which no worker can read) is uploaded and named
    dataset:<id> in what is sent, as W&B artifacts and ClearML do; an absolute path is sent as it is (workers
    may share that file system)."""
    # the contract's tables, not trainer_core's: the base install (no extras) has no pyarrow, no torch
    from rlplane.spec.algorithms import ALGORITHM_ROWS
    from rlplane.spec.base import DATA_FILE_SUFFIXES

    spec = submission.data
    source = (spec.get("data") or {}).get("source") or ""
    kind = ALGORITHM_ROWS.get(spec.get("algorithm"))
    if kind is None or not source.lower().endswith(DATA_FILE_SUFFIXES) or source.startswith("/"):
        return submission  # the API says what is wrong with a data file of an algorithm that reads none
    path = Path(source).expanduser()
    if not path.is_file():
        raise _invalid([{"loc": ["data", "source"], "msg": f"{source!r}: no such file here ({path.absolute()})"}])
    try:
        dataset = client.upload_dataset(path, kind, project=spec.get("project"), name=path.name)
    except ApiError as exc:
        if exc.status == 422 and isinstance(exc.detail, list):
            raise _invalid([{"loc": ["data", "source"], "msg": f"{source}: {err.get('msg')}"} for err in exc.detail]) from None
        raise
    output.say(f"uploaded {source} ({dataset['rows']} rows) as {dataset['source']}")
    return with_value(submission, "data.source", dataset["source"])


def _upload_code(client: Client, submission: Submission, directory: Path) -> Submission:
    """Pack and upload `directory` as the command run's code; the spec names the snapshot, its git commit and diff."""
    from cli.code import CodeError, pack

    if submission.data.get("algorithm") != "command":
        raise _invalid([{"loc": ["algorithm"], "msg": "--code sends a command run's code; this spec is not algorithm command"}])
    try:
        packed = pack(directory)
    except CodeError as exc:
        raise _invalid([{"loc": ["command", "code"], "msg": str(exc)}]) from None
    try:
        stored = client.upload_code(packed.archive, submission.data.get("project"))
    finally:
        packed.archive.unlink(missing_ok=True)
    code: dict[str, Any] = {"snapshot": stored["snapshot"], "files": stored["files"], "size": stored["size"]}
    if packed.git is not None:
        code |= {"git_commit": packed.git["commit"], "git_dirty": packed.git["dirty"]}
        if packed.git["diff"]:
            code["git_diff"] = packed.git["diff"]
    dirty = " (uncommitted changes included)" if packed.git and packed.git["dirty"] else ""
    commit = f" at {packed.git['commit'][:12]}{dirty}" if packed.git else ""
    output.say(f"uploaded {packed.files} files of {directory}{commit} as code snapshot {stored['snapshot'][:12]}")
    return with_value(submission, "command.code", code)


def send(ctx: typer.Context, submission: Submission, code: Path | None = None) -> tuple[Client, dict]:
    """Submit (a local data file, and the command's code, uploaded first); say where the run is and what the server
    warned of."""
    client = state(ctx).client()
    try:
        if code is not None:
            submission = _upload_code(client, submission, code)
        submission = _upload_local_data(client, submission)
        run = client.submit(submission.body)
    except ApiError as exc:
        if exc.status == 422 and exc.field_errors:
            raise _invalid(exc.detail) from None
        raise
    output.say(f"submitted run {run['id']} ({run['name']}) to queue {run['queue']}: {client.url}/runs/{run['id']}")
    _print_warnings(run.get("warnings", []))
    return client, run


def _submit(
    ctx: typer.Context, submission: Submission, wait: bool, follow: bool, as_json: bool, code: Path | None = None
) -> None:
    client, run = send(ctx, submission, code)
    if not (wait or follow):
        output.print_json(run) if as_json else typer.echo(run["id"])
        return
    if not as_json:
        typer.echo(run["id"])
    final = wait_for(client, run, logs=follow)
    if as_json:
        output.print_json(final)
    raise typer.Exit(exit_code(final))


@handled
def submit(
    ctx: typer.Context,
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC", help="Run spec or pipeline (.yaml or .json)")],
    sets: Sets = None,
    name: Name = None,
    wait: Wait = False,
    follow: Follow = False,
    as_json: JsonFlag = False,
    code: Annotated[
        Path | None,
        typer.Option(
            "--code",
            metavar="DIR",
            help="A command run's code: DIR is packed (what git would commit, .gitignore respected), uploaded, and the "
            "command runs in it on the worker; its git commit and uncommitted diff are recorded",
        ),
    ] = None,
) -> None:
    """Submit a run spec, or a pipeline (a document with stages); prints its id on stdout (messages go to stderr).

    The spec is validated here first: a bad one is listed field by field and nothing is sent
    (exit 3). With --wait the command ends with the run: exit 0 if it succeeded, 1 if it failed,
    2 if it was cancelled, so a CI job can gate on it.

    \b
    Examples:
      rlplane submit examples/sft.yaml
      rlplane submit examples/sft.yaml --set train.steps=200 --set train.lr=1e-4 --name sft-long --wait
      RUN=$(rlplane submit examples/dpo.yaml --set model.path=run:12) && rlplane logs $RUN -f
      rlplane submit examples/pipelines/sft-grpo.yaml --wait      # a pipeline: exit 0 when every stage succeeded
      rlplane submit examples/trl/sft.yaml --code examples/trl --wait   # your own script (algorithm: command)
    """
    from rlplane.pipeline import is_pipeline
    from rlplane.spec import SpecError, read_spec_file

    try:
        data = read_spec_file(spec_file)
    except SpecError as exc:
        raise _invalid(exc.errors) from None
    text = spec_file.read_text() if spec_file.suffix.lower() != ".json" else None  # YAML: sent as written
    if is_pipeline(data):
        if sets or name or follow or code:
            raise _invalid(
                [{"loc": [], "msg": "--set, --name, --follow and --code apply to a run spec; this is a pipeline (it has stages)"}]
            )
        return pipelines.submit(ctx, data, text, wait, as_json)
    _submit(ctx, validated(text, data, sets, name), wait, follow, as_json, code)


def _step(run: dict) -> str:
    return f"{run['last_step'] or 0}/{run['total_steps']}"


@app.command("list")
@handled
def list_runs(
    ctx: typer.Context,
    project: Annotated[str | None, typer.Option(help="Only this project")] = None,
    status: Annotated[list[str] | None, typer.Option(help="queued, running, succeeded, ... (repeatable)")] = None,
    algorithm: Annotated[list[str] | None, typer.Option(help=f"{', '.join(ALGORITHMS)} (repeat it)")] = None,
    search: Annotated[str | None, typer.Option("--search", "-q", help="Substring of the run name")] = None,
    archived: Annotated[bool, typer.Option("--archived", help="Show archived runs instead")] = False,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List runs, newest first.

    \b
    Example:
      rlplane runs list --project nlp --status running --status queued
    """
    page = (
        state(ctx)
        .client()
        .runs(project=project, status=status or [], algorithm=algorithm or [], q=search, archived=archived, limit=limit)
    )
    if as_json:
        return output.print_json(page)
    output.table(
        ["ID", "NAME", "PROJECT", "ALGO", "STATUS", "STEP", "QUEUE", "PRI", "CREATED", "DURATION"],
        (
            [
                r["id"],
                r["name"],
                r["project"],
                r["algorithm"],
                r["status"],
                _step(r),
                r["queue"],
                r.get("priority"),
                output.ago(r["created_at"]),
                output.duration(r["started_at"], r["ended_at"]),
            ]
            for r in page["data"]
        ),
    )
    if page["count"] > len(page["data"]):
        output.say(f"{len(page['data'])} of {page['count']} runs; use --limit or filters to see others")


def _priority(priority: int | None) -> str | None:
    """75 -> "75 (high)", as the spec may name it."""
    names = {value: name for name, value in PRIORITIES.items()}
    return None if priority is None else f"{priority} ({names[priority]})" if priority in names else str(priority)


def _links(links: list[dict]) -> str:
    return ", ".join(f"{link['run_id']} {link['name']} ({link['algorithm']}, {link['field']})" for link in links)


@app.command()
@handled
def show(ctx: typer.Context, run_id: RunArg, as_json: JsonFlag = False) -> None:
    """Show one run: status, progress, lineage, attempts and output.

    \b
    Example:
      rlplane runs show 12 --json | jq .spec
    """
    run = state(ctx).client().run(run_id)
    if as_json:
        return output.print_json(run)
    print_run(run)


def print_run(run: dict) -> None:
    out = run.get("output") or {}
    output.fields(
        [
            ("run", f"{run['id']} {run['name']}"),
            ("project", run["project"]),
            ("algorithm", f"{run['algorithm']} on {run['backend']}, queue {run['queue']}"),
            ("priority", _priority(run.get("priority"))),
            ("status", run["status"] + (f" - {run['status_reason']}" if run["status_reason"] else "")),
            ("preempted by", f"run {run['preempted_by']} (handing back)" if run.get("preempted_by") else None),
            ("step", _step(run)),
            ("created", f"{output.when(run['created_at'])} by {run['created_by'] or '?'}"),
            ("duration", output.duration(run["started_at"], run["ended_at"])),
            ("archived", "yes" if run["archived"] else None),
            ("parents", _links(run["parents"])),
            ("children", _links(run["children"])),
            ("latest checkpoint", run["latest_checkpoint_step"]),
            ("output", f"{out['path']} (step {out['step']}, {output.size(out['size'])})" if out else None),
        ]
    )
    if run["attempts"]:
        output.table(
            ["ATTEMPT", "WORKER", "STARTED", "ENDED", "END REASON", "LAST STEP", "TOKENS"],
            (
                [
                    a["number"],
                    a["worker"],
                    output.when(a["started_at"]),
                    output.when(a["ended_at"]),
                    a["end_reason"],
                    a["last_step"],
                    None if a.get("tokens") is None else f"{a['tokens']:,}",
                ]
                for a in run["attempts"]
            ),
        )
    nodes = [(a["number"], n) for a in run["attempts"] for n in a.get("nodes") or []]
    if nodes:  # a multi-node run: each attempt's gang
        output.table(
            ["ATTEMPT", "NODE", "ROLE", "WORKER", "ADDRESS", "STATE", "END REASON"],
            (
                [
                    number,
                    n["node_rank"],
                    n.get("role", "trainer"),
                    n["worker"],
                    f"{n['address']}:{n['port']}" if n["port"] else n["address"],
                    n["state"],
                    n["end_reason"],
                ]
                for number, n in nodes
            ),
        )
    _slurm_jobs(run)


def _slurm_jobs(run: dict) -> None:
    """A run on a queue bound to Slurm: its jobs, each attempt's."""
    jobs = run.get("slurm_jobs") or []
    if jobs:
        output.table(
            ["SLURM JOB", "STATE", "REASON", "NODES", "SUBMITTED", "OUTPUT"],
            (
                [j["job_id"], j["state"], j["reason"] or "", j["node_list"] or "", output.when(j["submitted_at"]), j["output"]]
                for j in jobs
            ),
        )


def _act(ctx: typer.Context, run_id: int, action: str, as_json: bool) -> dict:
    run = state(ctx).client().action(run_id, action)
    if as_json:
        output.print_json(run)
    else:
        output.say(f"run {run['id']} ({run['name']}) is now {run['status']}" + (" and archived" if run["archived"] else ""))
    return run


@app.command()
@handled
def cancel(ctx: typer.Context, run_id: RunArg, as_json: JsonFlag = False) -> None:
    """Cancel a run: a queued one ends at once, a running one within seconds (its logs and metrics stay).

    \b
    Example:
      rlplane runs cancel 12
    """
    _act(ctx, run_id, "cancel", as_json)


@app.command()
@handled
def resume(ctx: typer.Context, run_id: RunArg, wait: Wait = False, as_json: JsonFlag = False) -> None:
    """Requeue a failed or cancelled run; it continues from its latest checkpoint.

    \b
    Example:
      rlplane runs resume 12 --wait
    """
    run = _act(ctx, run_id, "resume", as_json and not wait)
    if wait:
        final = wait_for(state(ctx).client(), run, logs=False)
        if as_json:
            output.print_json(final)
        raise typer.Exit(exit_code(final))


@app.command()
@handled
def archive(
    ctx: typer.Context,
    run_id: RunArg,
    undo: Annotated[bool, typer.Option("--undo", help="Unarchive instead")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Hide an ended run from default listings (--undo shows it again).

    \b
    Example:
      rlplane runs archive 12
    """
    _act(ctx, run_id, "unarchive" if undo else "archive", as_json)


@app.command()
@handled
def clone(
    ctx: typer.Context,
    run_id: RunArg,
    sets: Sets = None,
    name: Name = None,
    wait: Wait = False,
    follow: Follow = False,
    as_json: JsonFlag = False,
) -> None:
    """Submit a new run with the spec of an existing one as it was submitted (comments kept), changed by --set;
    named <name>-clone unless --name says otherwise.

    \b
    Example:
      rlplane runs clone 12 --set train.lr=1e-4 --name sft-lower-lr --wait
    """
    from rlplane.spec.io import read_document

    client: Client = state(ctx).client()
    source = client.run(run_id)
    text = source.get("spec_text")
    data: dict[str, Any] = read_document(text) if text else source["spec"]
    _submit(ctx, validated(text, data, sets, name or f"{data.get('name', source['name'])}-clone"), wait, follow, as_json)


@app.command()
@handled
def lineage(ctx: typer.Context, run_id: RunArg, as_json: JsonFlag = False) -> None:
    """Show which runs this run was built from (parents) and which were built from it (children).

    \b
    Example:
      rlplane runs lineage 14
    """
    client = state(ctx).client()
    links = client.lineage(run_id)
    if as_json:
        return output.print_json(links)
    run = client.run(run_id)
    rows = [["parent", p["run_id"], p["name"], p["algorithm"], p["status"], p["field"], p["step"]] for p in links["parents"]]
    rows.append(["this", run["id"], run["name"], run["algorithm"], run["status"], "", ""])
    rows += [["child", c["run_id"], c["name"], c["algorithm"], c["status"], c["field"], c["step"]] for c in links["children"]]
    output.table(["", "ID", "NAME", "ALGO", "STATUS", "VIA", "AT STEP"], rows)
