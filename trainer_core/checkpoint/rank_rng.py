"""Every data-parallel rank's random generators in a checkpoint, so a resumed multi-process run samples
what the uninterrupted one would have.

Ranks are seeded apart (train.seed + rank) and draw different rollouts; a checkpoint that kept only
rank zero's generators would, on resume, give every rank rank zero's and make them sample alike.
So each rank's generators travel as tensors (same names and shapes on every rank: gathered by
tensor collectives, never pickled) and rank zero writes them, keyed by data-parallel rank, to
`rng-ranks.safetensors` beside rank zero's own `rng.json` / `rng.safetensors` (state.py), which
single-process runs and other readers keep using. Ranks that hold one model replica together
(megatron's tensor-parallel group) share a data-parallel rank and identical generators.

A resume with the same data-parallel size restores each rank's own; with another size (or from a
checkpoint without the file) every rank takes rank zero's, and ranks past zero are re-seeded from it
and their rank, so they still draw apart (deterministically, though not as any earlier run did).
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from trainer_core.checkpoint import state
from trainer_core.checkpoint.files import read_tensors, write_tensors

try:
    import numpy as np
except ImportError:  # numpy is optional; without it there is no numpy RNG to save
    np = None

RANK_RNG = "rng-ranks.safetensors"


def rng_tensors() -> dict[str, torch.Tensor]:
    """This process's generators as tensors only: torch CPU (and CUDA), Python's and numpy's."""
    tensors, _ = state.capture_rng()
    version, words, gauss = random.getstate()
    tensors["python.words"] = torch.tensor(words, dtype=torch.int64)
    tensors["python.meta"] = torch.tensor([version, gauss is not None], dtype=torch.int64)
    tensors["python.gauss"] = torch.tensor([gauss or 0.0], dtype=torch.float64)
    if np is not None:
        numpy_state = np.random.get_state(legacy=False)
        tensors["numpy.key"] = torch.from_numpy(numpy_state["state"]["key"].astype(np.int64))
        tensors["numpy.meta"] = torch.tensor([numpy_state["state"]["pos"], numpy_state["has_gauss"]], dtype=torch.int64)
        tensors["numpy.gauss"] = torch.tensor([numpy_state["gauss"]], dtype=torch.float64)
    return tensors


def restore_rng_tensors(tensors: dict[str, torch.Tensor]) -> None:
    """The inverse of `rng_tensors`; CUDA states only for devices present here."""
    torch.set_rng_state(tensors["torch.cpu"])
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            if f"torch.cuda.{index}" in tensors:
                torch.cuda.set_rng_state(tensors[f"torch.cuda.{index}"], device=index)
    version, has_gauss = (int(v) for v in tensors["python.meta"])
    gauss = float(tensors["python.gauss"][0]) if has_gauss else None
    random.setstate((version, tuple(int(w) for w in tensors["python.words"]), gauss))
    if np is not None and "numpy.key" in tensors:
        pos, numpy_has_gauss = (int(v) for v in tensors["numpy.meta"])
        np.random.set_state(
            {
                "bit_generator": "MT19937",
                "state": {"key": tensors["numpy.key"].numpy().astype(np.uint32), "pos": pos},
                "has_gauss": numpy_has_gauss,
                "gauss": float(tensors["numpy.gauss"][0]),
            }
        )


def save_rank_rngs(root: Path, by_data_rank: dict[int, dict[str, torch.Tensor]]) -> None:
    """Rank zero: every data-parallel rank's `rng_tensors()` into `root/rng-ranks.safetensors` (none for one rank)."""
    if len(by_data_rank) < 2:
        return
    write_tensors(
        Path(root) / RANK_RNG,
        {f"{rank}/{name}": tensor.contiguous() for rank, tensors in by_data_rank.items() for name, tensor in tensors.items()},
    )


def saved_rank_rngs(root: Path) -> dict[int, dict[str, torch.Tensor]]:
    """What `save_rank_rngs` wrote, by data-parallel rank; empty where the checkpoint has none."""
    out: dict[int, dict[str, torch.Tensor]] = {}
    for key, tensor in read_tensors(Path(root) / RANK_RNG).items():
        rank, name = key.split("/", 1)
        out.setdefault(int(rank), {})[name] = tensor
    return out


def restore_rank_rng(root: Path, data_rank: int, data_world_size: int) -> None:
    """Every rank on resume: its own generators where the checkpoint has the same data-parallel size, else rank
    zero's, re-seeded apart past rank zero."""
    saved = saved_rank_rngs(root)
    if data_world_size > 1 and sorted(saved) == list(range(data_world_size)):
        restore_rng_tensors(saved[data_rank])
        return
    state.load_rng(Path(root))
    if data_rank > 0:
        seed = int(torch.randint(0, 2**62, (1,)).item()) + data_rank
        random.seed(seed)
        torch.manual_seed(seed)
        if np is not None:
            np.random.seed(seed % 2**32)
