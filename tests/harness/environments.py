"""Playing an environment by hand, as the tests of environments do: the policy's messages are given."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from trainer_core.environments import Episode, Reply

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def served_calculator() -> Iterator[str]:
    """The reference environment server (trainer_core/environments/server.py) serving the calculator in its own
    process, stopped after: its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer_core.environments.server", "--env", "calculator"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(timeout=10)


def played(environment, row: dict, *messages: str) -> list[Reply]:
    """The replies of `environment` to the policy's `messages`, in one episode of `row`."""
    episode = Episode(row=row)
    environment.reset(episode)
    replies = []
    for message in messages:
        episode.messages.append(("policy", message))
        replies.append(environment.step(episode, message))
        if not replies[-1].done:
            episode.messages.append(("environment", replies[-1].text))
    return replies
