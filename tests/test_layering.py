"""House rules that keep the layers apart: the API never imports torch; nothing uses pickle."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUR_CODE = ["api", "cli", "trainer_core", "migrations", "bench", "scripts"]


def _loaded_after_import(imports: str, watched: tuple[str, ...]) -> list[str]:
    """Which of `watched` a fresh interpreter has loaded after `import <imports>`."""
    probe = f"import json, sys, {imports}; print(json.dumps(sorted(m for m in {watched!r} if m in sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_api_and_cli_do_not_import_torch():
    assert _loaded_after_import("api.app, cli.main, rlplane.spec", ("torch", "transformers", "deepspeed")) == []


def test_no_pickle_anywhere():
    """No pickle module, no pickle.load, and torch.load only with weights_only=True: its restricted unpickler
    builds tensors and plain containers only (the NeMo checkpoint reader, trainer_core/megatron/nemo.py)."""
    pattern = re.compile(
        r"^\s*(import|from)\s+(pickle|cPickle|dill|cloudpickle|joblib)\b|pickle\.loads?\(|torch\.load\((?![^)]*weights_only=True)",
        re.M,
    )
    offenders = [
        str(path.relative_to(ROOT))
        for folder in OUR_CODE
        if (ROOT / folder).exists()
        for path in (ROOT / folder).rglob("*.py")
        if not any(part.startswith(".venv") for part in path.parts) and pattern.search(path.read_text())
    ]
    assert offenders == []


def test_the_cli_client_never_touches_the_database():
    """The client commands talk HTTP only; the server commands (up, api, worker) import the rest lazily."""
    assert _loaded_after_import("cli.main, cli.client", ("sqlalchemy", "api", "psycopg", "celery", "worker")) == []
