"""trainer_core/backends/megatron/cpu_shim.py: patches only without CUDA, once, and only the calls it names.

Each case runs in a fresh interpreter: the shim patches torch.cuda process-wide, and the other tests
in this process must see torch as it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # CUDA absent even on a GPU node
    command = [sys.executable, "-c", textwrap.dedent(code)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


def test_without_cuda_the_shim_names_the_cpu_and_is_idempotent() -> None:
    run_python(
        """
        import pytest, torch
        from trainer_core.backends.megatron.cpu_shim import apply_cpu_shim, cpu_shim_applied
        assert not torch.cuda.is_available()
        with pytest.raises((AssertionError, RuntimeError)):
            torch.cuda.current_device()
        assert apply_cpu_shim() and cpu_shim_applied()
        patched = torch.cuda.current_device
        assert apply_cpu_shim() and torch.cuda.current_device is patched  # the second call changes nothing
        assert torch.zeros(2, device=torch.cuda.current_device()).device.type == "cpu"
        torch.cuda.synchronize()
        """
    )


def test_only_the_pipeline_schedules_count_on_the_cpu_and_cuda_moves_only_while_a_model_is_built() -> None:
    """The schedules module's `torch.zeros(device="cuda")` lands on the CPU; torch's own still refuses; Tensor.cuda()
    is the identity inside tensors_stay_on_cpu() only."""
    run_python(
        """
        import pytest, torch
        from megatron.core.pipeline_parallel import schedules
        from trainer_core.backends.megatron.cpu_shim import apply_cpu_shim, tensors_stay_on_cpu
        apply_cpu_shim()
        assert schedules.torch.zeros([], dtype=torch.int, device="cuda").device.type == "cpu"
        assert schedules.torch.cat is torch.cat  # everything else is torch's own
        with pytest.raises((AssertionError, RuntimeError)):
            torch.zeros(1, device="cuda")
        tensor = torch.ones(2)
        with tensors_stay_on_cpu():
            assert tensor.cuda() is tensor
        with pytest.raises((AssertionError, RuntimeError)):
            tensor.cuda()
        """
    )


def test_with_cuda_the_shim_changes_nothing() -> None:
    run_python(
        """
        import torch
        torch.cuda.is_available = lambda: True  # as on a GPU node
        original = (torch.cuda.current_device, torch.cuda.synchronize)
        from trainer_core.backends.megatron.cpu_shim import apply_cpu_shim, cpu_shim_applied
        assert apply_cpu_shim() is False and not cpu_shim_applied()
        assert (torch.cuda.current_device, torch.cuda.synchronize) == original
        from megatron.core.pipeline_parallel import schedules
        assert schedules.torch is torch
        """
    )
