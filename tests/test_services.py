"""tests/services.py on a machine without the services: told to ignore the default ports, a pytest session starts its
own Postgres and Redis, runs real database and broker tests on them, and leaves no server and no data behind, also
when it is stopped with SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.services import MODE_VARIABLE, POSTGRES_VARIABLE, REDIS_VARIABLE, WORKDIR_PREFIX, answers

ROOT = Path(__file__).resolve().parent.parent
HEADER = re.compile(r"services: postgres \S+:(\d+)/\S+ \(throwaway, pid (\d+)\); redis \S+:(\d+) \(throwaway, pid (\d+)\)")
# Postgres through the API's fixtures, and Redis as the worker stack's Celery broker (an API process and a worker)
POSTGRES_TESTS = ["tests/test_runs.py::TestStateMachine", "-k", "not sqlite"]
REDIS_TEST = "tests/test_worker_runs.py::test_a_trainer_error_fails_the_run_without_retrying"


# A session that starts the services and then waits in collection for the test's SIGTERM (no conftest: quick). It
# says when it waits: a SIGTERM that lands in pytest's own code (before the sleep) can make pytest fail to format
# the interruption (an INTERNALERROR, exit 1 instead of 2), which is pytest's affair, not the services'.
WAITING = "waiting for SIGTERM"
WAIT_FOR_SIGTERM = f"""
import sys, time, pytest
class Wait:
    def pytest_collection(self, session):
        print({WAITING!r}, flush=True)
        time.sleep(120)
sys.exit(pytest.main(["--noconftest", "-s", "tests/services.py"], plugins=[Wait()]))
"""


def test_a_session_without_the_services_starts_its_own_and_leaves_nothing() -> None:
    process = _session("-m", "pytest", "-v", *POSTGRES_TESTS, REDIS_TEST)
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0, out[-4000:]
    assert re.search(r"TestStateMachine::\S+\[postgres\] PASSED", out) and f"{REDIS_TEST} PASSED" in out, out[-4000:]
    _assert_nothing_left(process.pid, _servers(out))


def test_sigterm_stops_the_throwaway_servers() -> None:
    process = _session("-c", WAIT_FOR_SIGTERM)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if WAITING in line:
            process.send_signal(signal.SIGTERM)
            break
    out = "".join(lines) + process.communicate(timeout=60)[0]
    assert process.returncode == 2, out[-4000:]  # interrupted, as by Ctrl-C
    _assert_nothing_left(process.pid, _servers(out))


def _session(*arguments: str) -> subprocess.Popen:
    """A Python process (a pytest session) that must start its own servers: the environment names none."""
    drop = {POSTGRES_VARIABLE, REDIS_VARIABLE}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PYTEST_")}
    env.update({MODE_VARIABLE: "throwaway", "PYTHONUNBUFFERED": "1"})
    command = [sys.executable, *arguments]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _servers(out: str) -> list[tuple[int, int]]:
    """(port, pid) of the throwaway Postgres and Redis, from the session's header."""
    match = HEADER.search(out)
    assert match, out[-2000:]
    postgres_port, postgres_pid, redis_port, redis_pid = map(int, match.groups())
    assert {postgres_port, redis_port}.isdisjoint({5432, 6379})
    return [(postgres_port, postgres_pid), (redis_port, redis_pid)]


def _assert_nothing_left(session_pid: int, servers: list[tuple[int, int]]) -> None:
    for port, pid in servers:
        # each server leads a process group of its own (Postgres: the postmaster and its backends)
        assert not _group_members(pid), f"pid {pid} or its children outlived the session"
        assert not answers(port), f"something still answers on {port}"
    assert not list(Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}{session_pid}-*")), "the servers' data was left"


def _group_members(pgid: int) -> list[int]:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members
