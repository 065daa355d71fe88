"""Models trained once per session that several modules start from (conftest.py makes these fixtures)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Tiny models step fastest on one thread, and do not slow to a crawl beside other processes."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output directory of tests.harness.training.SFT_SPEC: the SFT test checks it, and the reward-model, DPO
    and GRPO tests start from it, as the SFT -> RM -> DPO chain does."""
    from tests.harness.training import SFT_SPEC, run_spec

    tmp = tmp_path_factory.mktemp("sft-run")
    with one_torch_thread():
        run_spec(tmp / "sft.yaml", SFT_SPEC, "--out", str(tmp / "out"))
    return tmp / "out"


@pytest.fixture(scope="session")
def walker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """specs.WALKER_SPEC's final model: where the PPO and GRPO tests on every backend start."""
    from tests.harness.specs import WALKER_SPEC
    from tests.harness.training import run_spec

    tmp = tmp_path_factory.mktemp("walker")
    with one_torch_thread():
        run_spec(tmp / "sft.yaml", WALKER_SPEC, "--out", str(tmp / "out"))
    return tmp / "out" / "final"
