"""Load DeepSpeed's CPU ops that the tests' trainers use, before any test starts one.

`make test` runs this first (`python -m tests.harness.deepspeed_ops`). Its venv's DeepSpeed has them compiled in
(scripts/deepspeed-wheel.sh: a wheel built once per machine), so this takes seconds and checks that they load. A venv
whose DeepSpeed lacks them (installed otherwise) JIT-compiles them here into TORCH_EXTENSIONS_DIR, which lies outside
the checkout (one directory per checkout path: the build records the venv's absolute paths). Cold, async_io alone is
a dozen C++ files against torch's headers: minutes on 2 cores, and longer than a trainer launch's time limit when the
other test worker shares the cores. Built here, on a quiet machine, a launch's time is its training and nothing else.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

# The ops the trainers in tests/ load on the CPU accelerator: the shared-memory collectives every
# deepspeed.init_distributed builds, pinned host memory for offload to "cpu", and libaio for offload to "nvme".
OPS = ("ShareMemCommBuilder", "PinMemoryBuilder", "AsyncIOBuilder")


def main() -> None:
    from tests.harness.launch import OPS_ENV

    os.environ.update(OPS_ENV)  # where the tests' trainers look and the compiler they expect, make test or not
    from deepspeed.accelerator import get_accelerator

    where = os.environ["TORCH_EXTENSIONS_DIR"]
    for name in OPS:
        started = time.monotonic()
        builder = get_accelerator().create_op_builder(name)
        if not builder.is_compatible():
            needs = " (async_io needs libaio: apt-get install libaio-dev)" if builder.NAME == "async_io" else ""
            sys.exit(f"deepspeed op {builder.NAME} cannot be built on this machine{needs}")
        _clear_a_dead_builds_lock(builder.NAME)
        builder.load(verbose=False)
        print(f"deepspeed op {builder.NAME}: ready in {time.monotonic() - started:.0f} s ({where})", flush=True)


def _clear_a_dead_builds_lock(op: str) -> None:
    """torch's lock file of a build that was killed outright (SIGKILL, a lost machine), on which every later load
    would wait forever: removed when no other process of this module is alive to hold it."""
    lock = Path(os.environ.get("TORCH_EXTENSIONS_DIR", "/nonexistent")) / op / "lock"
    if not lock.exists():
        return
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        # a Python running this module (not a shell or `timeout` whose command line names it)
        python = os.path.basename(argv[0]).startswith(b"python")
        if python and b"tests.harness.deepspeed_ops" in argv and cmdline.parent.name != str(os.getpid()):
            return
    lock.unlink(missing_ok=True)
    print(f"deepspeed op {op}: removed the lock file of a build that was killed ({lock})", flush=True)


if __name__ == "__main__":
    main()
