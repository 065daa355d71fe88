"""The one interface recipes train through; each backend (torch, later deepspeed/fsdp2/megatron) is one file.

Gradient accumulation convention: a recipe computes the MEAN loss of one micro-batch and calls
`backward(loss, accumulation_steps)`; the backend divides by `accumulation_steps`, so the gradients
summed over the rank's micro-batches are the mean over the rank's batch, and DDP's all-reduce (a mean
over ranks) makes them the mean over the global batch. Micro-batches must be equal in size (see
`batching.py`). All micro-steps but the last run inside `no_sync(model)`; then `step()` once.
`forward_backward(model, steps)` does that loop for a recipe that states each micro-batch as a
`MicroStep` (the model's inputs, and logits -> loss): the form pipeline parallelism needs, where
megatron's schedule, not the recipe, decides when each stage runs which micro-batch.

Checkpoints: trainer_core.checkpoint writes and reads the files; the backend supplies the states.
`full_state` (every rank calls it: sharding backends gather) gives rank zero the whole model's and
optimizer's state in a form that does not depend on the number of processes, or None where rank
zero's live objects are whole already; rank zero writes them.
On resume the weights go into the model before `prepare` (every rank reads the same files), and
`load_optimizer_state` puts the optimizer's back after it.
A backend that `shards_checkpoints` (FSDP2, Megatron: `sharded_kind`) instead has every rank write its own
shards of the prepared model's and optimizer's state (`save_sharded_state`, into the checkpoint's dcp/ or
megatron/) and read them back after `prepare` (`load_sharded_state`), for any number of processes; the
gathered model is still written too, as the checkpoint's Hugging Face model/ for readers other than a resume.
"""

from __future__ import annotations

import contextlib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import nn

