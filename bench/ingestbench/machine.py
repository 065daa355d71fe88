"""What was measured on: the machine, the software versions, and which rlplane code the server runs."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import httpx

from ingestbench import REPO
from ingestbench.postgres import Pg


def machine_info(pg: Pg, mlflow_version: str | None) -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    commit = _git("rev-parse", "--short", "HEAD")
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "loadavg_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgres": pg.version(),
        "postgres_settings": pg.settings(),
        "repo_head": commit,
        "mlflow": mlflow_version,
        "httpx": httpx.__version__,
    }


def _git(*argv: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), *argv], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def rlplane_source(rev: str | None, src: Path | None, workdir: Path) -> tuple[Path, str]:
    """Where the server's code comes from: the working tree, another checkout, or `git archive REV` in a temp dir."""
    if src is not None:
        if not (src / "api" / "app.py").exists():
            raise SystemExit(f"--src {src}: no api/app.py there")
        return src.resolve(), f"{src.resolve()}"
    if rev is None:
        dirty = _git("status", "--porcelain", "--", "api", "cli", "trainer_core", "migrations")
        return REPO, f"working tree at {_git('rev-parse', '--short', 'HEAD') or '?'}" + (
            " + uncommitted changes" if dirty else ""
        )
    sha = _git("rev-parse", "--short", f"{rev}^{{commit}}")
    if not sha:
        raise SystemExit(f"--rev {rev}: no such commit")
    src = workdir / "rlplane-src"
    src.mkdir()
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", sha], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(src)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {sha} failed")
    return src, f"git {rev} ({sha})"
