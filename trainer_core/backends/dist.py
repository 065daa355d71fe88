"""Where this process sits in a torchrun launch, and the process group that joins the ranks."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistEnv:
    """torchrun's variables; without them, a single process of rank 0."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> DistEnv:
        environ = os.environ if environ is None else environ
        env = cls(
            rank=_int_var(environ, "RANK", 0),
            world_size=_int_var(environ, "WORLD_SIZE", 1),
            local_rank=_int_var(environ, "LOCAL_RANK", 0),
            master_addr=environ.get("MASTER_ADDR", cls.master_addr),
            master_port=_int_var(environ, "MASTER_PORT", cls.master_port),
        )
        if env.world_size < 1 or not 0 <= env.rank < env.world_size or env.local_rank < 0:
            raise ValueError(
                f"RANK={env.rank} WORLD_SIZE={env.world_size} LOCAL_RANK={env.local_rank} are inconsistent: "
                "need WORLD_SIZE >= 1 and 0 <= RANK < WORLD_SIZE; launch with torchrun or unset them."
            )
        return env

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def _int_var(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer; torchrun sets it to one.") from None


def default_device(env: DistEnv) -> torch.device:
    """cuda:LOCAL_RANK when CUDA is available, else the CPU."""
    return torch.device("cuda", env.local_rank) if torch.cuda.is_available() else torch.device("cpu")


def init_process_group(env: DistEnv, device: torch.device, *, one_process_group: bool = False) -> bool:
    """Join the ranks (nccl on CUDA, gloo on CPU) when there is more than one; True if this call created the group.

    `one_process_group`: a backend that needs a group even alone (FSDP2, DeepSpeed) gets a world of one held in
    this process's memory: no TCP store, so two one-process runs on a node never compete for MASTER_PORT's default
    (seen on a GPU machine: the second failed with EADDRINUSE)."""
    if dist.is_initialized():
        return False
    if not env.is_distributed:
        if one_process_group:
            dist.init_process_group(
                backend="nccl" if device.type == "cuda" else "gloo", store=dist.HashStore(), rank=0, world_size=1
            )
        return one_process_group
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # env:// reads MASTER_ADDR/MASTER_PORT and, under torchrun, reuses the agent's store on that port.
    dist.init_process_group(
        backend="nccl" if device.type == "cuda" else "gloo",
        init_method="env://",
        rank=env.rank,
        world_size=env.world_size,
    )
    # One line from every rank, so a run's logs say where each rank ran (on several nodes: which node's).
    print(
        f"rank {env.rank} of {env.world_size} joined on {socket.gethostname()} (local rank {env.local_rank}, {device})",
        flush=True,
    )
    return True
