"""Starting trainers: their ranks forked from a process that imported the training stack once
(tests/harness/forked_ranks.py), or torchrun as a worker starts them; one thread per rank, and DeepSpeed's
compiled ops cached outside the checkout so a fresh clone on the same machine builds them once."""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Literal

from rlplane.layout import CHECKPOINTS, MANIFEST, step_dir_name
from rlplane.ports import free_port
from tests.harness.forked_ranks import ForkedLaunch, Zygote

ROOT = Path(__file__).resolve().parents[2]
# make test sets TORCH_EXTENSIONS_DIR (the Makefile: one directory per checkout path); a test run by hand gets the
# same one. (It once got a directory of its own, and a suite started by hand rebuilt every op, async_io for 7 minutes.)
_CHECKOUT = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
EXTENSIONS = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "rlplane" / "torch_extensions" / _CHECKOUT)
# Where the suite's DeepSpeed ops are built and found, and the compiler they are built with (without debug info: a
# third off async_io's cold build). torch rebuilds an op whose compile command changed, so every process of the suite
# that loads one must see the same two: tests/conftest.py puts them in the environment that its children inherit.
OPS_ENV = {"TORCH_EXTENSIONS_DIR": str(EXTENSIONS), "CXX": str(ROOT / "tests" / "harness" / "cxx-without-debug-info")}


def trainer_env(**extra: str) -> dict[str, str]:
    """One thread per rank: two ranks on two cores, and tiny models step fastest single-threaded."""
    return {**os.environ, "OMP_NUM_THREADS": "1", **OPS_ENV, **extra}


Launcher = Literal["forked", "torchrun"]
_zygotes: list[Zygote] = []


def zygote() -> Zygote:
    """This pytest process's zygote, started on first use and stopped when the process exits."""
    if not _zygotes:
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"rlplane-zygote-{os.getpid()}.log"
        _zygotes.append(Zygote(trainer_env(), log))
        atexit.register(_zygotes[0].close)
    return _zygotes[0]


def start(
    tmp: Path, spec: dict, backend: dict, name: str, *args: str, processes: int = 2, launcher: Launcher = "forked"
) -> tuple[Path, subprocess.Popen | ForkedLaunch]:
    """`-m trainer_core run SPEC --out OUT ARGS` (`--resume` alone: `--resume OUT`) as `processes` ranks, forked
    (default) or under `torchrun --nproc_per_node N`, with their output in tmp/NAME.log; (OUT, the launch)."""
    out, path = tmp / name, tmp / f"{name}.json"
    path.write_text(json.dumps({**spec, "backend": {**backend, "processes": processes}}))
    run = ["--resume", str(out)] if args == ("--resume",) else [str(path), "--out", str(out), *args]
    if launcher == "forked":
        return out, zygote().launch(["-m", "trainer_core", "run", *run], processes, trainer_env(), ROOT, tmp / f"{name}.log")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
    command += ["--master_port", str(free_port()), "-m", "trainer_core", "run", *run]
    log = (tmp / f"{name}.log").open("w")
    # Its own session, so a launch that runs out of time is ended with every rank it started.
    process = subprocess.Popen(command, cwd=ROOT, env=trainer_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return out, process


def ended(process: subprocess.Popen | ForkedLaunch, timeout: float) -> int | None:
    """The launch's exit code; None when it ran past `timeout` and was killed with every process it started."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return None


def finish(out: Path, process: subprocess.Popen | ForkedLaunch, timeout: float = 600) -> Path:
    code = ended(process, timeout)
    log = (out.parent / f"{out.name}.log").read_text()[-6000:]
    assert code == 0, f"exit {code} (None: still running after {timeout:.0f} s, killed)\n{log}"
    return out


def forked(argv: list[str], processes: int | None, log: Path, timeout: float = 600, expect: int = 0, **env: str) -> str:
    """`python ARGV` (`-m module ...` or `script.py ...`) as `processes` forked ranks in the checkout (None: one
    process with no launcher's environment, as a shell starts it), with trainer_env(**env) and their output in
    `log`; asserts the exit code `expect` and gives the output."""
    code = ended(zygote().launch(argv, processes, trainer_env(**env), ROOT, log), timeout)
    output = log.read_text()
    assert code == expect, f"exit {code}, not {expect} (None: still running after {timeout:.0f} s, killed)\n{output[-8000:]}"
    return output


def launch(
    tmp: Path, spec: dict, backend: dict, name: str, *args: str, processes: int = 2, launcher: Launcher = "forked"
) -> Path:
    """start() and wait; OUT."""
    return finish(*start(tmp, spec, backend, name, *args, processes=processes, launcher=launcher))


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
