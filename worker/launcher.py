"""The trainer as a child process group: one `python -m trainer_core run` (a CPU run's forked from the worker's
forkserver, worker/forks.py), or torchrun for several ranks.

The group is a new session, so cancel and hang handling end every rank and whatever they started
(data loader workers, compile helpers) with one signal, and the Celery process never trains.
"""

from __future__ import annotations

import logging
import os
import re
import select
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rlplane.ports import free_port
from rlplane.processes import signal_on_parent_death
from rlplane.spec import RunSpec
from worker.forks import ForkedProcess, ForkServer, NotForkable

logger = logging.getLogger("rlplane.worker")

_RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:\s?")


def processes_per_node(spec: RunSpec) -> int:
    """One rank per GPU; a CPU run has backend.processes."""
    return spec.resources.gpus or spec.backend.processes


@dataclass(frozen=True)
class NodePlace:
    """This node's place in a multi-node attempt: its rank among the nodes, and node 0's rendezvous."""

    node_rank: int
    nodes: int
    master_address: str
    master_port: int


def trainer_command(
    python: str, spec: RunSpec, spec_path: Path, out_dir: Path, resume: Path | None, place: NodePlace | None = None
) -> list[str]:
    """`resume`: the run directory (its latest checkpoint) or one checkpoint to resume from; None: a fresh start."""
    nproc = processes_per_node(spec)
    command = [python, "-m", "trainer_core", "run"]
    if place is not None:
        # Every backend's ranks under torchrun (DeepSpeed's launcher would ssh to the other nodes itself); static
        # rendezvous at node 0, and no restarts: a failed rank fails the attempt, and the API starts a new gang.
        launcher = [python, "-m", "trainer_core.torchrun", "--nnodes", str(place.nodes), "--node-rank", str(place.node_rank)]
        launcher += ["--nproc-per-node", str(nproc), "--master-addr", place.master_address]
        launcher += ["--master-port", str(place.master_port), "--max-restarts", "0", "--tee", "3"]
        launcher += ["--log-dir", str(out_dir / "rank-logs" / f"node-{place.node_rank}")]
        command = [*launcher, "-m", "trainer_core", "run"]
    elif nproc > 1 and spec.backend.kind == "deepspeed":
        # DeepSpeed's own launcher (what its users expect; it sets up its accelerator's environment).
        # --no_local_rank: the trainer reads LOCAL_RANK from the environment, not from an argument.
        launcher = [python, "-m", "deepspeed.launcher.runner", "--num_gpus", str(nproc), "--master_port", str(free_port())]
        command = [*launcher, "--no_local_rank", "--module", "trainer_core", "run"]
    elif nproc > 1:
        # --tee 3 prefixes every line of rank N with "[defaultN]:" (and keeps per-rank files under --log-dir).
        launcher = [python, "-m", "trainer_core.torchrun", "--nproc_per_node", str(nproc), "--tee", "3"]
        launcher += ["--master_port", str(free_port()), "--log-dir", str(out_dir / "rank-logs")]
        command = [*launcher, "-m", "trainer_core", "run"]
    return [*command, "--resume", str(resume)] if resume is not None else [*command, str(spec_path), "--out", str(out_dir)]


def generator_command(python: str, spec: RunSpec, workdir: Path, listen: str) -> list[str]:
    """A generator node's process (grpo.generator node): it listens at `listen` (host:port) for node 0's trainer and
    builds its engine in `workdir` on the files the trainer sends, on this node's first GPU (or its CPU)."""
    device = "cuda" if spec.resources.gpus else "cpu"
    return [python, "-m", "trainer_core.rollout.own_process", "--listen", listen, "--workdir", str(workdir), "--device", device]


def split_rank(line: str, default: int = 0) -> tuple[int, str]:
    """torchrun's `[rank1]: text` -> (1, "text"); a line without a prefix is `default`'s (the node's first rank)."""
    match = _RANK_PREFIX.match(line)
    return (int(match.group(1)), line[match.end() :]) if match else (default, line)


def terminal_line(text: str) -> str:
    """What a terminal shows of one printed line: a progress bar (tqdm) redraws it after each "\r", so only its
    last state stays (as torchrun's rank prefix is printed once, it is kept before it)."""
    text = text.rstrip("\n").removesuffix("\r")
    if "\r" not in text:
        return text
    last = text.rsplit("\r", 1)[-1]
    prefix = _RANK_PREFIX.match(text)
    return prefix.group(0) + last if prefix and not _RANK_PREFIX.match(last) else last


