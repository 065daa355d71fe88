"""`rlplane`: a client of the rlplane API (submit, runs, logs, ...) and the server commands (up, api, worker)."""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from cli.commands import admin, alerts, artifacts, datasets, evaluate, observe, pipelines, runs, sweeps, sync, usage
from cli.context import State

app = typer.Typer(
    help="rlplane: self-hosted control plane for LLM post-training. Client commands talk to the server "
    "named by --url, RLPLANE_URL or `rlplane login` (default http://127.0.0.1:8000, as `rlplane up` serves).",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
    pretty_exceptions_enable=False,  # --debug shows the plain traceback
)


@app.callback()
def main(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option("--url", help="Server URL (default RLPLANE_URL, the saved login, or local)")] = None,
    token: Annotated[str | None, typer.Option("--token", help="API token (default RLPLANE_TOKEN or the saved login)")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors")] = False,
) -> None:
    ctx.obj = State(url=url, token=token, debug=debug)


app.command()(runs.submit)
app.add_typer(runs.app, name="runs")
app.add_typer(pipelines.app, name="pipelines")
app.add_typer(alerts.app, name="alerts")
app.command()(sweeps.sweep)
app.command("eval")(evaluate.evaluate)
app.add_typer(sweeps.app, name="sweeps")
app.command()(observe.logs)
app.command()(observe.metrics)
app.command()(observe.samples)
app.command()(artifacts.checkpoints)
app.command()(artifacts.download)
app.add_typer(datasets.app, name="datasets")
app.command()(admin.login)
app.command()(admin.logout)
app.command()(admin.whoami)
app.add_typer(admin.tokens_app, name="tokens")
app.add_typer(admin.projects_app, name="projects")
app.add_typer(admin.users_app, name="users")
app.command()(admin.workers)
app.command()(admin.queues)
app.command()(usage.usage)
app.command()(sync.sync)

OUR_PACKAGES = frozenset({"api", "cli", "rlplane", "trainer_core", "worker", "migrations"})


