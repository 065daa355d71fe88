"""Build DeepSpeed's CPU ops that the tests' trainers load, before a trainer needs them.

`make test` runs `python -m tests.harness.deepspeed_ops` first: it builds the ops every DeepSpeed launch loads
(shared-memory collectives, pinned host memory) and checks that async_io (offload to "nvme", compiled against
libaio) can be built here. async_io itself, a dozen C++ files against torch's headers and minutes of both cores
cold, is needed by one test only: `make test` builds it beside the suite at the lowest CPU priority
(`--only async_io`), on cores the tests leave idle, and that test waits for it (`ensure`), running last in its
group. The ops are JIT-compiled into TORCH_EXTENSIONS_DIR, which lies outside the checkout (one directory per
checkout path: the build records the venv's absolute paths), so a fresh clone at the same path finds them built
and all of this takes seconds. Built before a launch, a launch's time is its training, whether the cache was warm
or not.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# The ops the trainers in tests/ load on the CPU accelerator: the shared-memory collectives every
# deepspeed.init_distributed builds, pinned host memory for offload to "cpu", and libaio for offload to "nvme".
UP_FRONT = ("ShareMemCommBuilder", "PinMemoryBuilder")
BESIDE = ("AsyncIOBuilder",)
NAMES = {"async_io": "AsyncIOBuilder", "deepspeed_shm_comm": "ShareMemCommBuilder", "pin_memory": "PinMemoryBuilder"}


def _builder(name: str):
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder(name)
    if not builder.is_compatible():
        needs = " (async_io needs libaio: apt-get install libaio-dev)" if builder.NAME == "async_io" else ""
        sys.exit(f"deepspeed op {builder.NAME} cannot be built on this machine{needs}")
    return builder


def build(name: str) -> None:
    started = time.monotonic()
    builder = _builder(name)
    builder.load(verbose=False)
    where = os.environ.get("TORCH_EXTENSIONS_DIR", "torch's default directory")
    print(f"deepspeed op {builder.NAME}: ready in {time.monotonic() - started:.0f} s ({where})", flush=True)


def ensure(name: str) -> None:
    """The op built and loadable, for a test about to launch trainers that load it: when `make test`'s build of it
    is still running this waits for it (torch's build lock), else builds it here. A build that was stopped halfway
    (its lock gone, no library) is built again."""
    try:
        _builder(name).load(verbose=False)
    except ImportError:
        _builder(name).load(verbose=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(NAMES), action="append", help="build only this op (repeatable)")
    args = parser.parse_args(argv)
    if args.only:
        for name in args.only:
            build(NAMES[name])
        return
    for name in UP_FRONT:
        build(name)
    for name in BESIDE:
        _builder(name)  # only checked: a machine without libaio says so now, not in the one test that needs it


if __name__ == "__main__":
    main()
