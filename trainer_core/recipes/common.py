"""Pieces every recipe shares: the run's platform fields (Run), its start (backend and reporter), optimizer and
LR schedule from the spec with the resume point, a resumable batch order and this rank's share of it, one
optimizer step over micro-batches, the step timer, evaluation in eval mode over rank chunks, frozen references
and the run's driver (checkpoints: checkpointing.py). Functions and small classes; each recipe calls them top
to bottom and keeps its algorithm to itself.
"""

from __future__ import annotations

import contextlib
import copy
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from rlplane.spec import RunSpec
from rlplane.spec.algorithms import ALGORITHM_SECTIONS
from rlplane.spec.sections import ModelSpec, TrainSpec
from trainer_core.backends import Backend, MicroStep, local_batch_range, make_backend, rank_chunks
from trainer_core.backends.dist import DistEnv
from trainer_core.checkpoint.fence import Fenced
from trainer_core.failures import EngineLost
from trainer_core.models import ModelError, load_from_spec
from trainer_core.models.from_spec import context_length
from trainer_core.recipes.checkpointing import export_final, load_weights, restore_training
from trainer_core.recipes.divergence import Diverged
from trainer_core.reporting import Reporter, Sample, make_reporter

T = TypeVar("T")

# --- the run ---


@dataclass(kw_only=True)
class Run:
    """What the platform reads of every recipe's run (run_loop, checkpoints, samples, the driver); a recipe's run
    adds its data, its other models and its own state."""

    spec: RunSpec
    out_dir: Path
    backend: Backend
    reporter: Reporter
    tokenizer: Any
    model: nn.Module  # as backend.prepare returned it
    optimizer: torch.optim.Optimizer
    scheduler: Any
    order: BatchOrder
    step: int = 0  # optimizer steps done (RL recipes: their steps)
    engine: Any = None  # RL recipes: the rollout engine (rollout/engines.py: opened on first use, closed with the run)
    weight_sync_s: float = 0.0  # seconds spent bringing the engine to the policy's version, all steps


def run_fields(
    spec: RunSpec, out_dir: Path, backend: Backend, reporter: Reporter, tokenizer: Any, opt: Optimization
) -> dict[str, Any]:
    """Run's fields from what every setup builds, for the keyword arguments of a recipe's run."""
    return {
        "spec": spec,
        "out_dir": out_dir,
        "backend": backend,
        "reporter": reporter,
        "tokenizer": tokenizer,
        "model": opt.model,
        "optimizer": opt.optimizer,
        "scheduler": opt.scheduler,
        "order": opt.order,
        "step": opt.step,
    }


# What a trainer is doing before its first step, as its run shows it (status "running" with this reason): a cold
# node can spend minutes in one of them, and "running, step 0" says nothing of which.
DEEPSPEED_COLD = "DeepSpeed builds its C++ ops on a node's first run: minutes"


@contextlib.contextmanager
def started(spec: RunSpec, out_dir: Path, stdout: bool) -> Iterator[tuple[Backend, Reporter]]:
    """The run's backend (it seeds torch and Python with train.seed + rank) and reporter, for a setup to build
    on; a setup that fails closes both before raising. Its phases are reported as it goes."""
    reporter = make_reporter(out_dir, rank=DistEnv.from_environ().rank, stdout=stdout)
    kind = spec.backend.kind
    reporter.status("running", f"starting the {kind} backend" + (f" ({DEEPSPEED_COLD})" if kind == "deepspeed" else ""))
    try:
        backend = make_backend(spec.backend, spec.train)
    except BaseException:
        reporter.close()
        raise
    reporter.status(
        "running", "loading the model, the data and the optimizer" + (f" ({DEEPSPEED_COLD})" if kind == "deepspeed" else "")
    )
    with closed_on_failure(backend, reporter):
        yield backend, reporter


@contextlib.contextmanager
def closed_on_failure(backend: Backend, reporter: Reporter) -> Iterator[None]:
    """A setup that fails closes the reporter and the backend it opened before raising."""
    try:
        yield
    except BaseException:
        reporter.close()
        backend.close()
        raise


# --- the spec, completed by the model ---


def fit_context(spec: RunSpec, model: nn.Module) -> RunSpec:
    """`spec` with model.max_seq_len set: unset, it becomes the model's context length (capped; models/from_spec.py).
    A response budget (gen.max_new_tokens) that leaves no room for a prompt is refused here, where that length
    is first known for a model the spec rules could not look into."""
    length = context_length(spec.model, model)
    gen = getattr(getattr(spec, ALGORITHM_SECTIONS[spec.algorithm]), "gen", None)
    if gen is not None and gen.max_new_tokens >= length:
        raise ModelError(
            f"gen.max_new_tokens {gen.max_new_tokens} leaves no room for the prompt in {spec.model.path!r}'s "
            f"{length}-token context; lower max_new_tokens or set model.max_seq_len"
        )
    if spec.model.max_seq_len == length:
        return spec
    return spec.model_copy(update={"model": spec.model.model_copy(update={"max_seq_len": length})})


