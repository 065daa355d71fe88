"""House rules that keep the layers apart (docs/layout.md): who may import what; nothing uses pickle."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUR_CODE = ["rlplane", "api", "cli", "worker", "trainer_core", "migrations", "bench", "scripts"]


def _loaded_after_import(imports: str, watched: tuple[str, ...]) -> list[str]:
    """Which of `watched` a fresh interpreter has loaded after `import <imports>`."""
    probe = f"import json, sys, {imports}; print(json.dumps(sorted(m for m in {watched!r} if m in sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


HEAVY = ("torch", "transformers", "deepspeed", "megatron")
DATABASE = ("api", "sqlalchemy", "alembic", "psycopg")


def test_import_boundaries():
    """The contract imports none of the rest; the worker and the CLI never the API or a database driver, nor torch
    (a GPU node's worker process and a laptop's CLI stay light); the API never torch."""
    rest = ("api", "worker", "cli", "trainer_core", *HEAVY, "sqlalchemy", "fastapi")
    contract = "rlplane.spec, rlplane.status, rlplane.limits, rlplane.wire, rlplane.layout, rlplane.client, rlplane.reports"
    contract += ", rlplane.rows, rlplane.floats"
    assert _loaded_after_import(f"{contract}, rlplane.logformat, rlplane.config, rlplane.allowlist, rlplane.ports", rest) == []
    # the SDK a training script imports, and its reporter: torch-free, and `rlplane.init` loads it when first used
    assert _loaded_after_import("rlplane; rlplane.init; import rlplane.reporting, rlplane.manifest", rest) == []
    assert _loaded_after_import("worker.app, worker.supervise, cli.main, cli.commands.runs, cli.code", (*HEAVY, *DATABASE)) == []
    assert _loaded_after_import("api.app", HEAVY) == []


def test_no_pickle_anywhere():
    """No pickle module, no pickle.load, and torch.load only with weights_only=True: its restricted unpickler
    builds tensors and plain containers only (the NeMo checkpoint reader, trainer_core/models/megatron/nemo.py)."""
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


# Modules a background thread calls, or that only hold rules: they raise api.exceptions' errors, never FastAPI's.
HTTP_FREE = [
    "api/exceptions.py",
    "api/values.py",
    "api/unit_of_work.py",
    "api/reconcile.py",
    "api/auth/principal.py",
    "api/runs/sources.py",
    "api/runs/priorities.py",
    "api/runs/preemption.py",
    "api/runs/quotas.py",
]


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_services_and_repositories_do_not_import_the_web_framework():
    """Services raise domain errors (api/exceptions.py) that one handler maps to HTTP, so the reconciler's thread and
    the reporting hot path call the same rules a request does; nothing below the endpoints knows FastAPI."""
    api = ROOT / "api"
    modules = sorted({*api.rglob("service*.py"), *api.rglob("repository*.py"), *(ROOT / m for m in HTTP_FREE)})
    assert api / "runs" / "service.py" in modules  # the glob finds them (a moved folder would pass vacuously)
    offenders = {
        str(path.relative_to(ROOT)): sorted(found)
        for path in modules
        if (found := _imported_roots(path) & {"fastapi", "starlette"})
    }
    assert offenders == {}


def test_trainer_core_packages_import_each_other_one_way():
    """No two of trainer_core's packages import each other at module level (recipes use rewards, rewards never
    recipes; the Megatron backend uses model loading's conversion, never the other way): each layer can be read,
    tested and moved on its own."""
    import ast

    def package(module: str) -> str | None:
        parts = module.split(".")
        if parts[0] != "trainer_core" or len(parts) < 2:
            return None
        return ".".join(parts[1:3]) if parts[1] in ("backends", "models") and parts[2:3] == ["megatron"] else parts[1]

    edges: dict[str, set[str]] = {}
    for path in (ROOT / "trainer_core").rglob("*.py"):
        source = package(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and (target := package(node.module)) not in (None, source):
                edges.setdefault(source, set()).add(target)
    assert sorted((a, b) for a, targets in edges.items() for b in targets if a in edges.get(b, ())) == []


# Who may import whom, anywhere in a module (a lazy import inside a function too): docs/layout.md's table.
NEVER = {
    "rlplane": {"api", "worker", "trainer_core", "cli"},
    "api": {"trainer_core", "worker", "cli"},
    "worker": {"trainer_core", "api", "cli"},
    "trainer_core": {"api", "worker", "cli"},
    "cli": {"trainer_core", "api", "worker"},
}
# The CLI's commands that start a server, a worker or a trainer import it, lazily where the module is the CLI's own.
ALLOWED = {"cli/main.py": {"trainer_core", "worker"}, "cli/server.py": {"api", "worker"}}


def test_each_package_imports_only_what_its_layer_may():
    offenders = []
    for package, never in NEVER.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            wrong = (_imported_roots(path) & never) - ALLOWED.get(name, set())
            offenders += [f"{name} imports {root}" for root in sorted(wrong)]
    assert offenders == []
