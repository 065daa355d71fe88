"""The worker's end of trainer_core/forkserver.py: a CPU run's one trainer process forked from a process that imported
the training stack once: its first step about 3 s sooner than a new interpreter's (bench/trainer_start.py).

The forkserver starts on the first launch that may use it and lives as long as the worker (SIGTERM when the worker
dies, and its trainers with it). A launch it cannot serve starts as a new interpreter, as every other trainer does:
one whose environment differs from the forkserver's in more than what rlplane reads at run time (RLPLANE_*), or any
launch once the forkserver failed to start or died (the worker log says why, once).
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import IO

from rlplane.forking import FORKSERVER_MODULE, MAX_MESSAGE, READ_AT_RUN_TIME
from rlplane.processes import signal_on_parent_death

logger = logging.getLogger("rlplane.worker")

READY_WAIT_S = 300.0  # its imports: seconds on an idle machine, more beside a busy trainer


class NotForkable(Exception):
    """This launch starts as a new interpreter (the reason says why)."""


class ForkedProcess:
    """A trainer the forkserver forked, as far as the worker's Trainer uses a process: its pid (which leads its process
    group), its output, and its exit code, which the forkserver reports (it is not the worker's child)."""

    def __init__(self, stdout: IO[bytes]) -> None:
        self.stdout = stdout
        self.pid: int | None = None  # once the forkserver says it forked
        self.returncode: int | None = None
        self.forked, self._exited = threading.Event(), threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait_exit(self, timeout: float) -> int | None:
        self._exited.wait(timeout)
        return self.returncode

    def exited(self, code: int) -> None:
        self.returncode = code
        self._exited.set()


class ForkServer:
    """The forkserver of interpreter `python` (the worker's settings.python), started on first use."""

    def __init__(self, python: str) -> None:
        self.python = python
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._channel: socket.socket | None = None
        self._env: dict[str, str] = {}
        self._broken: str | None = None
        self._next = 0
        self._forked: dict[int, ForkedProcess] = {}  # by request id, until the forkserver reports its exit

    def start(self, command: list[str], cwd: Path, env: dict[str, str]) -> ForkedProcess:
        """`command` (`python -m trainer_core run ...`) in `cwd` with exactly `env`, forked; NotForkable where it
        cannot be, the process not started."""
        if command[:3] != [self.python, "-m", "trainer_core"]:
            raise NotForkable("only `python -m trainer_core` is forked")
        with self._lock:
            channel = self._ready(env)
            if differs := _read_at_import_and_differing(env, self._env):
                raise NotForkable(f"its environment differs from the forkserver's in {', '.join(differs)}")
            request_id, self._next = self._next, self._next + 1
            read_end, write_end = os.pipe()
            forked = self._forked[request_id] = ForkedProcess(os.fdopen(read_end, "rb"))
            request = {"id": request_id, "argv": command[1:], "cwd": str(cwd), "env": env}
            try:
                socket.send_fds(channel, [json.dumps(request).encode()], [write_end])
            except OSError as exc:
                self._forked.pop(request_id)
                forked.stdout.close()
                raise NotForkable(f"the forkserver is gone ({exc})") from None
            finally:
                os.close(write_end)
        if not forked.forked.wait(60):  # stopped, say: nothing it forks later may train unwatched
            self.close("the forkserver did not fork within 60 s")
        if forked.pid is None:
            forked.stdout.close()
            raise NotForkable(self._broken or "the forkserver did not fork")
        return forked

    def _ready(self, env: dict[str, str]) -> socket.socket:
        """The channel to a running forkserver, started here with `env` (the first launch's, less what differs by
        launch) where there is none."""
        if self._broken is not None:
            raise NotForkable(self._broken)
        if self._channel is not None:
            return self._channel
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._env = {k: v for k, v in env.items() if not k.startswith(READ_AT_RUN_TIME)}
        try:
            self._process = subprocess.Popen(
                [self.python, "-m", FORKSERVER_MODULE], stdin=theirs, env=self._env, start_new_session=True,
                preexec_fn=signal_on_parent_death(signal.SIGTERM),
            )  # fmt: skip
        finally:
            theirs.close()
        ready = select.select([ours], [], [], READY_WAIT_S)[0] and ours.recv(MAX_MESSAGE)
        answer = json.loads(ready) if ready else {}
        if not answer.get("ready"):
            self._broken = f"the forkserver did not start: {answer.get('error') or 'no answer'}"
            logger.warning("%s; trainers start as new interpreters", self._broken)
            ours.close()
            self._stop_process()
            raise NotForkable(self._broken)
        self._channel = ours
        threading.Thread(target=self._read, args=(ours,), name="forkserver-answers", daemon=True).start()
        logger.info("forkserver %d ready: a CPU run's trainer is forked from it", self._process.pid)
        return ours

    def _read(self, channel: socket.socket) -> None:
        while message := channel.recv(MAX_MESSAGE):
            answer = json.loads(message)
            if "pid" in answer:
                forked = self._forked[answer["id"]]
                forked.pid = answer["pid"]
                forked.forked.set()
            else:
                self._forked.pop(answer["id"]).exited(answer["code"])
        with self._lock:  # gone: its trainers had SIGTERM with it, and their exit codes went with it too
            if self._broken is None:  # not closed by this worker
                self._broken = "the forkserver exited"
                logger.warning("%s; trainers start as new interpreters", self._broken)
            for forked in self._forked.values():
                forked.forked.set()
                if forked.pid is not None:
                    threading.Thread(target=_exited_unreported, args=(forked,), daemon=True).start()
            self._forked.clear()

    def close(self, why: str = "the worker is shutting down") -> None:
        """Stop the forkserver and whatever it still runs."""
        with self._lock:
            self._broken = self._broken or why
            if self._channel is not None:
                try:
                    self._channel.shutdown(socket.SHUT_RDWR)
                except OSError:  # the forkserver is gone already
                    pass
            self._stop_process()

    def _stop_process(self) -> None:
        if self._process is None:
            return
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def _read_at_import_and_differing(env: dict[str, str], forkserver: dict[str, str]) -> list[str]:
    """The variables of `env` that differ from the forkserver's and that an import may have read."""
    names = {*env, *forkserver}
    return sorted(k for k in names if env.get(k) != forkserver.get(k) and not k.startswith(READ_AT_RUN_TIME))


def _exited_unreported(forked: ForkedProcess) -> None:
    """A trainer whose forkserver died: it had SIGTERM by its parent's death (and may still be checkpointing); its
    code is unknown, said as that SIGTERM once it is gone."""
    try:
        pidfd = os.pidfd_open(forked.pid)
    except OSError:  # already gone
        forked.exited(-signal.SIGTERM)
        return
    try:
        select.select([pidfd], [], [])
    finally:
        os.close(pidfd)
    forked.exited(-signal.SIGTERM)