# --- optimizer and schedule ---


def report_cut(reporter: Reporter, cut: int, total: int, what: str, max_seq_len: int) -> None:
    """Say, once, how many training rows lost their end to model.max_seq_len (`what`: "rows are", "pairs have a
    side"): it happens silently otherwise."""
    if cut:
        noun, verb = what.split(" ", 1)
        reporter.log(
            f"data: {cut} of {total} training {noun} ({cut / total:.1%}) {verb} longer than model.max_seq_len "
            f"{max_seq_len}, cut at the end (a completion's last tokens and its EOS are lost): raise model.max_seq_len "
            "or shorten them"
        )


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
    data it is, how many steps are done and the recipe's own saved state (all restored from a checkpoint
    when resuming)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    order: BatchOrder
    step: int
    extra: dict[str, Any] = field(default_factory=dict)  # CheckpointState.extra as saved; {} on a fresh run


def prepare_optimization(
    spec: RunSpec,
    backend: Backend,
    model: nn.Module,
    train_size: int,
    resume_from: Path | None,
    *,
    saved: tuple[nn.Module, dict[str, nn.Module]] | None = None,
    batch_size: int | None = None,
    schedule_per_step: bool = False,
) -> Optimization:
    """Optimizer and schedule for `model`, wrapped by the backend; with `resume_from`, every state of the checkpoint.

    `saved`: the part of `model` a checkpoint saves as its model, and the modules beside it (default: `model`
    alone). `batch_size`: examples per step (default train.batch_size). `schedule_per_step`: the recipe steps the
    schedule once per step of several updates (PPO, GRPO), so the backend, which would step it per update, never
    sees it."""
    train = spec.train
    part, modules = saved if saved is not None else (model, None)
    state = load_weights(resume_from, part, modules, backend=backend) if resume_from is not None else None
    optimizer = make_optimizer(model, train)
    scheduler = make_scheduler(optimizer, train)
    model, optimizer, prepared = backend.prepare(model, optimizer, None if schedule_per_step else scheduler)
    scheduler = scheduler if schedule_per_step else prepared
    position, step, extra = None, 0, {}
    if resume_from is not None and state is not None:
        restore_training(resume_from, backend, optimizer, scheduler)
        position, step, extra = state.data_position, state.step, state.extra
    size = train.batch_size if batch_size is None else batch_size
    order = BatchOrder(train_size, size, seed=train.seed, shuffle=spec.data.shuffle, position=position)
    return Optimization(model, optimizer, scheduler, order, step, extra)


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


def local_batch(run: Run, items: Sequence[T]) -> list[T]:
    """This rank's share of the next global batch of `items` (every rank draws the same global batch)."""
    indices = run.order.next_batch()
    backend = run.backend
    return [items[indices[i]] for i in local_batch_range(len(indices), backend.data_rank, backend.data_world_size)]


def weighted_micro_batches(local: list[T], groups: list[list[int]]) -> list[tuple[list[T], float]]:
    """`local`'s micro-batches (`groups` of its indices: recipes/packing.py), each with its loss weight: its share of
    `local` times the micro-batch count, which the backend divides by again, so the step's loss is the mean over
    `local`."""
    return [([local[i] for i in group], len(group) / len(local) * len(groups)) for group in groups]


# --- one optimizer step ---


def optimizer_step(run: Run, micro_steps: list[MicroStep]) -> tuple[list[float], float]:
    """Forward and backward over this rank's micro-steps, then one optimizer step (run.step + 1): the sums the
    micro-steps returned, added over ranks, and the pre-clip grad norm."""
    backend = run.backend
    totals = backend.forward_backward(run.model, micro_steps).to(device=backend.device, dtype=torch.float64)
    grad_norm = backend.step()
    run.step += 1
    return backend.all_reduce(totals, "sum").tolist(), grad_norm


# --- timing ---


@dataclass(frozen=True)
class Throughput:
    """What turns tokens/s into per-GPU rates: the run's GPUs (one per rank) and, where known, the model's FLOPs per
    token and the GPUs' peak (trainer_core/models/flops.py)."""

    gpus: int
    flops_per_token: float | None = None
    peak_flops: float | None = None  # one GPU's


def throughput(run: Run) -> Throughput | None:
    """The run's GPU throughput terms; None on CPU."""
    backend = run.backend
    if backend.device.type != "cuda":
        return None
    from trainer_core.models.flops import flops_per_token, peak_flops

    name = torch.cuda.get_device_name(backend.device)
    per_token = flops_per_token(backend.unwrap(run.model), run.spec.model.max_seq_len)
    return Throughput(backend.world_size, per_token, peak_flops(name, run.spec.backend.precision))


