"""Build DeepSpeed's CPU ops that the tests' trainers load, before a test starts one.

The ops are JIT-compiled into TORCH_EXTENSIONS_DIR, which lies outside the checkout (one directory per checkout
path: the build records the venv's absolute paths), so a fresh clone at the same path finds them built and a load
takes seconds. Cold, each source file compiles against torch's headers: about 20 s of a core each.

- `python -m tests.harness.deepspeed_ops` (`make test` runs it before pytest): the ops every DeepSpeed trainer
  loads, the shared-memory collectives of deepspeed.init_distributed and pinned host memory. Built on a quiet
  machine, a launch's time is its training and nothing else, whether the cache was warm or not.
- async_io (ZeRO-Infinity's offload to "nvme"), a dozen files: two minutes of both cores, for the one module that
  loads it (test_backend_deepspeed_nvme, run last). The suite's controller builds it in the background at the
  lowest CPU priority from the session's start (`BackgroundBuild`), in the cores' idle moments, and that module
  waits for it (`build`): before, it was built first, in minutes that nothing else used.

A second build of an op waits for the first (torch's lock file in the op's build directory), so `build` run beside
the background one waits for it instead of compiling the same files again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from worker.launcher import signal_on_parent_death, stop_tree

EVERY_TRAINER = ("ShareMemCommBuilder", "PinMemoryBuilder")
NVME = "AsyncIOBuilder"
ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> None:
    from deepspeed.accelerator import get_accelerator

    where = os.environ.get("TORCH_EXTENSIONS_DIR", "torch's default directory")
    started = time.monotonic()
    builder = get_accelerator().create_op_builder(name)
    if not builder.is_compatible():
        needs = " (async_io needs libaio: apt-get install libaio-dev)" if builder.NAME == "async_io" else ""
        sys.exit(f"deepspeed op {builder.NAME} cannot be built on this machine{needs}")
    _clear_a_dead_builds_lock(builder.NAME)
    builder.load(verbose=False)
    print(f"deepspeed op {builder.NAME}: ready in {time.monotonic() - started:.0f} s ({where})", flush=True)


def _clear_a_dead_builds_lock(op: str) -> None:
    """torch's lock file of a build that was killed outright (SIGKILL, a lost machine), which every later load would
    wait on forever: removed when no other process of this module is alive to hold it."""
    lock = Path(os.environ.get("TORCH_EXTENSIONS_DIR", "/nonexistent")) / op / "lock"
    if not lock.exists():
        return
    me = str(os.getpid())
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if cmdline.parent.name != me and b"tests.harness.deepspeed_ops" in cmdline.read_bytes():
                return
    lock.unlink(missing_ok=True)
    print(f"deepspeed op {op}: removed the lock file of a build that was killed ({lock})", flush=True)


def build(name: str, timeout_s: float = 900) -> None:
    """Build (or load, or wait for the background build of) one op in a process of its own; raise naming the op
    and its output if that fails. Its own process: a test process that imported deepspeed would log its setup. Its
    own process group, stopped whole if the wait ends early (a Ctrl-C, the timeout): ninja's compilers with it."""
    command = [sys.executable, "-m", "tests.harness.deepspeed_ops", name]
    process = subprocess.Popen(
        command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, preexec_fn=signal_on_parent_death(signal.SIGTERM),
    )  # fmt: skip
    try:
        with BackgroundBuild.raised_priority():
            output, _ = process.communicate(timeout=timeout_s)
    except BaseException:
        stop_tree(process.pid, grace_s=10, reap=process.poll)
        raise
    assert process.returncode == 0, f"deepspeed op {name} did not build (exit {process.returncode}):\n{output[-5000:]}"


class BackgroundBuild:
    """One op built at nice 19 in a process group of its own, stopped with the session that started it."""

    NICE = 19
    _pgid: int | None = None  # the running build's, for raised_priority() in the same process

    def __init__(self, name: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.deepspeed_ops", name],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # one group: the compiler processes under ninja stop with it
            preexec_fn=signal_on_parent_death(signal.SIGTERM),
        )
        _set_priority(self.process.pid, self.NICE)
        os.environ["TEST_DEEPSPEED_BUILD_PGID"] = str(self.process.pid)  # for the test workers started after this

    def stop(self) -> None:
        """SIGTERM the group: the build process raises SystemExit on it (see main) and so releases torch's lock file,
        which a killed build would leave behind for every later load to wait on."""
        if self.process.poll() is None:
            stop_tree(self.process.pid, grace_s=10, reap=self.process.poll)
        os.environ.pop("TEST_DEEPSPEED_BUILD_PGID", None)

    @staticmethod
    @contextlib.contextmanager
    def raised_priority():
        """While a test waits for the background build, it builds at the tests' priority: nothing else is to be done
        first. (Lowering a niceness needs root, as in CI; elsewhere it goes on at 19.)"""
        pgid = os.environ.get("TEST_DEEPSPEED_BUILD_PGID")
        if pgid:
            _set_priority(int(pgid), 0)
        yield


def _set_priority(session: int, nice: int) -> None:
    """The niceness of a session's processes, and of its autogroup: where the kernel groups each session's processes
    for scheduling (sched_autogroup_enabled, Linux's default), a niceness only orders the processes of one session,
    and a nice-19 build in a session of its own took its full share beside the tests' trainers (each a session of
    its own too): measured, the suite's first minutes ran half as fast."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PGRP, session, nice)
    with contextlib.suppress(OSError):
        Path(f"/proc/{session}/autogroup").write_text(str(nice))


def _exit_on_sigterm(signum, frame) -> None:
    # The whole group, the compilers under ninja too (a SIGTERM from PR_SET_PDEATHSIG reaches this process alone);
    # then out through torch's `finally`, which releases its lock.
    # Only a group this process leads (BackgroundBuild's): run by make or by `build`, the group is theirs.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.getpgrp() == os.getpid():
        with contextlib.suppress(OSError):
            os.killpg(os.getpgrp(), signal.SIGTERM)
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # torch releases its build lock on the way out
    for name in argv or EVERY_TRAINER:
        _load(name)


if __name__ == "__main__":
    main(sys.argv[1:])
