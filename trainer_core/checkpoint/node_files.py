"""A sharded checkpoint on nodes that do not share the run directory (a remote artifact root: each node's worker keeps
its own copy of the run directory, rlplane.layout.RUN_DIR_PER_NODE_ENV).

Every rank writes its shards into its node's copy of the staging directory, as on a shared one. Then the first rank
of each other node sends rank zero its node's listing (each file's name, size and sha256: a few hundred bytes over
the process group, as a tensor of bytes, never a pickled object) and moves its node's files to the node's part
directory (rlplane.layout.NODE_PART_SUFFIX), which its worker uploads to the checkpoint's directory on the root.
Rank zero's manifest lists every node's files; node 0's worker uploads the manifest last, once every other node's
files are there. So each node's shards go up from that node, in parallel, and no node holds another's.

Resuming needs no more: every node's worker downloads the checkpoint it resumes from.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlplane.layout import NODE_PART_SUFFIX, RUN_DIR_PER_NODE_ENV, beside_step
from rlplane.manifest import listing
from trainer_core.checkpoint.files import fsync_path


def per_node() -> bool:
    """Whether this trainer's nodes each have their own copy of the run directory."""
    return os.environ.get(RUN_DIR_PER_NODE_ENV) == "1" and dist.is_initialized() and dist.get_world_size() > 1


def hand_over_parts(staged: Path, step: int, device: torch.device) -> dict[str, dict[str, Any]]:
    """Every rank calls this once its shards are in `staged`. Rank zero gets the other nodes' listings (what its
    manifest lists beside its own files); each other node's first rank moves its node's files to the part directory
    its worker uploads. Others get {}."""
    sender = int(os.environ.get("GROUP_RANK", "0")) != 0 and int(os.environ.get("LOCAL_RANK", "0")) == 0
    flags = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(flags, torch.tensor([1 if sender else 0], dtype=torch.int64, device=device))
    senders = [rank for rank, flag in enumerate(flags) if int(flag.item())]
    elsewhere: dict[str, dict[str, Any]] = {}
    if dist.get_rank() == 0:
        for source in senders:  # one node after another, in rank order
            for name, entry in _receive(source, device).items():
                if name in elsewhere or Path(name).is_absolute() or ".." in Path(name).parts:
                    raise ValueError(f"rank {source} listed a checkpoint file twice or outside the checkpoint: {name!r}")
                elsewhere[name] = entry
    elif sender:
        files = listing(staged)
        _send(json.dumps(files).encode(), device)
        part = staged.parent / beside_step(step, NODE_PART_SUFFIX)
        shutil.rmtree(part, ignore_errors=True)  # an earlier attempt's, never uploaded: this one replaces it
        staged.rename(part)
        fsync_path(staged.parent)
    return elsewhere


def _send(data: bytes, device: torch.device) -> None:
    dist.send(torch.tensor([len(data)], dtype=torch.int64, device=device), dst=0)
    dist.send(torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device), dst=0)


def _receive(source: int, device: torch.device) -> dict[str, dict[str, Any]]:
    length = torch.zeros(1, dtype=torch.int64, device=device)
    dist.recv(length, src=source)
    data = torch.empty(int(length.item()), dtype=torch.uint8, device=device)
    dist.recv(data, src=source)
    return json.loads(bytes(data.cpu().numpy()))
