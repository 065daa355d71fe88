"""Every repository path the docs name exists (or is something a build makes, which .gitignore lists): a doc that
names a moved or never-written file misleads its reader, and nothing else would notice."""

from __future__ import annotations

import re
import subprocess

from tests.harness.launch import ROOT

DOCS = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
TOPS = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".") and "egg-info" not in p.name)
# A path: a top-level directory of the repository, then a file with an extension, or anything inside backticks.
NAMED = re.compile(rf"(?<![\w./-])(?:{'|'.join(TOPS)})/[\w./-]*\.[a-z]{{1,5}}\b")
QUOTED = re.compile(rf"`((?:{'|'.join(TOPS)})/[\w./-]*)(?:::[\w\[\]-]+|:\d+)?`")
NOT_PATHS = {"rlplane/api", "rlplane/worker"}  # the Docker images' names (docs/deploy.md)


def named_paths(text: str) -> set[str]:
    found = {m.group(0) for m in NAMED.finditer(text)} | {m.group(1) for m in QUOTED.finditer(text)}
    return {path.rstrip("/.") for path in found} - NOT_PATHS


def built(paths: list[str]) -> set[str]:
    """Those .gitignore lists (a build output, a venv, bench results), as files or as directories."""
    probes = [probe for path in paths for probe in (path, f"{path}/_")]
    done = subprocess.run(["git", "check-ignore", "--stdin"], input="\n".join(probes), cwd=ROOT, capture_output=True, text=True)
    return {line.removesuffix("/_") for line in done.stdout.splitlines()}


def test_every_path_a_doc_names_exists() -> None:
    missing = {(doc.relative_to(ROOT).as_posix(), path) for doc in DOCS for path in named_paths(doc.read_text())}
    missing = {(doc, path) for doc, path in missing if not (ROOT / path).exists()}
    ignored = built([path for _, path in missing])
    assert not sorted((doc, path) for doc, path in missing if path not in ignored)


def test_the_check_finds_a_path_that_does_not_exist() -> None:
    text = "see tests/test_rl_backends.py and `trainer_core/recipes/` and `rlplane/api`, 0.5/1.0"
    assert named_paths(text) == {"tests/test_rl_backends.py", "trainer_core/recipes"}
