"""Starting several ranks on this machine: a free rendezvous port, and `python -m trainer_core run`
re-run under torchrun when a CPU spec asks for backend.processes > 1 and no launcher started it."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, TextIO


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now at `host`, for the ranks' rendezvous (two runs on one node must not share one).

    Drawn at random below the kernel's ephemeral range: the port is bound again only later, by the rendezvous, and
    meanwhile the kernel hands ephemeral ports to every outgoing connection and every bind to port 0 on the machine
    (a test suite's or a busy node's), which took a rendezvous port from under a gang here (EADDRINUSE). Below the
    range only another free_port draw can take it. Port 0's answer is the fallback."""
    low, high = _EPHEMERAL_START - _BELOW_EPHEMERAL, _EPHEMERAL_START - 1
    for _ in range(64 if low < high else 0):
        port = random.SystemRandom().randint(low, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_EPHEMERAL_START = _ephemeral_start()
_BELOW_EPHEMERAL = max(0, min(20000, _EPHEMERAL_START - 1025))  # never a privileged port


class _RankPrefixed:
    """A text stream that starts every line with `prefix`, as torchrun's --tee does for its ranks."""

    def __init__(self, stream: TextIO, prefix: str) -> None:
        self._stream, self._prefix, self._at_line_start = stream, prefix, True

    def write(self, text: str) -> int:
        if not text:
            return 0
        *lines, rest = text.split("\n")  # `rest` follows the last newline ("" when the text ends with one)
        starts = [i > 0 or self._at_line_start for i in range(len(lines) + 1)]
        out = [self._prefix + line if start else line for line, start in zip(lines, starts, strict=False)]
        out.append(self._prefix + rest if rest and starts[-1] else rest)
        self._stream.write("\n".join(out))
        self._at_line_start = text.endswith("\n")
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding ...: the wrapped stream's
        return getattr(self._stream, name)


def prefix_rank_output() -> None:
    """Under DeepSpeed's launcher (it sets CROSS_RANK; torchrun does not) with several ranks, start each line
    this rank prints with `[rankN]: `, so the worker files it under its rank, as torchrun's lines are."""
    if "CROSS_RANK" in os.environ and "TORCHELASTIC_RUN_ID" not in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        prefix = f"[rank{os.environ.get('RANK', '0')}]: "
        sys.stdout = _RankPrefixed(sys.stdout, prefix)  # type: ignore[assignment]
        sys.stderr = _RankPrefixed(sys.stderr, prefix)  # type: ignore[assignment]


def under_a_launcher() -> bool:
    return "WORLD_SIZE" in os.environ


def relaunch(processes: int, argv: list[str]) -> int:
    """`python -m trainer_core ARGV` as `processes` ranks under torchrun; its exit code."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
    command += ["--master_port", str(free_port()), "-m", "trainer_core", *argv]
    return subprocess.call(command)