class Trainer:
    """A running trainer: its process group, and its output lines as they arrive."""

    def __init__(
        self,
        command: list[str],
        cwd: Path,
        on_line: Callable[[int, str], None],
        env: dict[str, str] | None = None,
        first_rank: int = 0,
        base_env: dict[str, str] | None = None,
        forks: ForkServer | None = None,
    ):
        """`first_rank`: the global rank of this node's first process, whose lines are those without a rank.
        `base_env`: the environment `env` is added to (default: the worker's own). `forks`: the worker's forkserver,
        where this trainer may be forked from it (a CPU run's one process); a new interpreter where it cannot be."""
        self.tail: deque[str] = deque(maxlen=30)  # for the failure reason
        self.first_rank = first_rank
        # When its exit was first seen (wait wakes at the exit): a gang's nodes say which trainer ended first
        self.exited_at: datetime | None = None
        env = {**(os.environ if base_env is None else base_env), "PYTHONUNBUFFERED": "1", **(env or {})}
        self.process: subprocess.Popen | ForkedProcess = self._forked(forks, command, cwd, env) or subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._reader = threading.Thread(target=self._read, args=(on_line,), name="trainer-output", daemon=True)
        self._reader.start()

    @staticmethod
    def _forked(forks: ForkServer | None, command: list[str], cwd: Path, env: dict[str, str]) -> ForkedProcess | None:
        if forks is None:
            return None
        try:
            forked = forks.start(command, cwd, env)
        except NotForkable as exc:
            logger.info("trainer started as a new interpreter: %s", exc)
            return None
        logger.info("trainer %d forked from the forkserver", forked.pid)
        return forked

    def _read(self, on_line: Callable[[int, str], None]) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:  # bytes, split at "\n" only: a "\r" is a progress bar redrawing its line
            line = terminal_line(raw.decode("utf-8", errors="replace"))
            self.tail.append(line)
            on_line(*split_rank(line, self.first_rank))

    def poll(self) -> int | None:
        code = self.process.poll()
        if code is not None and self.exited_at is None:
            self.exited_at = datetime.now(UTC)
        return code

    def wait(self, timeout: float) -> int | None:
        """The exit code once the trainer exits, or None after `timeout` seconds: wakes at the exit, not a tick
        later (Popen.wait's own timeout polls every 50 ms, which a worker would pay for the whole run)."""
        if isinstance(self.process, ForkedProcess):  # not this process's child: its forkserver reports the exit
            self.process.wait_exit(timeout)
            return self.poll()
        try:
            pidfd = os.pidfd_open(self.process.pid)
        except (AttributeError, OSError):  # no pidfd (not Linux >= 5.3), or the process is already reaped
            if self.poll() is None:
                time.sleep(timeout)
            return self.poll()
        try:
            select.select([pidfd], [], [], timeout)
        finally:
            os.close(pidfd)
        return self.poll()

    def wait_output(self, timeout: float = 10.0) -> None:
        """Let the reader drain what the process printed before it exited."""
        self._reader.join(timeout)

    def kill_group(self, grace_s: float = 5.0) -> None:
        """stop_tree of the trainer's process group (its torchrun or its one process, and every rank)."""
        stop_tree(self.process.pid, grace_s, reap=self.process.poll)


def stop_tree(pgid: int, grace_s: float = 5.0, reap: Callable[[], object] | None = None) -> None:
    """SIGTERM to process group `pgid` and to every process under its leader, then SIGKILL to whatever is left after
    `grace_s`. The tree, not only the group: torchrun starts each rank in a session of its own, and a rank it had no
    time to end (stopped, or hung where SIGTERM cannot reach it) would outlive it. SIGCONT follows SIGTERM, so a
    stopped process acts on it. `reap`: the leader's Popen.poll, so it does not linger as a zombie."""
    tree: set[tuple[int, int]] = set()  # kept: a rank whose launcher died is no longer found under it
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        tree |= _descendants(pgid)
        sent = _signal(pgid, tree, sig)
        if sig == signal.SIGTERM:
            _signal(pgid, tree, signal.SIGCONT)
        if not sent:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if reap is not None:
                reap()
            if not _group_alive(pgid) and not any(_same_process(pid, started) for pid, started in tree):
                return
            time.sleep(0.1)


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process, from /proc; None if it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else (int(fields[1]), int(fields[19]))


def _descendants(pid: int) -> set[tuple[int, int]]:
    """Every live process under `pid` as (pid, start time): the start time tells a reused pid apart. Empty where
    there is no /proc (the process group alone is signalled there)."""
    children: dict[int, list[tuple[int, int]]] = {}
    try:
        entries = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return set()
    for child in entries:
        stat = _stat(child)
        if stat is not None:
            children.setdefault(stat[0], []).append((child, stat[1]))
    found: set[tuple[int, int]] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child[0])
    return found


def _same_process(pid: int, started: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] == started


def _signal(pgid: int, tree: set[tuple[int, int]], sig: signal.Signals) -> bool:
    """`sig` to the group and to each process of `tree` still alive; whether any was there to get it."""
    sent = False
    try:
        os.killpg(pgid, sig)
        sent = True
    except ProcessLookupError:
        pass
    for pid, started in tree:
        if _same_process(pid, started):
            try:
                os.kill(pid, sig)
                sent = True
            except ProcessLookupError:
                pass
    return sent


# A trainer: SIGTERM when its worker dies (torchrun passes the SIGTERM on to its ranks).
_die_with_parent = signal_on_parent_death(signal.SIGTERM)


def _group_alive(pgid: int) -> bool:
    return _signalable(os.killpg, pgid)


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists (another user's counts: it cannot be signalled, but it is there)."""
    return _signalable(os.kill, pid)


def _signalable(send: Callable[[int, int], None], target: int) -> bool:
    try:
        send(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
