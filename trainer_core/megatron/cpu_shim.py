"""Lets megatron-core 0.16 build and run a GPTModel on a machine without CUDA (tests, CI, laptops).

megatron-core assumes a GPU in a few places that have nothing to do with the maths. This module is
the only place in trainer_core/megatron that patches anything, and it patches nothing when CUDA is
present. What it covers, and why:

- `torch.cuda.current_device()` raises without CUDA, yet megatron-core passes it as `device=` when it
  allocates (tensor_parallel/layers.py: the parameters of VocabParallelEmbedding and the linear
  layers, the gradient buffers of LinearWithGradAccumulationAndAsyncCommunication) and in
  RotaryEmbedding, which moves `inv_freq` there on its first forward. Here it names the CPU.
- `torch.cuda.synchronize()` raises without CUDA; megatron-core calls it in its timers
  (timers.py), when it changes process-group timeouts (parallel_state.py) and when DDP offloads
  its gradient buffers (distributed/distributed_data_parallel.py). A forward pass does not reach
  it, training does. Here it does nothing: CPU work is finished when the call returns.

Not covered here, because the caller controls them (see trainer_core/megatron/model.py):
- the default causal mask is created on "cuda": pass an explicit `attention_mask`;
- the CUDA RNG tracker forks CUDA generator states: initialise it with `inference_rng_tracker=True`
  (its fork is a no-op) and set every dropout to 0;
- the fused kernels (softmax, bias-gelu, rope, gradient-accumulation fusion) are off by default
  and must stay off.
"""

from __future__ import annotations

import torch

_APPLIED = False


def _cpu_device() -> torch.device:
    return torch.device("cpu")


def _synchronize(device: object = None) -> None:
    del device  # CPU work has finished by the time the call returns


def apply_cpu_shim() -> bool:
    """Patch the CUDA calls above when CUDA is absent; True when the shim is (now) in place.

    Idempotent: the second and later calls change nothing. With CUDA available it returns False
    and megatron-core runs unchanged.
    """
    global _APPLIED
    if torch.cuda.is_available():
        return False
    if not _APPLIED:
        torch.cuda.current_device = _cpu_device  # type: ignore[assignment]
        torch.cuda.synchronize = _synchronize  # type: ignore[assignment]
        _APPLIED = True
    return True


def cpu_shim_applied() -> bool:
    return _APPLIED
