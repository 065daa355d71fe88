"""Pipeline parallelism for the megatron backend: which layers a rank's stage holds, the weights it
takes from the whole model, and micro-batches run through megatron-core's own schedules.

The layers split evenly over `pipeline_parallel` stages, as megatron-core builds them: the first
stage also holds the embedding, the last the final norm and the output layer (and, with tied
embeddings, a copy of the embedding as its output layer, kept equal by summing the two copies'
gradients over megatron's embedding group). A training step runs its micro-batches through
`get_forward_backward_func()` (1F1B; on CPU through the shim in cpu_shim.py); the loss, and the
sums a recipe totals, exist on the last stage and are broadcast to the others. A forward pass
outside training (evaluation, a reference model) runs the same schedule forward-only and gives
every stage the last stage's output. Nothing here pickles: what travels between ranks is tensors
(a JSON header as bytes where the receiver cannot know a shape).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from trainer_core.backends.base import MicroStep
from trainer_core.megatron.config import Architecture
from trainer_core.megatron.convert import StateDict
from trainer_core.models.errors import ModelError

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")
_FIRST_ONLY = ("embedding.",)
_LAST_ONLY = ("decoder.final_layernorm.", "output_layer.")
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8, torch.bool]
_HEADER = 10  # ndim, up to 8 sizes, dtype index


@dataclass(frozen=True)
class Stage:
    """This rank's share of the layers: `num_layers` from `first_layer` on, stage `rank` of `size`."""

    rank: int
    size: int
    first_layer: int
    num_layers: int

    @classmethod
    def of(cls, arch: Architecture, rank: int, size: int) -> Stage:
        if arch.num_layers % size:
            raise ModelError(
                f"pipeline_parallel {size} does not divide the model's {arch.num_layers} layers; "
                "pick a pipeline_parallel that divides them."
            )
        per_stage = arch.num_layers // size
        return cls(rank, size, rank * per_stage, per_stage)

    @property
    def first(self) -> bool:
        return self.rank == 0

    @property
    def last(self) -> bool:
        return self.rank == self.size - 1

    def holds(self, name: str) -> bool:
        """Whether a whole-model weight name (megatron's) lives on this stage."""
        match = _LAYER.match(name)
        if match is not None:
            return self.first_layer <= int(match.group(1)) < self.first_layer + self.num_layers
        if name.startswith(_FIRST_ONLY):
            return self.first
        if name.startswith(_LAST_ONLY):
            return self.last
        return True


WHOLE = None  # a layout without pipeline parallelism holds every weight


def stage_weights(weights: StateDict, stage: Stage | None, arch: Architecture) -> StateDict:
    """Whole-model weights (a TP rank's shard of them) -> this stage's, layers numbered from 0; the last stage's
    output layer is the embedding itself where they are tied (megatron keeps a copy there)."""
    if stage is None or stage.size == 1:
        return weights
    out = {_renumber(name, -stage.first_layer): tensor for name, tensor in weights.items() if stage.holds(name)}
    if stage.last and arch.tie_word_embeddings and "embedding.word_embeddings.weight" in weights:
        out["output_layer.weight"] = weights["embedding.word_embeddings.weight"]
    return out


def whole_model_names(weights: StateDict, stage: Stage | None, arch: Architecture) -> StateDict:
    """The inverse for gathering: this stage's names -> the whole model's (the tied copy dropped)."""
    if stage is None or stage.size == 1:
        return weights
    out = {_renumber(name, stage.first_layer): tensor for name, tensor in weights.items()}
    if stage.last and not stage.first and arch.tie_word_embeddings:
        out.pop("output_layer.weight", None)
    return out


def _renumber(name: str, offset: int) -> str:
    match = _LAYER.match(name)
    if match is None or offset == 0:
        return name
    return f"decoder.layers.{int(match.group(1)) + offset}.{name[match.end() :]}"


# --- tensors between stages ---


def pipeline_group() -> Any:
    return parallel_state.get_pipeline_model_parallel_group()


def _stage_rank(stage: int) -> int:
    """The global rank of pipeline stage `stage` in this rank's pipeline group."""
    return dist.get_process_group_ranks(pipeline_group())[stage]


