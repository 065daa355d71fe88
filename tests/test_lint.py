"""The tree passes the lint and format rules of pyproject.toml's [tool.ruff] (among them: no production function above
McCabe complexity 12), so that `make test` enforces them, not a reviewer's memory."""

from __future__ import annotations

import subprocess
import sys

from tests.harness.launch import ROOT


def ruff(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_tree_passes_the_lint_rules() -> None:
    checked = ruff("check", "--output-format", "concise", "--no-cache", ".")
    assert checked.returncode == 0, checked.stdout[-5000:] + checked.stderr[-2000:]


def test_the_tree_is_formatted() -> None:
    formatted = ruff("format", "--check", "--no-cache", ".")
    assert formatted.returncode == 0, formatted.stdout[-5000:] + formatted.stderr[-2000:]
