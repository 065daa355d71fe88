"""Start the API: migrate, bootstrap the admin on first start, then serve with uvicorn."""

import os
import signal
import subprocess
import sys
import time

import uvicorn
from pydantic import ValidationError
from sqlalchemy.exc import OperationalError

from api.auth.bootstrap import announce, bootstrap_admin, local_worker_token
from api.db import make_engine, make_sessionmaker
from api.migrate import upgrade_to_head
from api.settings import Settings


def prepare(settings: Settings) -> None:
    settings.home.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.resolved_database_url)
    try:
        upgrade_to_head(engine)
        with make_sessionmaker(engine)() as session:
            secret = bootstrap_admin(session, settings.home, settings.bootstrap_token)
    finally:
        engine.dispose()
    token_file = settings.home / "admin.token"
    if secret:
        announce(secret, token_file)
    elif token_file.exists():
        print(f"rlplane: the admin token is in {token_file}", file=sys.stderr, flush=True)


class StartupError(Exception):
    """A configuration or database problem, said in one paragraph."""


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(f"RLPLANE_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        raise StartupError(f"invalid configuration: {problems}") from None


def prepare_or_explain(settings: Settings) -> None:
    try:
        prepare(settings)
    except OperationalError as exc:
        raise StartupError(
            f"cannot reach the database at {_redacted(settings.resolved_database_url)}: {str(exc.orig).strip().splitlines()[0]}. "
            "Check RLPLANE_DATABASE_URL and that the server is running."
        ) from None


def serve(host: str, port: int, workers: int, log_level: str, *, prepared: bool = False) -> None:
    settings = load_settings()
    if not prepared:
        prepare_or_explain(settings)
    print(
        f"rlplane API on http://{host}:{port} (docs: /api/docs), database: {_redacted(settings.resolved_database_url)}",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        "api.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        proxy_headers=False,
        timeout_graceful_shutdown=10,
    )


def _redacted(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return scheme + sep + rest


def serve_with_workers(host: str, port: int, workers: int, queues: list[str]) -> None:
    """`rlplane up`: the API in this process and `workers` worker processes beside it, stopped together."""
    settings = load_settings()
    prepare_or_explain(settings)
    processes = _start_workers(settings, host, port, workers, queues)
    try:
        serve(host, port, 1, "info", prepared=True)
    finally:
        _stop_workers(processes)


def _start_workers(settings: Settings, host: str, port: int, count: int, queues: list[str]) -> list[subprocess.Popen]:
    if count == 0:
        return []
    engine = make_engine(settings.resolved_database_url)
    try:
        with make_sessionmaker(engine)() as session:
            token = local_worker_token(session, settings.home)
    finally:
        engine.dispose()
    api = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    env = {**os.environ, "RLPLANE_HOME": str(settings.home), "RLPLANE_ARTIFACTS": settings.resolved_artifacts}
    env["RLPLANE_BROKER_URL"] = settings.resolved_broker_url
    processes = []
    for i in range(1, count + 1):
        command = [sys.executable, "-m", "cli.main", "worker", "--queues", ",".join(queues), "--api", api, "--token", token]
        log = (settings.home / f"worker-{i}.log").open("a")
        command += ["--name", f"local-{i}"]
        processes.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    print(
        f"rlplane: {count} worker(s) on queues {','.join(queues)}; their logs are in {settings.home}/worker-*.log",
        file=sys.stderr,
        flush=True,
    )
    return processes


def _stop_workers(processes: list[subprocess.Popen]) -> None:
    """Cold shutdown (SIGQUIT): a run in progress stops at once and is resumed from its checkpoint by the
    next worker; SIGKILL whatever is left after 10 s."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGQUIT)
    deadline = time.monotonic() + 10
    for process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
