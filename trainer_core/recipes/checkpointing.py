"""Checkpoints from inside a recipe: a resume's two halves around backend.prepare (weights before it,
optimizer, schedule and every rank's generators after it), one CheckpointState saved with rotation, and
the final export. Every rank calls these: sharding backends gather, or write their own shards.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from rlplane import node_parts
from rlplane.spec import dump_spec
from trainer_core.backends import Backend
from trainer_core.checkpoint import (
    CheckpointInfo,
    TrainState,
    export_model,
    fence,
    load_checkpoint,
    rank_rng,
    rotate,
    save_checkpoint,
)
from trainer_core.checkpoint import state as checkpoint_state
from trainer_core.checkpoint.errors import CheckpointError
from trainer_core.checkpoint.files import manifest_digest_and_size
from trainer_core.checkpoint.sharded import foreign_sharded_state, sharded_state_dir, sharded_state_kind
from trainer_core.checkpoint.store import read_train_state, stage, staging_dir
from trainer_core.checkpoint.weights import read_weights
from trainer_core.reporting import CheckpointEvent, Reporter

if TYPE_CHECKING:  # common imports this module
    from trainer_core.recipes.common import Run


def load_weights(
    resume_from: Path, model: nn.Module, modules: dict[str, nn.Module] | None = None, *, backend: Backend | None = None
) -> TrainState:
    """A resume's first half, before backend.prepare: the checkpoint's weights into the plain model (and
    modules) on every rank, so a sharding backend partitions the resumed weights; returns the position.
    A model built partitioned (zero_init) is gathered whole for it, once. A backend that shards
    checkpoints reads a sharded one after prepare instead (restore_training): only the position here."""
    if backend is not None and backend.shards_checkpoints and sharded_state_kind(resume_from) == backend.sharded_kind:
        return read_train_state(resume_from)
    params = [p for part in (model, *(modules or {}).values()) for p in part.parameters()]
    with backend.whole_parameters(params) if backend is not None else contextlib.nullcontext():
        return load_checkpoint(resume_from, model=model, restore_rng=False, modules=modules)


def restore_training(resume_from: Path, backend: Backend, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    """A resume's second half, after backend.prepare: the optimizer (through the backend; a sharded
    checkpoint's model state too), the schedule (after the optimizer: it sets each group's lr) and,
    last, every RNG."""
    kind = sharded_state_kind(resume_from)
    if kind is not None:
        if kind != backend.sharded_kind:
            reader = getattr(getattr(backend, "spec", None), "kind", type(backend).__name__)
            raise CheckpointError(foreign_sharded_state(resume_from, kind, f"backend.kind {reader}"))
        backend.load_sharded_state(sharded_state_dir(resume_from, kind), optimizer)
    else:
        if backend.keeps_master_weights:
            backend.load_master_weights(read_weights(resume_from / "model"))
        backend.load_optimizer_state(optimizer, checkpoint_state.load_state(resume_from, "optimizer"))
    if scheduler is not None:
        checkpoint_state.load_scheduler(resume_from, scheduler)
    rank_rng.restore_rank_rng(resume_from, backend.data_rank, backend.data_world_size)


@dataclass
class CheckpointState:
    """Everything one checkpoint holds of a run (torchtune's TrainingProgress beside the model and optimizer). A recipe
    says what it saves, the platform says how: `run_state` fills it from the run, and a recipe whose checkpoint
    holds more (PPO's value head and KL controller, ILQL's Q heads) names those parts. step, data_position, spec
    and extra come back as the TrainState a resume reads."""

    step: int
    prepared: nn.Module  # what backend.prepare returned: a sharding backend gathers the whole state from it
    model: nn.Module  # the part of `prepared` saved as the checkpoint's Hugging Face model
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    data_position: dict[str, int]
    spec: dict[str, Any]
    modules: dict[str, nn.Module] = field(default_factory=dict)  # trained beside the model: value head, critic, Q heads
    extra: dict[str, Any] = field(default_factory=dict)  # plain JSON: a KL controller, a reward normaliser


def run_state(
    run: Run,
    *,
    model: nn.Module | None = None,
    modules: dict[str, nn.Module] | None = None,
    extra: dict[str, Any] | None = None,
) -> CheckpointState:
    """The run's checkpoint state: its prepared model (or the part `model` of it), optimizer, schedule, data
    position and spec, with a recipe's own `modules` and `extra`."""
    return CheckpointState(
        step=run.step,
        prepared=run.model,
        model=model if model is not None else run.backend.unwrap(run.model),
        tokenizer=run.tokenizer,
        optimizer=run.optimizer,
        scheduler=run.scheduler,
        data_position=run.order.position,
        spec=dump_spec(run.spec),
        modules=modules or {},
        extra=extra or {},
    )


def checkpoint_run(run: Run, state: CheckpointState) -> CheckpointInfo | None:
    """Save `state` under OUT/checkpoints and rotate to train.keep_last."""
    return save_and_rotate(
        run.out_dir / "checkpoints", state, backend=run.backend, keep_last=run.spec.train.keep_last, reporter=run.reporter
    )


def save_and_rotate(
    checkpoint_dir: Path, state: CheckpointState, *, backend: Backend, keep_last: int, reporter: Reporter
) -> CheckpointInfo | None:
    """Rank zero writes the full checkpoint of `state`, drops all but the newest keep_last, and reports it.

    Every rank calls this, since a sharding backend gathers the states from all (or, where it shards
    checkpoints, every rank first writes its shards into the staging directory)."""
    info = None
    sharded = backend.shards_checkpoints
    full_model, full_optimizer = backend.full_state(state.prepared, None if sharded else state.optimizer)
    root = backend.unwrap(state.prepared)
    staged = shared_staging_dir(checkpoint_dir, state.step, backend) if sharded else None
    elsewhere = None  # the files of the checkpoint that other nodes upload themselves
    if staged is not None:
        try:
            backend.save_sharded_state(sharded_state_dir(staged, backend.sharded_kind), state.optimizer)
            if node_parts.per_node():  # each node wrote its shards into its own copy of the run directory
                elsewhere = node_parts.hand_over_parts(staged, state.step, backend.device)
        except BaseException:
            if backend.is_rank_zero:
                shutil.rmtree(staged, ignore_errors=True)
            raise
    rngs = gather_rank_rngs(backend)
    if backend.is_rank_zero:
        # Reports up to this step reach the run directory before the checkpoint exists: a process
        # killed right after it is resumed past them, and nothing would report them again.
        reporter.flush(timeout=30)
        run_dir = checkpoint_dir.parent
        fence.check(run_dir)  # before the work, and again before the rename
        info = save_checkpoint(
            checkpoint_dir,
            state.step,
            model=state.model,
            tokenizer=state.tokenizer,
            optimizer=None if sharded else state.optimizer,
            scheduler=state.scheduler,
            data_position=state.data_position,
            spec=state.spec,
            extra=state.extra,
            modules=state.modules,
            model_state=None if full_model is None else part_of(full_model, root, state.model),
            module_states=None if full_model is None else {n: part_of(full_model, root, m) for n, m in state.modules.items()},
            optimizer_state=full_optimizer,
            staged=staged,
            elsewhere=elsewhere,
            rank_rngs=rngs,
            before_commit=lambda: fence.check(run_dir),
        )
        rotate(checkpoint_dir, keep_last)
        reporter.checkpoint(
            CheckpointEvent(
                step=state.step,
                path=str(info.path.relative_to(checkpoint_dir.parent)),
                size=info.size,
                sha256=info.sha256,
                metadata={"kind": "checkpoint"},
            )
        )
    backend.barrier()
    return info


def gather_rank_rngs(backend: Backend) -> dict[int, dict[str, torch.Tensor]] | None:
    """Every data-parallel rank's generators (checkpoint/rank_rng.py) on rank zero, None on the others; every
    rank calls it. Tensors travel, never pickled objects; a model replica's ranks share one entry."""
    mine = rank_rng.rng_tensors()
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return {0: mine}
    world = dist.get_world_size()

    def gather(tensor: torch.Tensor) -> list[torch.Tensor]:
        local = tensor.to(backend.device)
        parts = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(parts, local)
        return [part.cpu() for part in parts]

    data_ranks = gather(torch.tensor([backend.data_rank], dtype=torch.int64))
    gathered = {name: gather(tensor) for name, tensor in sorted(mine.items())}
    if not backend.is_rank_zero:
        return None
    out: dict[int, dict[str, torch.Tensor]] = {}
    for index, data_rank in enumerate(data_ranks):
        out.setdefault(int(data_rank), {name: parts[index] for name, parts in gathered.items()})
    return out


def shared_staging_dir(checkpoint_dir: Path, step: int, backend: Backend) -> Path:
    """The staging directory of `step`'s checkpoint, made by rank zero, its name agreed by every rank.

    Rank zero's random token reaches the others as a broadcast number (broadcast_object_list would
    pickle it), over the whole job rather than the backend's data-parallel ranks; 0 means rank zero
    could not stage, and then every rank raises."""
    token, error = 0, None
    if backend.is_rank_zero:
        token = secrets.randbits(31) + 1
        try:
            stage(checkpoint_dir, step, f"{token:08x}")
        except (CheckpointError, OSError) as exc:
            token, error = 0, exc
    shared = torch.tensor([token], dtype=torch.int64, device=backend.device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast(shared, src=0)
    agreed = int(shared.item())
    if agreed == 0:
        raise error or CheckpointError(f"rank 0 could not create the checkpoint directory for step {step}; its log says why.")
    staged = staging_dir(checkpoint_dir, step, f"{agreed:08x}")
    if node_parts.per_node():
        staged.mkdir(parents=True, exist_ok=True)  # this node's own copy, where its ranks write their shards first
    return staged


def part_of(state: dict[str, torch.Tensor], root: nn.Module, part: nn.Module) -> dict[str, torch.Tensor]:
    """The entries of `root`'s state dict that belong to its submodule `part`, named as `part` names them."""
    prefix = next((name for name, module in root.named_modules() if module is part), None)
    if prefix is None:
        raise ValueError(f"{type(part).__name__} is not a submodule of {type(root).__name__}")
    if prefix == "":
        return state
    return {key[len(prefix) + 1 :]: value for key, value in state.items() if key.startswith(prefix + ".")}


def export_final(run: Run, model: nn.Module | None = None) -> Path | None:
    """Export the trained model (`model`, else the run's unwrapped model) to OUT/final (rank zero) once
    train.steps are done, and report it as the run's output: a checkpoint event with metadata
    {"kind": "export"}, which the control plane registers like any checkpoint."""
    if run.step < run.spec.train.steps:
        return None
    final = run.out_dir / "final"
    root = run.backend.unwrap(run.model)
    target = model if model is not None else root
    gathered, _ = run.backend.full_state(run.model)  # every rank: a sharding backend gathers
    if run.backend.is_rank_zero:
        weights = None if gathered is None else part_of(gathered, root, target)
        export_model(target, run.tokenizer, final, replace=True, step=run.step, state_dict=weights)
        sha256, size = manifest_digest_and_size(final)
        run.reporter.checkpoint(
            CheckpointEvent(step=run.step, path=final.name, size=size, sha256=sha256, metadata={"kind": "export", "format": "hf"})
        )
        run.reporter.log(f"exported the final model to {final}")
    run.backend.barrier()
    return final
