"""Build DeepSpeed's CPU ops that the tests' trainers load, before any test starts one.

`make test` runs this first (`python -m tests.harness.deepspeed_ops`). The ops are JIT-compiled into
TORCH_EXTENSIONS_DIR, which lies outside the checkout (one directory per checkout path: the build records the
venv's absolute paths), so a fresh clone at the same path finds them built and this takes seconds. Cold, async_io
alone is a dozen C++ files against torch's headers: minutes on 2 cores, and longer than a trainer launch's time
limit when the other test worker shares the cores. Built here, on a quiet machine, a launch's time is its training
and nothing else, whether the cache was warm or not.
"""

from __future__ import annotations

import os
import sys
import time

# The ops the trainers in tests/ load on the CPU accelerator: the shared-memory collectives every
# deepspeed.init_distributed builds, pinned host memory for offload to "cpu", and libaio for offload to "nvme".
OPS = ("ShareMemCommBuilder", "PinMemoryBuilder", "AsyncIOBuilder")


def main() -> None:
    from deepspeed.accelerator import get_accelerator

    where = os.environ.get("TORCH_EXTENSIONS_DIR", "torch's default directory")
    for name in OPS:
        started = time.monotonic()
        builder = get_accelerator().create_op_builder(name)
        if not builder.is_compatible():
            needs = " (async_io needs libaio: apt-get install libaio-dev)" if builder.NAME == "async_io" else ""
            sys.exit(f"deepspeed op {builder.NAME} cannot be built on this machine{needs}")
        builder.load(verbose=False)
        print(f"deepspeed op {builder.NAME}: ready in {time.monotonic() - started:.0f} s ({where})", flush=True)


if __name__ == "__main__":
    main()
