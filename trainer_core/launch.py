"""Starting several ranks on this machine: a free rendezvous port, and `python -m trainer_core run`
re-run under torchrun when a CPU spec asks for backend.processes > 1 and no launcher started it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

# Written into the run's directory by a worker that must stop (its node is drained): the trainer
# checkpoints after its current step and exits, so the next attempt redoes no steps.
HAND_BACK_FILE = ".hand-back"


def free_port() -> int:
    """A port nothing listens on now, for the ranks' rendezvous (two runs on one node must not share one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def under_a_launcher() -> bool:
    return "WORLD_SIZE" in os.environ


def relaunch(processes: int, argv: list[str]) -> int:
    """`python -m trainer_core ARGV` as `processes` ranks under torchrun; its exit code."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
    command += ["--master_port", str(free_port()), "-m", "trainer_core", *argv]
    return subprocess.call(command)