def broadcast_tensor(tensor: torch.Tensor | None, stage: int, device: torch.device) -> torch.Tensor:
    """`tensor` from pipeline stage `stage` to every stage of this pipeline (the others pass None)."""
    group, src = pipeline_group(), _stage_rank(stage)
    header = torch.zeros(_HEADER, dtype=torch.int64, device=device)
    if tensor is not None:
        header[0] = tensor.dim()
        header[1 : 1 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
        header[-1] = _DTYPES.index(tensor.dtype)
    dist.broadcast(header, src=src, group=group)
    ndim, dtype = int(header[0]), _DTYPES[int(header[-1])]
    if tensor is None:
        tensor = torch.empty(header[1 : 1 + ndim].tolist(), dtype=dtype, device=device)
    else:
        tensor = tensor.detach().to(device).contiguous()
    dist.broadcast(tensor, src=src, group=group)
    return tensor


def broadcast_names(names: list[str] | None, stage: int, device: torch.device) -> list[str]:
    """A list of names from pipeline stage `stage` to every stage, as UTF-8 JSON bytes."""
    payload = None if names is None else torch.tensor(list(json.dumps(names).encode()), dtype=torch.uint8)
    return json.loads(bytes(broadcast_tensor(payload, stage, device).cpu().tolist()).decode())


def gather_stages(local: StateDict, stage: Stage | None, device: torch.device) -> StateDict:
    """Every stage's tensors (whole-model names) on every rank of the pipeline: the whole model's."""
    if stage is None or stage.size == 1:
        return local
    whole: StateDict = {}
    for source in range(stage.size):
        mine = source == stage.rank
        names = broadcast_names(sorted(local) if mine else None, source, device)
        for name in names:
            whole[name] = broadcast_tensor(local[name] if mine else None, source, device).cpu()
    return whole


# --- micro-batches through megatron's schedules ---


def run_schedule(
    wrapper: Any, steps: Sequence[MicroStep], forward_only: bool, stage_forward: Callable[..., torch.Tensor]
) -> list[dict[str, torch.Tensor]]:
    """Run `steps` through megatron-core's pipeline schedule; on the last stage, each step's {"sums"} (training:
    each step's `finish` of `wrapper.output(tensor)` gives the loss megatron backpropagates) or {"output"} (forward
    only, no `finish`), on the others []. `stage_forward(**inputs)`: this stage's part of the forward, the tensor it
    sends on (the last stage's: the tensor its output is made of)."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from trainer_core.megatron.cpu_shim import apply_cpu_shim

    apply_cpu_shim()

    def forward_step(iterator: Iterator[MicroStep], _model: Any) -> tuple[torch.Tensor, Callable[..., Any]]:
        step = next(iterator)
        output = stage_forward(**step.inputs)

        def loss_func(tensor: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            if step.finish is None:
                return tensor.new_zeros(()), {"output": tensor.detach()}
            loss, sums = step.finish(wrapper.output(tensor))
            return loss, {"sums": sums.detach()}

        return output, loss_func

    first = steps[0].inputs["input_ids"]
    return get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=iter(steps),
        model=[wrapper.gpt],  # megatron reads its config and sets each stage's input tensor on it
        num_microbatches=len(steps),
        seq_length=first.shape[-1],  # shapes travel with the tensors (variable_seq_lengths)
        micro_batch_size=first.shape[0],
        forward_only=forward_only,
    )


def inference_step(wrapper: Any, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, context: Any) -> torch.Tensor:
    """One decoding forward through the pipeline (generate.py's `step`): each stage runs its layers with its own
    KV cache in `context`; every stage gets the last stage's logits for the last position."""

    def stage_forward(input_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return wrapper.gpt(input_ids, position_ids, attention_mask, inference_context=context, runtime_gather_output=True)

    step = MicroStep({"input_ids": ids, "position_ids": positions, "attention_mask": mask})
    outputs = run_schedule(wrapper, [step], forward_only=True, stage_forward=stage_forward)
    device, last = next(wrapper.gpt.parameters()).device, wrapper.gpt.config.pipeline_model_parallel_size - 1
    return broadcast_tensor(outputs[0]["output"] if outputs else None, last, device)
