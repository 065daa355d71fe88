"""Start the API: migrate, bootstrap the admin on first start, then serve with uvicorn."""

import gc
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import uvicorn
from pydantic import ValidationError
from sqlalchemy.exc import OperationalError

from api.auth.bootstrap import announce, bootstrap_admin, local_worker_token
from api.db import make_engine, make_sessionmaker
from api.logging_setup import uvicorn_log_config
from api.migrate import upgrade_to_head
from api.settings import Settings
from rlplane.config import local_server, local_url
from rlplane.env_settings import settings_problems
from rlplane.processes import signal_on_parent_death


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
        raise StartupError(f"invalid configuration: {settings_problems(exc)}") from None


def prepare_or_explain(settings: Settings) -> None:
    try:
        prepare(settings)
    except OperationalError as exc:
        raise StartupError(
            f"cannot reach the database at {_redacted(settings.resolved_database_url)}: {str(exc.orig).strip().splitlines()[0]}. "
            "Check RLPLANE_DATABASE_URL and that the server is running."
        ) from None


def serve(host: str, port: int, workers: int, log_level: str) -> None:
    settings = load_settings()
    prepare_or_explain(settings)
    _announce(settings, host, port)
    settle_the_heap()
    uvicorn.run(**_uvicorn_options(host, port, workers, log_level))


def settle_the_heap() -> None:
    """Import the API, then move every object alive (modules, classes, schemas, mappers: what lives as long as the
    process) out of the garbage collector's sight (gc.freeze), and collect the young generation less often. A full
    collection otherwise walked them all, and with hundreds of open streams it paused every request for 200-350 ms
    (bench/sse_load.py's storm); cyclic garbage is still collected, in larger, rarer passes."""
    import api.app  # noqa: F401  (imported for what it leaves alive)

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def _announce(settings: Settings, host: str, port: int) -> None:
    print(
        f"rlplane API on http://{host}:{port} (docs: /api/docs), database: {_redacted(settings.resolved_database_url)}",
        file=sys.stderr,
        flush=True,
    )


def _uvicorn_options(host: str, port: int, workers: int, log_level: str) -> dict:
    return {
        "app": "api.app:create_app",
        "factory": True,
        "host": host,
        "port": port,
        "workers": workers,
        "log_level": log_level,
        "proxy_headers": False,
        "timeout_graceful_shutdown": 10,
        "log_config": uvicorn_log_config(),
    }


def _redacted(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return scheme + sep + rest


class _Stopped(Exception):
    """SIGTERM or SIGHUP reached `rlplane up`: stop as Ctrl-C does."""


def _stop(signum: int, _frame: object) -> None:
    raise _Stopped(signal.Signals(signum).name)


class _HandingBack(uvicorn.Server):
    """The API of `rlplane up`, which stops only after its workers have handed their runs back: the first Ctrl-C,
    SIGTERM or SIGHUP shuts the workers down warmly (SIGTERM: each trainer checkpoints after its current step, and the
    run is requeued, not counted as a failed attempt) while the API still takes their last reports, then stops the
    API. A second signal stops the workers at once (their runs are found lost by the next start)."""

    def __init__(self, config: uvicorn.Config, workers: list[subprocess.Popen], grace_s: float) -> None:
        super().__init__(config)
        self.workers, self.grace_s = workers, grace_s
        self.signalled: str | None = None

    def handle_exit(self, sig: int, frame: object) -> None:
        name = signal.Signals(sig).name
        if self.signalled is None and any(w.poll() is None for w in self.workers):
            self.signalled = name
            print(
                f"rlplane: {name}: stopping (the workers hand their runs back first, up to {self.grace_s:g} s; "
                "again to stop at once)",
                file=sys.stderr,
                flush=True,
            )
            threading.Thread(target=self._hand_back_then_exit, name="rlplane-hand-back", daemon=True).start()
            return
        if self.signalled is not None and not self.should_exit:
            print(f"rlplane: {name} again: stopping the workers now", file=sys.stderr, flush=True)
            for worker in self.workers:
                if worker.poll() is None:
                    worker.send_signal(signal.SIGQUIT)
        self.signalled = self.signalled or name
        super().handle_exit(sig, frame)  # type: ignore[arg-type]

    def _hand_back_then_exit(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)  # Celery's warm shutdown: the run in progress is handed back
        deadline = time.monotonic() + self.grace_s
        for worker in self.workers:
            try:
                worker.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass  # stopped cold below, after the API
        self.should_exit = True


def check_port(host: str, port: int) -> None:
    """Refuse a port something already listens on, before anything is created (an admin token, workers)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a TIME_WAIT port is free
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise StartupError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc} (another rlplane up?); choose another port with "
                "`rlplane up --port N` or `make up PORT=N`"
            ) from None


def serve_with_workers(host: str, port: int, workers: int, queues: list[str]) -> None:
    """`rlplane up`: the API in this process and `workers` worker processes beside it, stopped together, whether by
    Ctrl-C, SIGTERM (systemd, docker, CI) or SIGHUP (a closed terminal): the workers hand their runs back first
    (_HandingBack), and the next `rlplane up` resumes them."""
    from worker.settings import WorkerSettings

    settings = load_settings()
    check_port(host, port)
    prepare_or_explain(settings)
    # uvicorn stops on SIGTERM and then raises it again, once its own handler is gone: with the default action
    # the process would die there, skipping the `finally` below, and the workers (in sessions of their own)
    # would live on, heartbeating a dead API. Ours raises instead, like Ctrl-C's KeyboardInterrupt.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop)
    processes: list[subprocess.Popen] = []
    try:
        processes = _start_workers(settings, host, port, workers, queues)
        # how long to wait for the workers to hand their runs back: the trainer's grace, and time to report and exit
        hand_back_s = WorkerSettings().hand_back_grace_s + 30.0
        server = _HandingBack(uvicorn.Config(**_uvicorn_options(host, port, 1, "info")), processes, hand_back_s)
        signal.signal(signal.SIGHUP, server.handle_exit)  # uvicorn captures SIGINT and SIGTERM itself
        with local_server(settings.home, host, port):
            _announce(settings, host, port)
            settle_the_heap()
            try:
                server.run()
            except KeyboardInterrupt:  # uvicorn raises Ctrl-C again once it has stopped (uvicorn.run swallows it too)
                pass
    except _Stopped as stopped:
        print(f"rlplane: {stopped}: stopped", file=sys.stderr, flush=True)
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
    api = local_url(host, port)
    env = {**os.environ, "RLPLANE_HOME": str(settings.home), "RLPLANE_ARTIFACTS": settings.resolved_artifacts}
    # The token goes in the environment, which only this user can read (/proc/PID/environ), never on the
    # command line, which `ps` shows to every local user.
    env["RLPLANE_BROKER_URL"], env["RLPLANE_TOKEN"] = settings.resolved_broker_url, token
    # One machine: a multi-node run's nodes (these workers) meet on loopback, where nothing else can reach them.
    env.setdefault("RLPLANE_ADVERTISE_ADDRESS", "127.0.0.1")
    if sys.platform == "linux":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    processes = []
    for i in range(1, count + 1):
        command = [sys.executable, "-m", "cli.main", "worker", "--queues", ",".join(queues), "--api", api]
        log = (settings.home / f"worker-{i}.log").open("a")
        command += ["--name", f"local-{i}"]
        processes.append(
            subprocess.Popen(
                command,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=signal_on_parent_death(signal.SIGQUIT),  # killed outright: a cold shutdown
            )
        )
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