ReduceOp = Literal["mean", "sum", "max", "min"]
# gloo has no AVG: a mean is a SUM divided by the ranks
_DIST_OPS = {"mean": dist.ReduceOp.SUM, "sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def reduced(tensor: torch.Tensor, op: ReduceOp, device: torch.device, ranks: int, group=None) -> torch.Tensor:
    """`tensor` reduced with `op` over `ranks` ranks of `group` (a new tensor on `device`)."""
    if op not in _DIST_OPS:
        raise ValueError(f"all_reduce op must be one of {', '.join(_DIST_OPS)}, got {op!r}.")
    result = tensor.detach().to(device, copy=True)
    if ranks == 1:
        return result
    dist.all_reduce(result, op=_DIST_OPS[op], group=group)
    return result / ranks if op == "mean" else result


@dataclass(frozen=True)
class MicroStep:
    """One micro-batch of an optimizer step: the model's keyword inputs, and what turns the model's output (what
    calling it returns: an HF output with .logits, PPO's (logits, values)) into (the loss to backpropagate, a tensor
    of sums the recipe totals over micro-batches). A backend runs them all (`forward_backward`); under pipeline
    parallelism `finish` runs on the last stage only. No `finish`: a forward pass whose output is wanted
    (pipelined forward passes outside training)."""

    inputs: dict[str, torch.Tensor]
    finish: Callable[[Any], tuple[torch.Tensor, torch.Tensor]] | None = None


class BackendError(ValueError):
    """A backend setting this process cannot honour (names the spec field and the fix)."""


class Backend(ABC):
    rollout_engine = "hf"  # the rollout engine (rollout/engines.py) that samples from this backend's policy
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_rank_zero(self) -> bool:
        """Only rank zero reports metrics and writes shared files."""
        return self.rank == 0

    @property
    def data_rank(self) -> int:
        """Which slice of each batch this rank trains on: its rank, except under model parallelism (megatron),
        where the ranks holding one copy of the model share a slice."""
        return self.rank

    @property
    def data_world_size(self) -> int:
        """How many slices each batch is split into (the data-parallel size); see `data_rank`."""
        return self.world_size

    @abstractmethod
    def prepare(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None
    ) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
        """Move and wrap the model for this backend; the optimizer must already hold the model's parameters."""

    @abstractmethod
    def backward(self, loss: torch.Tensor, accumulation_steps: int = 1) -> None:
        """Backpropagate a micro-batch's mean loss, divided by `accumulation_steps`."""

    def forward_backward(self, model: nn.Module, steps: Sequence[MicroStep]) -> torch.Tensor:
        """Forward and backward every micro-batch of one optimizer step (gradients synchronised on the last; the
        backend divides each loss by len(steps)); the sum of their sums, on every rank."""
        totals = None
        for i, step in enumerate(steps):
            if step.finish is None:
                raise ValueError("forward_backward needs every MicroStep's finish (what turns the output into a loss).")
            with contextlib.nullcontext() if i == len(steps) - 1 else self.no_sync(model), self.autocast():
                loss, sums = step.finish(model(**step.inputs))
                self.backward(loss, len(steps))
            totals = sums.detach() if totals is None else totals + sums.detach()
        if totals is None:
            raise ValueError("forward_backward needs at least one micro-batch.")
        return totals

    @abstractmethod
    def step(self) -> float:
        """Clip to train.max_grad_norm, step optimizer and scheduler, zero grads; returns the pre-clip global norm.
        An update whose norm is NaN or infinite is never applied (weights and optimizer state stay as they
        were; the schedule still advances): recipes/divergence.py decides whether the run goes on."""

    @abstractmethod
    def no_sync(self, model: nn.Module) -> AbstractContextManager[None]:
        """Skip the gradient all-reduce during accumulation micro-steps (all but the last)."""

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        """A new tensor reduced over all ranks (the input is left as it was), on this rank's device. Under
        model parallelism, over the data-parallel ranks only (a replica's ranks hold the same values)."""
        return reduced(tensor, op, self.device, self.world_size)

    def from_loss_stage(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` as the ranks that compute the loss made it, on every rank: under pipeline parallelism the last
        stage's (a recipe's values made beside the loss exist there only, while rank 0, the first stage, reports);
        elsewhere this rank's own. Every rank must call it."""
        return tensor

    def barrier(self) -> None:
        """Wait for every rank."""
        if dist.is_initialized():
            dist.barrier()

    @abstractmethod
    def unwrap(self, model: nn.Module) -> nn.Module:
        """The user's model inside whatever wrapper `prepare` put around it."""

    @abstractmethod
    def autocast(self) -> AbstractContextManager[Any]:
        """Run forward passes in backend.precision."""

    def close(self) -> None:
        """Release what the backend created (the process group, if it made one)."""
        if getattr(self, "_owns_group", False) and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_group = False

    def full_state(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None
    ) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any] | None]:
        """(the unwrapped model's state dict, the optimizer's state) gathered on rank zero by a sharding
        backend; every rank must call it. (None, None): rank zero's live model and optimizer are whole
        (a replica backend, the default), so the checkpoint is written from them directly."""
        return None, None

    @property
    def keeps_master_weights(self) -> bool:
        """True where the optimizer steps fp32 master weights kept apart from lower-precision model weights
        (DeepSpeed in bf16/fp16): built from the cast weights, they need the checkpoint's own on resume."""
        return False

    def load_master_weights(self, weights: dict[str, torch.Tensor]) -> None:  # noqa: B027  (a no-op by default)
        """After prepare, on resume: the checkpoint's full-precision weights into the fp32 masters."""

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """Restore what `full_state` returned for the optimizer (every rank calls it with the same state)."""
        optimizer.load_state_dict(state)

    # The backend.kind whose sharded checkpoints this backend writes and reads (checkpoint/sharded.py), if any.
    sharded_kind: str | None = None

    @property
    def shards_checkpoints(self) -> bool:
        """True where every rank writes its own shards of the model's and optimizer's state into a checkpoint
        (`save_sharded_state`) instead of rank zero writing the state `full_state` gathered."""
        return self.sharded_kind is not None

    def save_sharded_state(self, directory: Path, optimizer: torch.optim.Optimizer) -> None:
        """Every rank: its shards of the prepared model's and `optimizer`'s state into `directory`."""
        raise BackendError(f"{type(self).__name__} writes gathered checkpoints, not sharded ones (shards_checkpoints is False).")

    def load_sharded_state(self, directory: Path, optimizer: torch.optim.Optimizer) -> None:
        """Every rank, after prepare: the state `save_sharded_state` wrote, resharded to this run's processes."""
        raise BackendError(f"{type(self).__name__} reads gathered checkpoints, not sharded ones ({directory}).")

    @property
    def forward_is_collective(self) -> bool:
        """True where a forward pass gathers parameters from every rank (ZeRO-3, FSDP2 with several
        processes): then every rank must run as many forward passes as the others, or all hang."""
        return False

    @property
    def builds_partitioned(self) -> bool:
        """True where models come out of loading already partitioned (DeepSpeed zero_init): such a model
        cannot be copied, and its weights are loaded through `whole_parameters`."""
        return False

    def whole_parameters(self, params: Iterable[nn.Parameter]) -> AbstractContextManager[Any]:
        """Inside it, `params` are whole tensors that every rank may change alike outside the optimizer
        (weights loaded on resume, ILQL's target heads). A backend that partitions parameters gathers
        them first and partitions the result again."""
        return contextlib.nullcontext()

    def prepare_frozen(self, model: nn.Module) -> nn.Module:
        """Place a model that is only run forward (a reference or reward model): frozen, in eval mode.
        Here a whole copy on this rank's device; sharding backends shard it as they shard the policy,
        and then every rank must run it as many times as the others."""
        return model.to(self.device).eval().requires_grad_(False)

    def describe_placement(self, model: nn.Module) -> str:
        """How much of `model` this rank holds, for the run's log."""
        total = sum(p.numel() for p in model.parameters())
        return f"whole on {self.device} ({total:,} parameters on rank {self.rank})"

    def generate(self, model: nn.Module, **kwargs: Any) -> Any:
        """Sample from the unwrapped model without tracking gradients (DDP's wrapper has no generate)."""
        with torch.no_grad():
            return self.unwrap(model).generate(**kwargs)


def applies_update(norm: torch.Tensor | float) -> bool:
    """Whether an update with this global gradient norm may be applied: not when it is NaN or infinite (the
    norm is global, so every rank decides alike)."""
    return math.isfinite(float(norm))


def share_tied(model: nn.Module, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Gathering copies each key's tensor: names of one live tensor in `model` (GPT-2's lm_head and wte) share one
    copy again, so a save writes it once, as save_pretrained of the live model would."""
    first: dict[int, str] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if name in weights:
            weights[name] = weights[first.setdefault(id(tensor), name)]
    return weights
