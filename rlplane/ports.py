"""A free port for a rendezvous: the trainer's ranks, a gang's node 0 and a generator node each need one, and the
worker that launches them and the trainer that serves them both draw it, so it lives with what both may import."""

from __future__ import annotations

import random
import socket
from pathlib import Path


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
