"""What a run needs to be reproduced, recorded where it runs: the interpreter, the installed packages, the
machine, the command line, and (for a script started outside a worker) its git commit and uncommitted diff."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

MAX_DIFF_CHARS = 1_000_000  # the spec's command.code.git_diff holds as much


def packages() -> dict[str, str]:
    """name -> version of every installed distribution (what `pip freeze` lists)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[name] = dist.version
    return dict(sorted(found.items(), key=lambda item: item[0].lower()))


def git(directory: Path) -> dict[str, Any] | None:
    """{commit, dirty, diff} of the repository holding `directory`; None outside one (or without git)."""

    def run(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=directory, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = run("rev-parse", "HEAD")
    if commit is None:
        return None
    diff = run("diff", "HEAD") or ""
    untracked = (run("ls-files", "--others", "--exclude-standard") or "").split()
    dirty = bool(diff.strip()) or bool(untracked)
    return {
        "commit": commit.strip(),
        "dirty": dirty,
        "diff": diff[:MAX_DIFF_CHARS] if diff.strip() else None,
        "untracked": untracked[:1000],
    }


def describe(*, with_git: bool) -> dict[str, Any]:
    """The environment record of this process (POST /runs/{id}/environment)."""
    record: dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "argv": list(sys.argv),
        "cwd": os.getcwd(),
        "packages": packages(),
    }
    if with_git:
        record["git"] = git(Path.cwd())
    return record
