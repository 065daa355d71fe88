"""Trainer ranks forked from a process that has imported the training stack once.

A rank that starts as a new interpreter spends 7-10 s of CPU importing torch, transformers, DeepSpeed and
Megatron-Core before it trains a step, and the backend tests start a few hundred of them: on 2 cores that was
most of the suite's time. Here a zygote (`python -m tests.harness.forked_ranks`, one per pytest worker) imports
that stack once and, for each launch, forks a leader that forks the ranks. Each rank is a process of its own with
the environment torchrun gives its ranks (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), its own
working directory and output file, and runs `trainer_core.cli.main` as `python -m trainer_core run` does; the
leader does what torchrun's agent does for a single node with no restarts: it waits for the ranks, ends the rest
when one fails, and exits with the first failure's code.

What torchrun itself does (and DeepSpeed's launcher, and the worker that starts them) is tested where the launch
is the point: tests/test_backend_deepspeed.py (the launcher, a spec that re-runs itself under torchrun),
tests/test_multiprocess.py, the worker and multi-node tests. docs/testing.md says which launch each module uses.

Protocol, one JSON object a line: the client writes {"id", "argv", "processes", "env", "cwd", "log"} (argv as
after `python`: `-m module args` or `script.py args`); the zygote answers {"id", "pid"} (the leader: its process
group holds every rank) and later {"id", "code"}.
"""

from __future__ import annotations

import json
import os
import runpy
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from rlplane.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
_ANSWERS = -1  # the zygote's end of the answers pipe (its stdout when it started)


# --- the zygote ---------------------------------------------------------------------------------------------


def _preload() -> None:
    """What every trainer process imports anyway, imported once. Nothing runs: no thread, no process group."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # trainer_core.cli.main's, read when transformers loads
    import deepspeed  # noqa: F401
    import megatron.core  # noqa: F401
    import transformers  # noqa: F401

    import cli.main  # noqa: F401  (rlplane train)
    import trainer_core.backends.deepspeed_backend  # noqa: F401
    import trainer_core.backends.fsdp2_backend  # noqa: F401
    import trainer_core.backends.megatron.backend  # noqa: F401
    import trainer_core.backends.torch_backend  # noqa: F401
    import trainer_core.cli  # noqa: F401
    import trainer_core.models  # noqa: F401
    from trainer_core.recipes import dpo, grpo, ilql, ppo, reward, sft  # noqa: F401


def _rank(request: dict, rank: int, port: int) -> None:
    """In a forked child: become rank `rank` of the launch and run its program as `python ARGV` would (`-m
    module ...` or `script.py ...`); never returns."""
    code = 1
    try:
        processes = request["processes"]
        os.environ.clear()
        os.environ.update(request["env"])
        if processes is not None:  # None: one process as a shell starts it, no launcher around it
            os.environ.update(
                RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank), WORLD_SIZE=str(processes),
                LOCAL_WORLD_SIZE=str(processes), ROLE_WORLD_SIZE=str(processes), MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
            )  # fmt: skip
        os.chdir(request["cwd"])
        argv = request["argv"]
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file in argv[0]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _leader(request: dict) -> None:
    """In a forked child, its own session: fork the ranks, wait for them as torchrun's agent does; never returns."""
    os.setsid()
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((null, 0), (log, 1), (log, 2)):  # not the zygote's pipes
        os.dup2(fd, target)
    os.close(log)
    os.close(null)
    os.close(_ANSWERS)
    port = free_port()
    ranks = []
    for rank in range(request["processes"] or 1):
        pid = os.fork()
        if pid == 0:
            _rank(request, rank, port)
        ranks.append(pid)
    code = 0
    while ranks:
        pid, status = os.wait()
        ranks.remove(pid)
        exit_code = os.waitstatus_to_exitcode(status)
        if exit_code != 0 and code == 0:
            code = exit_code if exit_code > 0 else 128 - exit_code
            os.write(2, f"forked_ranks: a rank exited with {exit_code}: ending the others\n".encode())
            for other in ranks:
                os.kill(other, signal.SIGKILL)
    os._exit(code)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def serve() -> None:
    """Read requests on stdin, answer on stdout; one thread only, so every fork copies a process with no other."""
    global _ANSWERS
    _ANSWERS = os.dup(1)
    os.dup2(2, 1)  # what the libraries print goes to the zygote's log, not into the answers
    _preload()
    leaders: dict[int, int] = {}  # pid -> request id

    def reply(message: dict) -> None:
        os.write(_ANSWERS, (json.dumps(message) + "\n").encode())

    reply({"ready": True})
    pending, reading = b"", True
    while reading or leaders:
        if reading and select.select([0], [], [], 0.05)[0]:
            chunk = os.read(0, 1 << 16)
            reading = bool(chunk)
            pending += chunk
            if not reading:  # the client is gone: so are its launches
                for pid in leaders:
                    _kill_group(pid)
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _leader(request)
                leaders[pid] = request["id"]
                reply({"id": request["id"], "pid": pid})
        elif not reading:
            time.sleep(0.05)
        while leaders:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            reply({"id": leaders.pop(pid), "code": os.waitstatus_to_exitcode(status)})


# --- the client (in the pytest worker) ---------------------------------------------------------------------


class ForkedLaunch:
    """One launch's leader, as far as a test needs a process: pid (its process group), wait(timeout)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._done = threading.Event()

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._done.set()

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked ranks {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode


class Zygote:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self._log = log.open("w")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.forked_ranks"],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
            start_new_session=True,
        )  # fmt: skip
        assert self._process.stdout is not None
        ready = self._process.stdout.readline()
        assert ready, f"the zygote did not start: {log.read_text()[-3000:]}"
        self._next = 0
        self._lock = threading.Lock()
        self._launches: dict[int, ForkedLaunch] = {}
        self._started: dict[int, threading.Event] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            message = json.loads(line)
            with self._lock:
                if "pid" in message:
                    self._launches[message["id"]] = ForkedLaunch(message["pid"])
                    self._started.pop(message["id"]).set()
                else:
                    self._launches.pop(message["id"])._exited(message["code"])

    def launch(self, argv: list[str], processes: int | None, env: dict[str, str], cwd: Path, log: Path) -> ForkedLaunch:
        assert self._process.stdin is not None and self._process.poll() is None, "the zygote is gone"
        with self._lock:
            request_id, self._next = self._next, self._next + 1
            started = self._started[request_id] = threading.Event()
            request = {"id": request_id, "argv": argv, "processes": processes, "env": env, "cwd": str(cwd), "log": str(log)}
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
        assert started.wait(60), "the zygote did not fork"
        with self._lock:
            return self._launches[request_id]

    def close(self) -> None:
        with self._lock:
            leaders = [launch.pid for launch in self._launches.values()]
        for pid in leaders:  # a test that failed may leave a launch running: its ranks go with it
            _kill_group(pid)
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
        self._log.close()


if __name__ == "__main__":
    serve()
