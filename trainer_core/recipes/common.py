"""Pieces every recipe shares: optimizer and LR schedule from the spec, a resumable batch order,
the step timer, an eval-loss loop, and checkpoint-if-due with rotation. Functions and small
classes; each recipe calls them top to bottom.
"""

from __future__ import annotations

import contextlib
import copy
import math
import random
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from trainer_core.backends import Backend
from trainer_core.checkpoint import CheckpointInfo, TrainState, export_model, load_checkpoint, rotate, save_checkpoint
from trainer_core.checkpoint import state as checkpoint_state
from trainer_core.checkpoint.errors import CheckpointError
from trainer_core.checkpoint.files import manifest_digest_and_size
from trainer_core.checkpoint.sharded import DCP_DIR, has_sharded_state
from trainer_core.checkpoint.store import read_train_state, stage, staging_dir
from trainer_core.checkpoint.weights import read_weights
from trainer_core.models import load_from_spec
from trainer_core.reporting import CheckpointEvent, Reporter
from trainer_core.spec import RunSpec, dump_spec
from trainer_core.spec_sections import ModelSpec, TrainSpec

T = TypeVar("T")

# --- optimizer and schedule ---


def make_optimizer(model: nn.Module, train: TrainSpec) -> torch.optim.AdamW:
    """AdamW over the trainable parameters; no weight decay on biases and norms (1-d tensors)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": train.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    # The fused kernel (CPU and CUDA) steps every tensor at once; torch's default on CPU is one tensor at a
    # time, which bench/trainers.py measured at 4x the optimizer time of the fused one.
    fused = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=train.lr, fused=fused or None)


@dataclass
class Optimization:
    """What every recipe's setup builds after its model and data: the optimizer state, where in the
    data it is, and how many steps are done (all restored from a checkpoint when resuming)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    order: BatchOrder
    step: int


def prepare_optimization(
    spec: RunSpec, backend: Backend, model: nn.Module, train_size: int, resume_from: Path | None
) -> Optimization:
    """Optimizer and schedule for `model`, wrapped by the backend; with `resume_from`, every state of the checkpoint."""
    train = spec.train
    state = load_weights(resume_from, model, backend=backend) if resume_from is not None else None
    optimizer = make_optimizer(model, train)
    scheduler = make_scheduler(optimizer, train)
    model, optimizer, scheduler = backend.prepare(model, optimizer, scheduler)
    position, step = None, 0
    if resume_from is not None and state is not None:
        restore_training(resume_from, backend, optimizer, scheduler)
        position, step = state.data_position, state.step
    order = BatchOrder(train_size, train.batch_size, seed=train.seed, shuffle=spec.data.shuffle, position=position)
    return Optimization(model, optimizer, scheduler, order, step)


def load_weights(
    resume_from: Path, model: nn.Module, modules: dict[str, nn.Module] | None = None, *, backend: Backend | None = None
) -> TrainState:
    """A resume's first half, before backend.prepare: the checkpoint's weights into the plain model (and
    modules) on every rank, so a sharding backend partitions the resumed weights; returns the position.
    A model built partitioned (zero_init) is gathered whole for it, once. A backend that shards
    checkpoints reads a sharded one after prepare instead (restore_training): only the position here."""
    if backend is not None and backend.shards_checkpoints and has_sharded_state(resume_from):
        return read_train_state(resume_from)
    params = [p for part in (model, *(modules or {}).values()) for p in part.parameters()]
    with backend.whole_parameters(params) if backend is not None else contextlib.nullcontext():
        return load_checkpoint(resume_from, model=model, restore_rng=False, modules=modules)


