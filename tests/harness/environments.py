"""Playing an environment by hand, as the tests of environments do: the policy's messages are given."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from rlplane.ports import free_port
from trainer_core.environments import Episode, Reply, tool_calls

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


@contextlib.contextmanager
def served_openenv(sessions: int, environment: str = "guess") -> Iterator[str]:
    """The guessing environment (or `tools`, the MCP tool environment) served by openenv-core's own server
    (tests/harness/openenv_server.py) in its own process, `sessions` at once, stopped after: its URL, once its schema
    answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "tests.harness.openenv_server", str(port), str(sessions), environment]
    process = subprocess.Popen(command, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"the OpenEnv server exited with {process.returncode}"
            try:
                if httpx.get(f"{url}/schema", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the OpenEnv server did not answer within 60 s"
            time.sleep(0.2)
        yield url
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


def replied(observation: dict, fmt: str = "hermes", call: tool_calls.Call | None = None) -> tuple[str, str | None]:
    """What the policy is answered and the failure's reason (tool_calls.answered's reply)."""
    reply = tool_calls.answered(observation, fmt, call)
    return reply.text, reply.reason
