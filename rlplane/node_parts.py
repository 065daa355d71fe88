"""A sharded checkpoint on nodes that do not share the run directory (a remote artifact root: each node's worker keeps
its own copy of the run directory, rlplane.layout.RUN_DIR_PER_NODE_ENV).

Every rank writes its shards into its node's copy of the staging directory, as on a shared one. Then the first rank
of each other node sends rank zero its node's listing (each file's name, size and sha256: a few hundred bytes over
the process group, as a tensor of bytes, never a pickled object) and moves its node's files to the node's part
directory (rlplane.layout.NODE_PART_SUFFIX), which its worker uploads to the checkpoint's directory on the root.
Rank zero's manifest lists every node's files; node 0's worker uploads the manifest last, once every other node's
files are there. So each node's shards go up from that node, in parallel, and no node holds another's.

Resuming needs no more: every node's worker downloads the checkpoint it resumes from.

Our trainer (trainer_core/recipes/checkpointing.py) and the SDK (a script's `run.log_checkpoint(..., sharded=True)`)
both hand their parts over with this. It uses the process group the caller's process made, so torch is imported when
it is called, not with this module: the SDK stays torch-free for scripts that never call it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlplane.layout import CHECKPOINTS, NODE_PART_SUFFIX, RUN_DIR_ENV, RUN_DIR_PER_NODE_ENV, beside_step
from rlplane.manifest import fsync_path, link_tree, listing

if TYPE_CHECKING:
    import torch


def per_node() -> bool:
    """Whether this process's nodes each have their own copy of the run directory (and a process group joins them)."""
    if os.environ.get(RUN_DIR_PER_NODE_ENV) != "1":
        return False
    import torch.distributed as dist

    return dist.is_initialized() and dist.get_world_size() > 1


def hand_over_parts(files: Path, step: int, device: torch.device, *, link: bool = False) -> dict[str, dict[str, Any]]:
    """Every rank calls this once its shards are in `files`. Rank zero gets the other nodes' listings (what its
    manifest lists beside its own files); each other node's first rank hands its node's files to the part directory
    its worker uploads: `files`, our staging directory beside the checkpoints, moved there; with `link`, a script's
    own directory (the SDK's), linked there file by file (copied where links cannot be made) and left as it was.
    Others get {}."""
    import torch
    import torch.distributed as dist

    sender = int(os.environ.get("GROUP_RANK", "0")) != 0 and int(os.environ.get("LOCAL_RANK", "0")) == 0
    flags = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(dist.get_world_size())]
    dist.all_gather(flags, torch.tensor([1 if sender else 0], dtype=torch.int64, device=device))
    senders = [rank for rank, flag in enumerate(flags) if int(flag.item())]
    elsewhere: dict[str, dict[str, Any]] = {}
    if dist.get_rank() == 0:
        for source in senders:  # one node after another, in rank order
            for name, entry in _receive(source, device).items():
                if Path(name).is_absolute() or ".." in Path(name).parts:
                    raise ValueError(f"rank {source} listed a checkpoint file outside the checkpoint: {name!r}")
                if elsewhere.get(name, entry) != entry:
                    raise ValueError(f"{name} of the checkpoint was written on two nodes, with different contents")
                elsewhere[name] = entry
    elif sender:
        checkpoints = Path(os.environ[RUN_DIR_ENV]) / CHECKPOINTS if link else files.parent
        part = checkpoints / beside_step(step, NODE_PART_SUFFIX)
        shutil.rmtree(part, ignore_errors=True)  # an earlier attempt's, never uploaded: this one replaces it
        if link:
            staging = part.with_name(part.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            if files.exists():
                link_tree(files, staging)
            else:  # this node saved nothing of it
                staging.mkdir(parents=True)
            files = staging
        _send(json.dumps(listing(files)).encode(), device)
        files.rename(part)
        fsync_path(checkpoints)
    return elsewhere


def collective_device() -> torch.device:
    """Where this process's process group takes tensors: its GPU under NCCL, else the CPU."""
    import torch
    import torch.distributed as dist

    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def _send(data: bytes, device: torch.device) -> None:
    import torch
    import torch.distributed as dist

    dist.send(torch.tensor([len(data)], dtype=torch.int64, device=device), dst=0)
    dist.send(torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device), dst=0)


def _receive(source: int, device: torch.device) -> dict[str, dict[str, Any]]:
    import torch
    import torch.distributed as dist

    length = torch.zeros(1, dtype=torch.int64, device=device)
    dist.recv(length, src=source)
    data = torch.empty(int(length.item()), dtype=torch.uint8, device=device)
    dist.recv(data, src=source)
    return json.loads(bytes(data.cpu().numpy()))
