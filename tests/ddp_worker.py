"""Trains tiny-gpt2 a few steps under torchrun, each rank on its share of a fixed global batch.

    python -m torch.distributed.run --nproc_per_node 2 tests/ddp_worker.py OUT.json

Rank 0 writes OUT.json ({"checksum", "update_checksum", "update_norm", "losses", "grad_norms"});
every other rank writes OUT.json.rank<N>.
`train` is also what tests/test_backends.py runs in one process for the reference.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import torch

from rlplane.spec.sections import TorchBackend as TorchBackendSpec
from rlplane.spec.sections import TrainSpec
from trainer_core.backends import Backend, local_batch_range, make_backend, micro_batch_ranges
from trainer_core.models import build_builtin

TRAIN = {"steps": 3, "batch_size": 4, "micro_batch_size": 1, "max_grad_norm": 1.0, "seed": 0}


def fixed_batch(vocab_size: int, batch_size: int, length: int = 12) -> torch.Tensor:
    return torch.randint(0, vocab_size, (batch_size, length), generator=torch.Generator().manual_seed(1234))


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().double().flatten().cpu() for p in model.parameters()])


def checksum(params: torch.Tensor) -> float:
    # Weighted by position, so swapped or sign-flipped entries change it too.
    return float((params * torch.linspace(1, 2, params.numel(), dtype=torch.float64)).sum())


def train(backend: Backend, train_spec: TrainSpec) -> dict:
    model, _ = build_builtin("tiny-gpt2", kind="causal", seed=train_spec.seed)
    model.eval()  # no dropout: the comparison across world sizes must be deterministic
    initial = flat_params(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer, _ = backend.prepare(model, optimizer)
    batch = fixed_batch(backend.unwrap(model).config.vocab_size, train_spec.batch_size).to(backend.device)
    micro = micro_batch_ranges(
        local_batch_range(train_spec.batch_size, backend.rank, backend.world_size), train_spec.micro_batch_size
    )
    losses, norms = [], []
    for _ in range(train_spec.steps):
        step_loss = torch.zeros((), device=backend.device)
        for i, rows in enumerate(micro):
            ids = batch[rows.start : rows.stop]
            last = i == len(micro) - 1  # DDP all-reduces gradients on the last micro-step only
            with contextlib.nullcontext() if last else backend.no_sync(model):
                with backend.autocast():
                    loss = model(input_ids=ids, labels=ids).loss
                backend.backward(loss, len(micro))
            step_loss += loss.detach() / len(micro)
        norms.append(backend.step())
        losses.append(float(backend.all_reduce(step_loss, "mean")))
    final = flat_params(backend.unwrap(model))
    # The update is small next to the weights, so it gets its own checksum and norm.
    return {
        "checksum": checksum(final),
        "update_checksum": checksum(final - initial),
        "update_norm": float((final - initial).norm()),
        "losses": losses,
        "grad_norms": norms,
    }


def main(out: Path) -> None:
    torch.set_num_threads(1)
    backend = make_backend(TorchBackendSpec(), TrainSpec(**TRAIN))
    try:
        result = train(backend, TrainSpec(**TRAIN))
        path = out if backend.is_rank_zero else out.with_name(f"{out.name}.rank{backend.rank}")
        path.write_text(json.dumps({**result, "world_size": backend.world_size}))
        backend.barrier()
    finally:
        backend.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
