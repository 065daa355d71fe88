"""Lets megatron-core 0.16 build and run a GPTModel on a machine without CUDA (tests, CI, laptops).

megatron-core assumes a GPU in a few places that have nothing to do with the maths. This module is
the only place in trainer_core/megatron that patches anything, and it patches nothing when CUDA is
present. What it covers, and why:

- `torch.cuda.current_device()` raises without CUDA, yet megatron-core passes it as `device=` when it
  allocates (tensor_parallel/layers.py: the parameters of VocabParallelEmbedding and the linear
  layers, the gradient buffers of LinearWithGradAccumulationAndAsyncCommunication) and in
  RotaryEmbedding, which moves `inv_freq` there on its first forward. Here it names the CPU.
- `torch.cuda.synchronize()` raises without CUDA; megatron-core calls it in its timers
  (timers.py), when it changes process-group timeouts (parallel_state.py), when DDP offloads
  its gradient buffers (distributed/distributed_data_parallel.py) and after each pipeline p2p
  exchange (pipeline_parallel/p2p_communication.py). A forward pass does not reach it, training
  does. Here it does nothing: CPU work is finished when the call returns.
- the pipeline schedules (pipeline_parallel/schedules.py) count tokens in
  `torch.zeros([], device="cuda")`. The schedules module alone sees a `torch` whose `zeros` puts
  a "cuda" tensor on the CPU (`_CpuZerosTorch`); nothing else of torch changes for it or anyone.

- under pipeline parallelism with tied embeddings, building a GPTModel moves the last stage's copy
  of the embedding to CUDA (`weight.data.cuda()`) before the all-reduce that fills it from the first
  stage. `tensors_stay_on_cpu()`, around the constructor only, makes `Tensor.cuda()` return the
  tensor itself while it lasts.

Not covered here, because the caller controls them (see trainer_core/backends/megatron/model.py):
- the default causal mask is created on "cuda": pass an explicit `attention_mask`;
- the CUDA RNG tracker forks CUDA generator states: initialise it with `inference_rng_tracker=True`
  (its fork is a no-op) and set every dropout to 0;
- the fused kernels (softmax, bias-gelu, rope, gradient-accumulation fusion) are off by default
  and must stay off.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch

_APPLIED = False


def _cpu_device() -> torch.device:
    return torch.device("cpu")


def _synchronize(device: object = None) -> None:
    del device  # CPU work has finished by the time the call returns


class _CpuZerosTorch(types.ModuleType):
    """torch, as megatron's schedules module sees it on a machine without CUDA: `zeros(..., device="cuda")` on the CPU."""

    def __init__(self) -> None:
        super().__init__("torch")

    def __getattr__(self, name: str) -> object:
        return getattr(torch, name)

    @staticmethod
    def zeros(*args: object, **kwargs: object) -> torch.Tensor:
        if kwargs.get("device") == "cuda":
            kwargs["device"] = "cpu"
        return torch.zeros(*args, **kwargs)  # type: ignore[call-overload]


def apply_cpu_shim() -> bool:
    """Patch the CUDA calls above when CUDA is absent; True when the shim is (now) in place.

    Idempotent: the second and later calls change nothing. With CUDA available it returns False
    and megatron-core runs unchanged.
    """
    global _APPLIED
    if torch.cuda.is_available():
        return False
    if not _APPLIED:
        from megatron.core.pipeline_parallel import schedules

        torch.cuda.current_device = _cpu_device  # type: ignore[assignment]
        torch.cuda.synchronize = _synchronize  # type: ignore[assignment]
        schedules.torch = _CpuZerosTorch()  # type: ignore[attr-defined]
        _APPLIED = True
    return True


def cpu_shim_applied() -> bool:
    return _APPLIED


@contextlib.contextmanager
def tensors_stay_on_cpu() -> Iterator[None]:
    """While it lasts, and only without CUDA: `Tensor.cuda()` returns the tensor (see the module docstring)."""
    if torch.cuda.is_available():
        yield
        return
    original = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.cuda = original  # type: ignore[method-assign]
