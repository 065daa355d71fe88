"""Training backends: one interface (`Backend`), one file per backend; `make_backend` picks one from the spec.

Imports torch; the torch-free parts of trainer_core never import this package.
"""

from __future__ import annotations

from rlplane.spec.sections import BackendSpec, TrainSpec
from trainer_core.backends.base import Backend, BackendError, MicroStep, ReduceOp
from trainer_core.backends.batching import (
    BatchSplitError,
    accumulation_steps,
    local_batch_range,
    micro_batch_ranges,
    rank_chunks,
)
from trainer_core.backends.dist import DistEnv, default_device, init_process_group
from trainer_core.backends.torch_backend import TorchBackend, seed_rank


def make_backend(backend: BackendSpec, train: TrainSpec, env: DistEnv | None = None) -> Backend:
    """The backend for spec.backend. DeepSpeed, FSDP2 and Megatron are imported only when chosen."""
    if backend.kind == "torch":
        return TorchBackend(backend, train, env)
    if backend.kind == "deepspeed":
        from trainer_core.backends.deepspeed_backend import DeepSpeedBackend

        return DeepSpeedBackend(backend, train, env)
    if backend.kind == "fsdp2":
        from trainer_core.backends.fsdp2_backend import Fsdp2Backend

        return Fsdp2Backend(backend, train, env)
    from trainer_core.backends.megatron.backend import MegatronBackend

    return MegatronBackend(backend, train, env)


__all__ = [
    "Backend",
    "BackendError",
    "BatchSplitError",
    "DistEnv",
    "MicroStep",
    "ReduceOp",
    "TorchBackend",
    "accumulation_steps",
    "default_device",
    "init_process_group",
    "local_batch_range",
    "rank_chunks",
    "make_backend",
    "micro_batch_ranges",
    "seed_rank",
]
