"""Server processes and worker threads: start and stop them, and meter the CPU every process used."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ingestbench import log

TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_setup(cpus: set[int] | None) -> Callable[[], None]:
    def setup() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        try:  # the server dies with us even if we are SIGKILLed (Linux only; best effort)
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass

    return setup


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    base_url: str
    log_path: Path

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def pids(self) -> list[int]:
        """The server and all its descendants (MLflow forks uvicorn and job runners)."""
        return sorted(descendants(self.proc.pid, {pid: info[0] for pid, info in process_table().items()}))

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after 15 s; then SIGKILL any descendant that left the group."""
        family = self.pids()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                log(f"{self.name}: did not stop in 15 s; killing it")
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in family:
            if pid != self.proc.pid and _read_stat(pid) is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if self.proc.poll() is None:
            self.proc.wait(timeout=5)


def start_server(
    name: str,
    argv: list[str],
    env: dict[str, str],
    ready_path: str,
    port: int,
    workdir: Path,
    cpus: set[int] | None,
    timeout: float,
    cwd: Path | None = None,
) -> Server:
    log_path = workdir / f"{name}.log"
    out = log_path.open("wb")
    proc = subprocess.Popen(
        argv,
        env={**os.environ, **env},
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=cwd or workdir,
        start_new_session=True,
        preexec_fn=_child_setup(cpus),
    )
    out.close()
    server = Server(name, proc, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} while starting:\n{server.tail()}")
            try:
                if client.get(server.base_url + ready_path).status_code == 200:
                    return server
            except httpx.TransportError:
                pass
            time.sleep(0.25)
    server.stop()
    raise RuntimeError(f"{name} was not ready after {timeout:.0f} s:\n{server.tail()}")


def _read_stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from `state` on: [0]=state, [1]=ppid, [11]=utime, [12]=stime


def process_table() -> dict[int, tuple[int, float, str]]:
    """pid -> (ppid, CPU seconds used so far, title) for every process we can see."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _read_stat(int(entry))
        if stat is None:
            continue
        title = ""
        try:
            if Path(f"/proc/{entry}/comm").read_text().strip() == "postgres":
                title = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            pass
        table[int(entry)] = (int(stat[1]), (int(stat[11]) + int(stat[12])) / TICKS, title)
    return table


def descendants(root: int, parents: dict[int, int]) -> set[int]:
    found, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found.add(pid)
                frontier.append(pid)
    return found


class CpuMeter:
    """CPU seconds used over a window, per process, summed into: the server (and its children), Postgres working
    for the benchmark database (its backends and the shared WAL writer, checkpointer, ...), the client (this
    process), and other processes: someone else's work on the machine, which makes the numbers noisy.

    From /proc/PID/stat, not /proc/stat: on this kind of VM /proc/stat shows about one core busy while
    no process runs. Processes that exit inside the window are missed (a short test run elsewhere)."""

    def __init__(self, server: Server, db: str) -> None:
        self.server, self.db = server, db

    def snapshot(self) -> tuple[float, dict[int, tuple[int, float, str]]]:
        return time.monotonic(), process_table()

    def shares(self, start: tuple, end: tuple) -> dict[str, float]:
        wall = end[0] - start[0]
        table, before = end[1], start[1]
        server = descendants(self.server.proc.pid, {pid: info[0] for pid, info in table.items()})
        me = os.getpid()
        totals = {"server": 0.0, "postgres": 0.0, "client": 0.0, "other": 0.0}
        for pid, (_ppid, cpu, title) in table.items():
            used = cpu - before[pid][1] if pid in before else cpu
            if pid in server:
                kind = "server"
            elif pid == me:
                kind = "client"
            elif title and ("(" not in title or f" {self.db} " in title):  # a backend's title names its database
                kind = "postgres"
            else:
                kind = "other"
            totals[kind] += max(0.0, used)
        return {k: round(v / wall, 3) for k, v in totals.items()}


def run_threads(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run the jobs on threads; re-raise the first failure. Daemon threads, so Ctrl-C is not held up."""
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def wrap(i: int, job: Callable[[], Any]) -> None:
        try:
            results[i] = job()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i, job), daemon=True) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
