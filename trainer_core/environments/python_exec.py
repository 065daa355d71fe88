"""grpo.environment {kind: builtin, name: python}: the policy's code runs in the sandbox, with the row's tests.

The code is the last ```python fenced block of the policy's message (the whole message when it has none), followed
by the row's `tests` column (Python that raises when the code is wrong, e.g. asserts) when the row has one. The
reward is 1 when that runs to its end within grpo.environment.sandbox's limits, else 0 with the sandbox's reason
(tests failed, syntax error, timeout, cpu time, memory, output, network, killed by ...). With max_turns > 1, a
failed run is answered with `<output>reason and the end of stderr</output>` and the policy may try again; the
episode's reward is its last run's.
"""

from __future__ import annotations

import os
import re

from rlplane.spec.environments import SandboxLimits
from trainer_core.environments.base import Episode, Reply, answer, end
from trainer_core.environments.sandbox import run_python

_FENCED = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.S)
_FEEDBACK_CHARS = 300  # of stderr shown back to the policy


def code_of(message: str) -> str:
    """The last fenced code block of a message, else the message itself."""
    blocks = _FENCED.findall(message)
    return blocks[-1] if blocks else message


def program(message: str, tests: str | None) -> str:
    code = code_of(message)
    return code if not tests else f"{code}\n\n# --- the task's tests ---\n{tests}\n"


class PythonExecution:
    stop: tuple[str, ...] = ()

    def __init__(self, limits: SandboxLimits, max_turns: int) -> None:
        self.limits, self.max_turns = limits, max_turns
        self.concurrency = min(4, os.cpu_count() or 1)  # sandboxes at once: each is a process, mostly waiting to start

    def reset(self, episode: Episode) -> str:
        return ""

    def step(self, episode: Episode, message: str) -> Reply:
        tests = episode.row.get("tests")
        outcome = run_python(program(message, str(tests) if tests else None), self.limits)
        if outcome.passed:
            return end(1.0, components={"passed": 1.0})
        ran = bool(outcome.reason and outcome.reason.startswith("tests failed"))  # wrong, but it ran: not an error
        if episode.turns < self.max_turns:  # the policy gets to read what went wrong and try again
            tail = outcome.stderr.strip()[-_FEEDBACK_CHARS:]
            return answer(f"<output>{outcome.reason}\n{tail}</output>", tool_call=True, error=not ran, reason=outcome.reason)
        return end(0.0, components={"passed": 0.0}, reason=outcome.reason, error=not ran)

    def cut_off(self, episode: Episode, why: str) -> Reply:
        return end(0.0, components={"passed": 0.0}, reason=f"cut off by {why} after {episode.turns} turns")

    def close(self) -> None:
        pass
