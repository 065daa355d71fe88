"""Starting several ranks on this machine: `python -m trainer_core run`
re-run under torchrun when a CPU spec asks for backend.processes > 1 and no launcher started it."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, TextIO

from rlplane.ports import free_port


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
    command = [sys.executable, "-m", "trainer_core.torchrun", "--nproc_per_node", str(processes)]
    command += ["--master_port", str(free_port()), "-m", "trainer_core", *argv]
    return subprocess.call(command)