class StepTimer:
    """Wall time and tokens between reports: perf/step_s and perf/tokens_per_s; on GPUs also
    perf/tokens_per_s_per_gpu, and perf/mfu where the model's FLOPs and the device's peak are known."""

    def __init__(self, gpus: Throughput | None = None) -> None:
        self.gpus = gpus
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
        if self.gpus is not None:
            values["perf/tokens_per_s_per_gpu"] = values["perf/tokens_per_s"] / self.gpus.gpus
            if self.gpus.flops_per_token is not None and self.gpus.peak_flops is not None:
                achieved = values["perf/tokens_per_s_per_gpu"] * self.gpus.flops_per_token
                values["perf/mfu"] = achieved / self.gpus.peak_flops
        self.reset()
        return values


# --- eval ---


@contextlib.contextmanager
def evaluating(model: nn.Module, backend: Backend) -> Iterator[None]:
    """`model` in eval mode (no dropout) under no_grad and the backend's autocast; back in its own mode after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), backend.autocast():
            yield
    finally:
        model.train(was_training)


def evaluate(
    run: Run, items: Sequence[T], sums: Callable[[list[T]], torch.Tensor], shown: Callable[[], list[Sample]] = list
) -> list[float]:
    """One pass over held-out `items` with the model in eval mode: `sums(chunk)` added up over this rank's chunks and
    over ranks, and the samples `shown()` makes there, which rank zero reports (every rank makes them: forwards and
    generation are collectives under sharding)."""
    with evaluating(run.model, run.backend):
        totals = eval_sums(items, run.spec.micro_batch_size, run.backend, sums)
        made = shown()
    if run.backend.is_rank_zero and made:
        run.reporter.samples(run.step, made)
    return run.backend.all_reduce(totals, "sum").tolist()


def eval_sums(items: Sequence[T], size: int, backend: Backend, sums: Callable[[list[T]], torch.Tensor]) -> torch.Tensor:
    """`sums(chunk)` added up in float64 over this rank's chunks of `items` (rank_chunks: stand-ins run but do not
    count), on the backend's device and not yet reduced over ranks."""
    totals = None
    for chunk, real in rank_chunks(items, size, backend):
        part = sums(chunk)
        if totals is None:
            totals = torch.zeros(part.shape, dtype=torch.float64, device=backend.device)
        if real:
            totals += part
    if totals is None:
        raise ValueError("eval_sums needs at least one item; a recipe without eval rows reports no eval metrics.")
    return totals


# --- checkpoints ---


def is_due(step: int, every: int | None, last_step: int) -> bool:
    """True on every `every`-th step and on the last one."""
    return step == last_step or (every is not None and step % every == 0)


def failure_reason(exc: BaseException) -> str:
    """What a failed run's status says: a divergence in its own words (where it went NaN), anything else with its type."""
    return str(exc) if isinstance(exc, Diverged) else f"{type(exc).__name__}: {exc}"


def drive_one_step(run: Any, work: Callable[[], None], sources: Callable[[], Iterable[Any]] = tuple) -> Any:
    """A run of one step that trains nothing (eval, generate): `work()` does and reports it, then the run succeeded at
    step 1; a failure is reported with its reason. The reporter, the backend and `sources()` (reward sources,
    environments, engines: each closed where not None) are closed whatever happens."""
    try:
        work()
        run.reporter.status("succeeded", "step 1")
        return run
    except BaseException as exc:
        run.reporter.status("failed", failure_reason(exc))
        raise
    finally:
        for source in sources():
            if source is not None:
                source.close()
        run.reporter.close()
        run.backend.close()


def drive(
    run: Run,
    train: Callable[[Any, int | None], None],
    stop_at: int | None,
    export: Callable[[Any], nn.Module] | None = None,
) -> Any:
    """train, export (`export(run)`, else the run's model) and report the final status; the reporter
    and backend are closed whatever happens. A run that diverged (divergence.py) exports nothing."""
    try:
        run.reporter.status("running", "training" + (f", resumed at step {run.step}" if run.step else ""))
        train(run, stop_at)
        export_final(run, export(run) if export is not None else None)
        if run.step >= run.spec.train.steps:
            run.reporter.status("succeeded", f"step {run.step}")
        else:  # --stop-at or a hand-back: not an end of the run, which its worker tells the API
            run.reporter.log(f"stopped at step {run.step} of {run.spec.train.steps}")
        return run
    except (Fenced, EngineLost):
        # not the run's end: the control plane ended this attempt, or a rollout engine's process died under it
        # (its worker ends the attempt lost); the run goes on in another
        raise
    except BaseException as exc:
        run.reporter.status("failed", failure_reason(exc))
        raise
    finally:
        run.reporter.close()
        run.backend.close()