@contextmanager
def needs_extra(extra: str, command: str) -> Iterator[None]:
    """A server command on an install without its extra (`pip install rlplane` is the client alone): one line naming
    the extra to install, not an import's traceback."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in OUR_PACKAGES:
            raise
        typer.echo(
            f"rlplane {command}: needs the {extra} extra, which this install lacks (no module {exc.name!r}): "
            f"pip install 'rlplane[{extra}]'",
            err=True,
        )
        raise typer.Exit(2) from None


Host = Annotated[str, typer.Option(help="Interface to bind")]
Port = Annotated[int, typer.Option(help="TCP port")]


@app.command()
def api(
    host: Host = "127.0.0.1",
    port: Port = 8000,
    workers: Annotated[int, typer.Option(help="API processes (they share the database)", min=1)] = 1,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
) -> None:
    """Serve the REST API: migrate the database to head, create the first admin if none, then serve.

    Configuration comes from RLPLANE_* variables: RLPLANE_DATABASE_URL (default SQLite under
    RLPLANE_HOME, ~/.rlplane), RLPLANE_ARTIFACTS, RLPLANE_BOOTSTRAP_TOKEN.

    \b
    Example:
      RLPLANE_DATABASE_URL=postgresql://postgres@127.0.0.1/rlplane rlplane api --port 8000
    """
    _serve(host, port, workers, log_level)


@app.command()
def up(
    host: Host = "127.0.0.1",
    port: Port = 8000,
    workers: Annotated[int, typer.Option(help="Worker processes beside the API (0: none)", min=0, max=64)] = 1,
    queues: Annotated[str, typer.Option(help="Queues the workers serve, comma-separated")] = "cpu",
) -> None:
    """Run rlplane on this machine: the API and its workers, with no services to install.

    By default the database is SQLite and the broker a SQLite file, both under RLPLANE_HOME
    (~/.rlplane), with artifacts in RLPLANE_HOME/artifacts. Set RLPLANE_DATABASE_URL and
    RLPLANE_BROKER_URL to use Postgres and Redis instead. The admin token is printed on first start
    and kept in $RLPLANE_HOME/admin.token. Ctrl-C stops everything: a run in progress is handed
    back at a checkpoint first, and resumed from it on the next start (a second Ctrl-C stops at once).

    \b
    Example:
      rlplane up --port 8000 --workers 2
    """
    with needs_extra("api,train", "up"):
        from cli.server import StartupError, serve_with_workers

    try:
        serve_with_workers(host, port, workers, [q.strip() for q in queues.split(",") if q.strip()])
    except StartupError as exc:
        typer.echo(f"rlplane: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def worker(
    queues: Annotated[str, typer.Option(help="Comma-separated queues to serve, e.g. gpu,gpu-80g")] = "cpu",
    api: Annotated[str | None, typer.Option("--api", help="API URL (default RLPLANE_API_URL or http://127.0.0.1:8000)")] = None,
    token: Annotated[str | None, typer.Option(help="A worker token (default RLPLANE_TOKEN, which `ps` does not show)")] = None,
    name: Annotated[str | None, typer.Option(help="Unique worker name (default <host>-<pid>)")] = None,
    broker: Annotated[str | None, typer.Option(help="Celery broker URL (default RLPLANE_BROKER_URL, else SQLite)")] = None,
    advertise_address: Annotated[
        str | None,
        typer.Option(
            help="Where other nodes of a multi-node run reach this one "
            "(RLPLANE_ADVERTISE_ADDRESS; default: this host's name resolved)"
        ),
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus metrics on this port (RLPLANE_METRICS_PORT; off)", min=1, max=65535)
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="Serve one attempt, then exit (a Slurm job's pilot worker; RLPLANE_ONCE)")
    ] = False,
) -> None:
    """Serve runs from the broker on this node: lease each through the API, run its trainer, report.

    A worker needs the broker, the API URL and a worker token - never the database. On SIGTERM it
    stops its trainer and hands the run back; another worker resumes it from its latest checkpoint.
    A run with resources.nodes > 1 spans that many workers of its queue (docs/workers.md): each must
    reach the others at its --advertise-address.

    \b
    Example:
      rlplane worker --queues gpu --api http://rlplane:8000 --token $WORKER_TOKEN --broker redis://redis:6379/0
    """
    from pydantic import ValidationError

    from rlplane.env_settings import settings_problems

    # Celery retitles its process when setproctitle is importable (the trainers' forkserver uses it): the worker keeps
    # the command line it was started with, by which `ps` and pgrep find it. Read as celery.platforms is imported.
    os.environ.setdefault("NOSETPS", "1")
    with needs_extra("worker", "worker"):
        from worker.app import run_worker
        from worker.client import TokenRefused, WorkerApi
        from worker.settings import WorkerSettings

    overrides = {"queues": [q.strip() for q in queues.split(",") if q.strip()], "api_url": api, "token": token, "name": name}
    overrides.update(broker_url=broker, metrics_port=metrics_port, advertise_address=advertise_address, once=once or None)
    try:
        settings = WorkerSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        typer.echo(f"rlplane worker: invalid configuration: {settings_problems(exc)}", err=True)
        raise typer.Exit(2) from None
    if not settings.token:
        typer.echo(
            "rlplane worker: no token; set RLPLANE_TOKEN (or RLPLANE_TOKEN_FILE, a file holding it) to a worker token "
            "(scope worker), or pass --token.",
            err=True,
        )
        raise typer.Exit(2)
    client = WorkerApi.connect(settings.api_url, settings.token)
    try:
        client.check_token(settings.api_wait_s)
    except TokenRefused as exc:
        typer.echo(f"rlplane worker: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        client.close()
    run_worker(settings)


@app.command()
def migrate() -> None:
    """Migrate the database to the newest schema and create the first admin if there is none, then exit.

    `rlplane api` does this on start too; run it alone before an upgrade (a Helm hook, a compose
    one-off) so that the new API processes start on a migrated database. RLPLANE_* variables as for `api`.

    \b
    Example:
      RLPLANE_DATABASE_URL=postgresql://rlplane:secret@db/rlplane rlplane migrate
    """
    with needs_extra("api", "migrate"):
        from cli.server import StartupError, load_settings, prepare_or_explain

    try:
        prepare_or_explain(load_settings())
    except StartupError as exc:
        typer.echo(f"rlplane: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo("rlplane: the database is at the newest schema", err=True)


def _serve(host: str, port: int, workers: int, log_level: str) -> None:
    with needs_extra("api", "api"):
        from cli.server import StartupError, serve

    try:
        serve(host, port, workers, log_level)
    except StartupError as exc:
        typer.echo(f"rlplane: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def train(ctx: typer.Context) -> None:
    """Train a spec on this machine: the same as `python -m trainer_core run ...` (see `rlplane train --help`).

    \b
    Example:
      rlplane train examples/sft.yaml --set train.steps=50 --out runs/sft-demo
    """
    with needs_extra("train", "train"):
        from trainer_core.cli import main as trainer_main

    raise typer.Exit(trainer_main(["run", *ctx.args]))


if __name__ == "__main__":
    app()
