"""Starting trainers the way a worker does: torchrun (or one process), one thread per rank, and DeepSpeed's
compiled ops cached outside the checkout so a fresh clone on the same machine builds them once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rlplane.layout import CHECKPOINTS, MANIFEST, step_dir_name
from trainer_core.launch import free_port

ROOT = Path(__file__).resolve().parents[2]
# make test sets TORCH_EXTENSIONS_DIR; a test run by hand gets the same cache.
EXTENSIONS = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "rlplane" / "torch_extensions")


def trainer_env(**extra: str) -> dict[str, str]:
    """One thread per rank: two ranks on two cores, and tiny models step fastest single-threaded."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(EXTENSIONS), **extra}


def start(tmp: Path, spec: dict, backend: dict, name: str, *args: str, processes: int = 2) -> tuple[Path, subprocess.Popen]:
    """`torchrun --nproc_per_node N -m trainer_core run SPEC --out OUT ARGS` (`--resume` alone: `--resume OUT`),
    started with its output in tmp/NAME.log; (OUT, the process)."""
    out, path = tmp / name, tmp / f"{name}.json"
    path.write_text(json.dumps({**spec, "backend": {**backend, "processes": processes}}))
    run = ["--resume", str(out)] if args == ("--resume",) else [str(path), "--out", str(out), *args]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
    command += ["--master_port", str(free_port()), "-m", "trainer_core", "run", *run]
    log = (tmp / f"{name}.log").open("w")
    return out, subprocess.Popen(command, cwd=ROOT, env=trainer_env(), stdout=log, stderr=subprocess.STDOUT)


def finish(out: Path, process: subprocess.Popen) -> Path:
    assert process.wait(timeout=600) == 0, (out.parent / f"{out.name}.log").read_text()[-6000:]
    return out


def launch(tmp: Path, spec: dict, backend: dict, name: str, *args: str, processes: int = 2) -> Path:
    """start() and wait; OUT."""
    return finish(*start(tmp, spec, backend, name, *args, processes=processes))


def torchrun_trainer(*args: str, processes: int = 2) -> str:
    """torchrun --nproc_per_node N -m trainer_core run ARGS; the ranks' output."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port"]
    command += [str(free_port()), "-m", "trainer_core", "run", *args]
    result = subprocess.run(command, cwd=ROOT, env=trainer_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result.stdout + result.stderr


def max_diff(a: dict[int, float], b: dict[int, float]) -> float:
    """The largest difference between two curves logged at the same steps."""
    assert sorted(a) == sorted(b) and a, (sorted(a), sorted(b))
    return max(abs(a[step] - b[step]) for step in a)


def checkpoint(out: Path, step: int) -> str:
    """The path of OUT's complete checkpoint at `step`, for `--resume` into a new directory: a resume test
    continues the straight run's own checkpoint instead of training a second run to the same step."""
    path = out / CHECKPOINTS / step_dir_name(step)
    assert (path / MANIFEST).is_file(), f"{out} has no checkpoint at step {step}"
    return str(path)


def after(curve: dict[int, float], step: int) -> dict[int, float]:
    """The points of a curve past `step` (what a run resumed at `step` logs)."""
    tail = {s: v for s, v in curve.items() if s > step}
    assert tail, f"nothing logged after step {step}"
    return tail
