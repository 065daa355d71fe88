"""A sharded checkpoint on nodes that do not share the run directory (a remote artifact root: each node's worker keeps
its own copy of the run directory, rlplane.layout.RUN_DIR_PER_NODE_ENV).

Every rank writes its shards into its node's copy of the staging directory, as on a shared one; then the first rank of
each other node sends its node's files to rank zero, over the process group (gloo on CPU, NCCL on GPU: chunks of
bytes as tensors, never pickled objects), and removes them. Rank zero then holds the whole checkpoint: its manifest,
its rename and its upload by node 0's worker are those of a one-node run. The cost is the shards' bytes over the
network to node 0, as the gathering backends pay for the full state; a shared directory avoids it.

Resuming needs no more: every node's worker downloads the checkpoint it resumes from.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist

from rlplane.layout import RUN_DIR_PER_NODE_ENV
from trainer_core.checkpoint.files import fsync_path

CHUNK_BYTES = 64 << 20  # per tensor sent: bounds the device memory a transfer holds


def per_node() -> bool:
    """Whether this trainer's nodes each have their own copy of the run directory."""
    return os.environ.get(RUN_DIR_PER_NODE_ENV) == "1" and dist.is_initialized() and dist.get_world_size() > 1


def bring_to_rank_zero(staged: Path, device: torch.device) -> None:
    """Every rank calls this once its shards are in `staged`: the other nodes' files reach rank zero's `staged`."""
    sender = int(os.environ.get("GROUP_RANK", "0")) != 0 and int(os.environ.get("LOCAL_RANK", "0")) == 0
    flags = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(flags, torch.tensor([1 if sender else 0], dtype=torch.int64, device=device))
    senders = [rank for rank, flag in enumerate(flags) if int(flag.item())]
    if dist.get_rank() == 0:
        for source in senders:  # one node after another, in rank order
            _receive(staged, source, device)
    elif sender:
        _send(staged, device)
    dist.barrier()
    if sender:
        shutil.rmtree(staged, ignore_errors=True)  # the node's copy: the checkpoint is rank zero's now


def _send(staged: Path, device: torch.device) -> None:
    files = sorted(path for path in staged.rglob("*") if path.is_file())
    header = json.dumps([[path.relative_to(staged).as_posix(), path.stat().st_size] for path in files]).encode()
    dist.send(torch.tensor([len(header)], dtype=torch.int64, device=device), dst=0)
    dist.send(_tensor(header, device), dst=0)
    for path in files:
        with path.open("rb") as file:
            while chunk := file.read(CHUNK_BYTES):
                dist.send(_tensor(chunk, device), dst=0)


def _receive(staged: Path, source: int, device: torch.device) -> None:
    length = torch.zeros(1, dtype=torch.int64, device=device)
    dist.recv(length, src=source)
    header = torch.empty(int(length.item()), dtype=torch.uint8, device=device)
    dist.recv(header, src=source)
    for name, size in json.loads(bytes(header.cpu().numpy())):
        target = staged / name
        if not target.resolve().is_relative_to(staged.resolve()):
            raise ValueError(f"rank {source} sent a checkpoint file outside the staging directory: {name!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("wb") as file:
            left = int(size)
            while left:
                chunk = torch.empty(min(left, CHUNK_BYTES), dtype=torch.uint8, device=device)
                dist.recv(chunk, src=source)
                file.write(chunk.cpu().numpy().tobytes())
                left -= chunk.numel()
        fsync_path(target)


def _tensor(data: bytes, device: torch.device) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