def restore_training(resume_from: Path, backend: Backend, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    """A resume's second half, after backend.prepare: the optimizer (through the backend; a sharded
    checkpoint's model state too), the schedule (after the optimizer: it sets each group's lr) and,
    last, every RNG."""
    if has_sharded_state(resume_from):
        backend.load_sharded_state(resume_from / DCP_DIR, optimizer)
    else:
        if backend.keeps_master_weights:
            backend.load_master_weights(read_weights(resume_from / "model"))
        backend.load_optimizer_state(optimizer, checkpoint_state.load_state(resume_from, "optimizer"))
    if scheduler is not None:
        checkpoint_state.load_scheduler(resume_from, scheduler)
    checkpoint_state.load_rng(resume_from)


@contextlib.contextmanager
def closed_on_failure(backend: Backend, reporter: Reporter) -> Iterator[None]:
    """A setup that fails closes the reporter and the backend it opened before raising."""
    try:
        yield
    except BaseException:
        reporter.close()
        backend.close()
        raise


def lr_factor(step: int, train: TrainSpec) -> float:
    """Multiplier of train.lr for the update after `step` updates: linear warmup, then constant/linear/cosine to 0."""
    if step < train.warmup_steps:
        return (step + 1) / (train.warmup_steps + 1)
    if train.schedule == "constant":
        return 1.0
    progress = min(1.0, (step - train.warmup_steps) / max(1, train.steps - train.warmup_steps))
    if train.schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def make_scheduler(optimizer: torch.optim.Optimizer, train: TrainSpec) -> torch.optim.lr_scheduler.LambdaLR:
    def factor(step: int) -> float:  # a plain function: LambdaLR's state_dict then holds only numbers
        return lr_factor(step, train)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def frozen_reference(
    spec: ModelSpec | None, policy: nn.Module, policy_spec: ModelSpec, backend: Backend, reporter: Reporter, *, seed: int
) -> nn.Module:
    """The reference model of a KL penalty: `spec`, or a copy of the freshly loaded policy (call it
    before a checkpoint is loaded into the policy; a policy built partitioned is loaded again from
    `policy_spec` instead); frozen, in eval mode (no dropout), and placed by the backend (sharded like
    the policy under ZeRO-3 and FSDP2)."""
    if spec is not None or backend.builds_partitioned:
        reference, _ = load_from_spec(spec or policy_spec, "causal", seed=seed)
    else:
        reference = copy.deepcopy(policy)
    reference = backend.prepare_frozen(reference)
    reporter.log(f"reference model: {backend.describe_placement(reference)}")
    return reference


# --- data order ---


class BatchOrder:
    """Which examples each step trains on: an epoch-by-epoch (optionally shuffled) order over `size` examples.

    The whole state is `position` = {"epoch", "index", "seed"}, plain JSON that goes into the
    checkpoint, so a resumed run takes exactly the batches the uninterrupted run would have.
    A batch that runs past the end of an epoch continues at the start of the next one.
    """

    def __init__(self, size: int, batch_size: int, *, seed: int, shuffle: bool, position: dict | None = None) -> None:
        if size < 1:
            raise ValueError("BatchOrder needs at least one example.")
        self.size, self.batch_size, self.shuffle = size, batch_size, shuffle
        position = position or {"epoch": 0, "index": 0, "seed": seed}
        self.epoch, self.index, self.seed = int(position["epoch"]), int(position["index"]), int(position["seed"])
        self._order = self._epoch_order(self.epoch)

    @property
    def position(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed}

    def next_batch(self) -> list[int]:
        """The next batch_size example indices (global: every rank gets the same list)."""
        batch: list[int] = []
        while len(batch) < self.batch_size:
            take = min(self.batch_size - len(batch), self.size - self.index)
            batch += self._order[self.index : self.index + take]
            self.index += take
            if self.index == self.size:
                self.epoch, self.index = self.epoch + 1, 0
                self._order = self._epoch_order(self.epoch)
        return batch

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(self.size))
        if self.shuffle:
            random.Random(f"{self.seed}:epoch:{epoch}").shuffle(order)
        return order


# --- timing ---


