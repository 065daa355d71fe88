"""Micro-batches by token budget (train.micro_batch_tokens) and padding-free forwards (train.padding_free).

Token budget: a rank's share of the step is cut into micro-batches of at most `micro_batch_tokens` tokens each,
longest sequences first, instead of a fixed number of examples: short examples share a micro-batch, a long one
gets fewer companions, and similar lengths meet (less padding when padded). A micro-batch costs its rows times
its longest row when padded, and its real tokens when padding-free; a sequence over the budget gets a micro-batch
of its own. Every rank runs as many micro-batches as the rank that needs most (a sharded forward is a collective),
splitting its largest ones to get there.

Padding-free: a micro-batch's rows go to the model as ONE row of their real tokens back to back, each sequence's
position ids starting again at 0, with no attention mask. Hugging Face models read the restarts as sequence
boundaries (transformers' masking_utils.find_packed_sequence_indices: a block-diagonal causal mask under
sdpa/eager, variable-length kernels under flash attention), so no compute goes to padding and no sequence sees
another. The output is scattered back into the padded [B, L] layout the recipe's loss reads, with zeros where
padding was (every loss masks those positions), so the loss and its gradients are the padded step's. A model
whose attention does not honour the restarts is refused at setup (`check_separates`), never trained on a mix.
A score model's head is read per token through a forward hook (`ScoreHead`), since its own pooling would take
the packed row's last token for every sequence. TRL's padding-free collator and NeMo RL's sequence packing feed
models the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from rlplane.spec.sections import TrainSpec
from trainer_core.backends import Backend, MicroStep, micro_batch_ranges
from trainer_core.models import ModelError

# --- which rows go together ---


def cost(sizes: Sequence[Sequence[int]], padding_free: bool) -> int:
    """Tokens a micro-batch of these items puts through the model; each item is its sequences' lengths (a preference
    pair has two)."""
    lengths = [n for item in sizes for n in item]
    return sum(lengths) if padding_free else len(lengths) * max(lengths, default=0)


def budget_groups(sizes: Sequence[Sequence[int]], budget: int, padding_free: bool) -> list[list[int]]:
    """Item indices in micro-batches of at most `budget` tokens (`cost`), longest items first, each into the first
    micro-batch it fits (padded: the one it started, since a longer row behind would widen every row)."""
    order = sorted(range(len(sizes)), key=lambda i: -max(sizes[i], default=0))
    groups: list[list[int]] = []
    tokens: list[int] = []  # padding-free: each group's real tokens; padded: its rows (its first row is its longest)
    for i in order:
        if padding_free:
            need = sum(sizes[i])
            home = next((k for k, used in enumerate(tokens) if used + need <= budget), None)
        else:
            need = len(sizes[i])
            fits = groups and (tokens[-1] + need) * max(sizes[groups[-1][0]]) <= budget
            home = len(groups) - 1 if fits else None
        if home is None:
            groups.append([i])
            tokens.append(need)
        else:
            groups[home].append(i)
            tokens[home] += need
    return groups


def split_to(groups: list[list[int]], count: int, sizes: Sequence[Sequence[int]], padding_free: bool) -> list[list[int]]:
    """`groups` split, the costliest with more than one item first, until there are `count` (a rank's micro-batch
    count must match its peers'). `count` is at most the number of items, so a split is always possible."""
    groups = [list(g) for g in groups]
    while len(groups) < count:
        splittable = [g for g in groups if len(g) > 1]
        if not splittable:
            raise ValueError(f"{sum(map(len, groups))} items cannot make {count} micro-batches.")
        largest = max(splittable, key=lambda g: cost([sizes[j] for j in g], padding_free))
        groups.remove(largest)
        half = len(largest) // 2
        groups += [largest[:half], largest[half:]]
    return groups


def micro_batches(sizes: Sequence[Sequence[int]], train: TrainSpec, backend: Backend, size: int | None = None) -> list[list[int]]:
    """This rank's items (their sequences' lengths) in micro-batches: by train.micro_batch_tokens when set (as many on
    every rank), else `size` items each (default train.micro_batch_size; None: all in one), in order."""
    if train.micro_batch_tokens is None:
        return [list(r) for r in micro_batch_ranges(range(len(sizes)), size or train.micro_batch_size)]
    groups = budget_groups(sizes, train.micro_batch_tokens, train.padding_free)
    count = int(backend.all_reduce(torch.tensor([float(len(groups))]), "max")[0])
    return split_to(groups, count, sizes, train.padding_free)


def row_sizes(attention_mask: torch.Tensor, padding_free: bool) -> list[list[int]]:
    """Rows of an already padded batch (a rollout) as one-sequence items for `micro_batches`: their real tokens when
    padding-free, else the batch's width, which every row of it takes."""
    if not padding_free:
        return [[attention_mask.shape[1]]] * attention_mask.shape[0]
    return [[int(n)] for n in attention_mask.sum(dim=1).tolist()]


@contextlib.contextmanager
def catching(head: ScoreHead | None) -> Iterator[None]:
    """`head.catching()`, or nothing without a head (a padded run)."""
    with head.catching() if head is not None else contextlib.nullcontext():
        yield


# --- one row of real tokens ---


@dataclass(frozen=True)
class Packed:
    """A padded batch's real tokens as one row: the model's inputs, and where each token sits in the padded layout."""

    inputs: dict[str, Any]  # input_ids and position_ids [1, T], use_cache False
    rows: torch.Tensor  # [T]: the padded row of each packed token
    cols: torch.Tensor  # [T]: its column there
    shape: tuple[int, int]  # [B, L] of the padded batch
    ends: torch.Tensor  # [B]: the packed index of each row's last real token

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """[1, T, ...] -> [B, L, ...], zeros where the padded batch had padding (gradients flow to the packed tensor)."""
        out = packed.new_zeros((*self.shape, *packed.shape[2:]))
        return out.index_put((self.rows, self.cols), packed[0])


def pack(inputs: dict[str, torch.Tensor]) -> Packed:
    """Padded model inputs (input_ids, attention_mask, optionally position_ids: left or right padding) as one row.
    Without position_ids a row's positions count its real tokens, as the padded forward's do."""
    mask = inputs["attention_mask"].bool()
    positions = inputs.get("position_ids")
    if positions is None:
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    rows, cols = mask.nonzero(as_tuple=True)  # row-major: each row's tokens together, in order
    lengths = mask.sum(dim=1)
    packed = {"input_ids": inputs["input_ids"][rows, cols][None], "position_ids": positions[rows, cols][None], "use_cache": False}
    return Packed(packed, rows, cols, tuple(mask.shape), lengths.cumsum(0) - 1)


def unpacked(output: Any, packed: Packed) -> Any:
    """A model's output on a packed row in the padded layout: an HF output's logits, or each tensor of a tuple (PPO's
    (logits, values))."""
    if isinstance(output, tuple):
        return tuple(packed.unpack(t) for t in output)
    return SimpleNamespace(logits=packed.unpack(output.logits))


def micro_step(inputs: dict[str, torch.Tensor], finish: Callable[[Any], Any], padding_free: bool) -> MicroStep:
    """A micro-batch as the recipe states it (padded inputs; `finish` reads the padded output), run padding-free when
    asked: the packed row goes through the model and `finish` gets the output back in the padded layout."""
    if not padding_free:
        return MicroStep(inputs, finish)
    packed = pack(inputs)
    return MicroStep(packed.inputs, lambda output: finish(unpacked(output, packed)))


def forward(model: nn.Module, inputs: dict[str, torch.Tensor], padding_free: bool) -> Any:
    """One forward outside training (a reference's log-probs), padding-free when asked; the output as padded."""
    if not padding_free:
        return model(**inputs)
    packed = pack(inputs)
    return unpacked(model(**packed.inputs), packed)


# --- score models ---


class ScoreHead:
    """A sequence-classification model's per-token head output, caught by a forward hook while a packed row goes
    through it, and pooled per sequence as the model's own forward pools a padded batch: at each sequence's last
    token that is not the pad id (transformers' *ForSequenceClassification)."""

    def __init__(self, model: nn.Module) -> None:
        head = getattr(model, "score", None)
        if not isinstance(head, nn.Module):
            raise ModelError(
                f"train.padding_free: {type(model).__name__} has no `score` head to read per token; "
                "set train.padding_free: false for this reward model"
            )
        self.head, self.pad_id, self.caught = head, model.config.pad_token_id, []

    @contextlib.contextmanager
    def catching(self) -> Iterator[None]:
        """While inside, each forward's per-token scores are kept, in order, for `pooled` to take."""
        handle = self.head.register_forward_hook(lambda _module, _args, out: self.caught.append(out))
        try:
            yield
        finally:
            handle.remove()
            self.caught.clear()

    def pooled(self, packed: Packed) -> SimpleNamespace:
        """The next caught forward's scores at each sequence's pooling token: an output with .logits [B, labels]."""
        per_token = packed.unpack(self.caught.pop(0))  # [B, L, labels]
        ids = torch.zeros(packed.shape, dtype=torch.long, device=per_token.device)
        ids = ids.index_put((packed.rows, packed.cols), packed.inputs["input_ids"][0])
        real = torch.zeros(packed.shape, dtype=torch.bool, device=per_token.device)
        real = real.index_put((packed.rows, packed.cols), torch.ones_like(packed.rows, dtype=torch.bool))
        keep = real & (ids != self.pad_id) if self.pad_id is not None else real
        columns = torch.arange(packed.shape[1], device=per_token.device)
        last = (columns * keep).argmax(dim=-1)
        return SimpleNamespace(logits=per_token[torch.arange(packed.shape[0], device=per_token.device), last])

    def micro_step(self, inputs: dict[str, torch.Tensor], finish: Callable[[Any], Any], padding_free: bool) -> MicroStep:
        """`micro_step` for a score model: `finish` gets the pooled scores, as the padded forward gives them (run the
        steps inside `catching`)."""
        if not padding_free:
            return MicroStep(inputs, finish)
        packed = pack(inputs)
        return MicroStep(packed.inputs, lambda _output: finish(self.pooled(packed)))


# --- the model must keep packed sequences apart ---


def check_separates(model: nn.Module, backend: Backend, per_token: Callable[[Any], torch.Tensor] | None = None) -> None:
    """Refuse train.padding_free for a model whose attention lets packed sequences see each other: two short sequences
    scored packed and apart must agree. Every rank runs it (a sharded forward is a collective).
    `per_token`: the output's per-token tensor (default: .logits; a tuple's first)."""
    per_token = per_token or (lambda out: out[0] if isinstance(out, tuple) else out.logits)
    device = backend.device
    first, second = [3, 4, 5, 6], [7, 8, 9]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), backend.autocast():
            apart = [
                per_token(model(input_ids=torch.tensor([s], device=device), use_cache=False))[0].float() for s in (first, second)
            ]
            ids = torch.tensor([first + second], device=device)
            positions = torch.tensor([list(range(len(first))) + list(range(len(second)))], device=device)
            together = per_token(model(input_ids=ids, position_ids=positions, use_cache=False))[0].float()
    finally:
        model.train(was_training)
    scale = max(float(torch.cat(apart).abs().max()), 1.0)
    error = float((together - torch.cat(apart)).abs().max()) / scale
    if error > 1e-2:  # bf16 autocast stays within ~1e-2; a model that mixes the sequences is off by far more
        raise ModelError(
            f"train.padding_free: this model's attention does not keep packed sequences apart (relative difference "
            f"{error:.3g}); it needs a transformers model that reads sequence starts from position_ids "
            "(Llama, Qwen2, GPT-2, ... on transformers >= 4.56): set train.padding_free: false"
        )