class StepTimer:
    """Wall time and tokens between reports: perf/step_s and perf/tokens_per_s."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._start, self._steps, self._tokens = time.perf_counter(), 0, 0

    def add(self, tokens: int) -> None:
        self._steps += 1
        self._tokens += tokens

    def report(self) -> dict[str, float]:
        """The averages since the last report, then starts a new interval."""
        elapsed = max(time.perf_counter() - self._start, 1e-9)
        values = {"perf/step_s": elapsed / max(1, self._steps), "perf/tokens_per_s": self._tokens / elapsed}
        self.reset()
        return values


# --- eval ---


def rank_chunks(items: Sequence[T], size: int, backend: Backend) -> Iterator[tuple[list[T], bool]]:
    """This rank's share of `items` (every data_world_size-th, from its data_rank) in chunks of `size`, as (chunk, real).

    Every rank gets as many chunks as the rank with the largest share: one whose share runs out first
    gets stand-in chunks (real=False) to run and discard, because a forward pass through a sharded
    model (ZeRO-3, FSDP2) gathers parameters from every rank and hangs unless every rank joins it."""
    mine = list(items[backend.data_rank :: backend.data_world_size])
    largest_share = -(-len(items) // backend.data_world_size)
    for i in range(-(-largest_share // size)):
        chunk = mine[i * size : (i + 1) * size]
        yield (chunk, True) if chunk else (list(items[:1]), False)


def evaluate(
    model: nn.Module,
    batches: Iterable[tuple[dict[str, torch.Tensor], bool]],
    loss_fn: Callable[[nn.Module, dict[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]],
    backend: Backend,
) -> float:
    """Token-weighted mean of `loss_fn` (returning (summed loss, tokens)) over this rank's (batch, real) pairs
    (see rank_chunks: stand-ins run but do not count), reduced over ranks."""
    was_training = model.training
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=backend.device)
    with torch.no_grad(), backend.autocast():
        for batch, real in batches:
            batch = {k: v.to(backend.device) for k, v in batch.items()}
            loss_sum, tokens = loss_fn(model, batch)
            if real:
                totals += torch.stack([loss_sum.double(), tokens.double()])
    model.train(was_training)
    loss_sum, tokens = backend.all_reduce(totals, "sum").tolist()
    return loss_sum / tokens if tokens else float("nan")


# --- checkpoints ---


def is_due(step: int, every: int | None, last_step: int) -> bool:
    """True on every `every`-th step and on the last one."""
    return step == last_step or (every is not None and step % every == 0)


def save_and_rotate(
    checkpoint_dir: Path,
    step: int,
    *,
    backend: Backend,
    model: nn.Module,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    data_position: dict,
    spec: dict,
    keep_last: int,
    reporter: Reporter,
    extra: dict[str, Any] | None = None,
    modules: dict[str, nn.Module] | None = None,
    wrapped: nn.Module | None = None,
) -> CheckpointInfo | None:
    """Rank zero writes the full checkpoint for `step`, drops all but the newest keep_last, and reports it.

    `extra` (plain JSON) and `modules` (value head, critic, Q heads) go into it beside the model.
    `wrapped`: what backend.prepare returned when `model` and `modules` are parts of it (PPO's
    actor-critic); every rank calls this, since a sharding backend gathers the states from all
    (or, where it shards checkpoints, every rank first writes its shards into the staging directory)."""
    info = None
    sharded = backend.shards_checkpoints
    full_model, full_optimizer = backend.full_state(wrapped if wrapped is not None else model, None if sharded else optimizer)
    root = backend.unwrap(wrapped if wrapped is not None else model)
    staged = shared_staging_dir(checkpoint_dir, step, backend) if sharded else None
    if staged is not None:
        try:
            backend.save_sharded_state(staged / DCP_DIR, optimizer)
        except BaseException:
            if backend.is_rank_zero:
                shutil.rmtree(staged, ignore_errors=True)
            raise
    if backend.is_rank_zero:
        # Reports up to this step reach the run directory before the checkpoint exists: a process
        # killed right after it is resumed past them, and nothing would report them again.
        reporter.flush(timeout=30)
        info = save_checkpoint(
            checkpoint_dir,
            step,
            model=backend.unwrap(model),
            tokenizer=tokenizer,
            optimizer=None if sharded else optimizer,
            scheduler=scheduler,
            data_position=data_position,
            spec=spec,
            extra=extra,
            modules=modules,
            model_state=None if full_model is None else part_of(full_model, root, backend.unwrap(model)),
            module_states=None if full_model is None else {n: part_of(full_model, root, m) for n, m in (modules or {}).items()},
            optimizer_state=full_optimizer,
            staged=staged,
        )
        rotate(checkpoint_dir, keep_last)
        reporter.checkpoint(
            CheckpointEvent(
                step=step,
                path=str(info.path.relative_to(checkpoint_dir.parent)),
                size=info.size,
                sha256=info.sha256,
                metadata={"kind": "checkpoint"},
            )
        )
    backend.barrier()
    return info


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
    return staging_dir(checkpoint_dir, step, f"{agreed:08x}")


def part_of(state: dict[str, torch.Tensor], root: nn.Module, part: nn.Module) -> dict[str, torch.Tensor]:
    """The entries of `root`'s state dict that belong to its submodule `part`, named as `part` names them."""
    prefix = next((name for name, module in root.named_modules() if module is part), None)
    if prefix is None:
        raise ValueError(f"{type(part).__name__} is not a submodule of {type(root).__name__}")
    if prefix == "":
        return state
    return {key[len(prefix) + 1 :]: value for key, value in state.items() if key.startswith(prefix + ".")}


def checkpoint_run(run: Any) -> None:
    """Save the run's full training state under OUT/checkpoints and rotate to train.keep_last."""
    save_and_rotate(
        run.out_dir / "checkpoints",
        run.step,
        backend=run.backend,
        model=run.model,
        tokenizer=run.tokenizer,
        optimizer=run.optimizer,
        scheduler=run.scheduler,
        data_position=run.order.position,
        spec=dump_spec(run.spec),
        keep_last=run.spec.train.keep_last,
        reporter=run.reporter,
    )


def export_final(run: Any, model: nn.Module | None = None) -> Path | None:
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


def drive(
    run: Any,
    train: Callable[[Any, int | None], None],
    stop_at: int | None,
    export: Callable[[Any], nn.Module] | None = None,
) -> Any:
    """train, export (`export(run)`, else the run's model) and report the final status; the reporter
    and backend are closed whatever happens."""
    try:
        run.reporter.status("running")
        train(run, stop_at)
        export_final(run, export(run) if export is not None else None)
        done = run.step >= run.spec.train.steps
        run.reporter.status("completed" if done else "stopped", f"step {run.step}")
        return run
    except BaseException as exc:
        run.reporter.status("failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        run.reporter.close()
        run.backend.close()
