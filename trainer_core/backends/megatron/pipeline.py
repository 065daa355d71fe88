"""Pipeline parallelism for the megatron backend: which layers a rank's stage holds, the weights it
takes from the whole model, and micro-batches run through megatron-core's own schedules.

The layers split evenly over `pipeline_parallel` stages, as megatron-core builds them: the first
stage also holds the embedding, the last the final norm and the output layer (and, with tied
embeddings, a copy of the embedding as its output layer, kept equal by summing the two copies'
gradients over megatron's embedding group). A training step runs its micro-batches through
`get_forward_backward_func()` (1F1B; on CPU through the shim in cpu_shim.py); the loss, and the
sums a recipe totals, exist on the last stage and are broadcast to the others. A forward pass
outside training (evaluation, a reference model) runs the same schedule forward-only and gives
every stage the last stage's output.

With virtual stages (virtual_stages.py) a rank holds several chunks of layers: training runs
megatron-core's interleaved schedule over them; a forward-only pass walks the chunks itself, since
that schedule needs at least pipeline_parallel micro-batches and such a pass has one. Nothing here
pickles: what travels between ranks is tensors (a JSON header as bytes where the receiver cannot
know a shape).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from trainer_core.backends.base import BackendError, MicroStep
from trainer_core.backends.megatron.virtual_stages import VirtualStages, chunks_of
from trainer_core.models.errors import ModelError
from trainer_core.models.megatron.config import Architecture
from trainer_core.models.megatron.convert import StateDict

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")
_FIRST_ONLY = ("embedding.",)
_LAST_ONLY = ("decoder.final_layernorm.", "output_layer.")
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8, torch.bool]
_HEADER = 10  # ndim, up to 8 sizes, dtype index


@dataclass(frozen=True)
class Stage:
    """This rank's share of the layers: stage `rank` of `size`, in `chunks` model chunks (virtual stages,
    virtual_stages.py) of `layers_per_chunk` layers each; chunk v holds layers from (v * size + rank) * layers_per_chunk.

    Its weights' local names are the chunk's GPTModel's (layers numbered from 0), under `<v>.` with more than one
    chunk (VirtualStages names them so)."""

    rank: int
    size: int
    layers_per_chunk: int
    chunks: int = 1

    @classmethod
    def of(cls, arch: Architecture, rank: int, size: int, chunks: int = 1) -> Stage:
        if arch.num_layers % (size * chunks):
            what = f"pipeline_parallel {size}" + (f" x virtual_pipeline_parallel {chunks}" if chunks > 1 else "")
            raise ModelError(
                f"{what} does not divide the model's {arch.num_layers} layers; pick sizes whose product divides them."
            )
        return cls(rank, size, arch.num_layers // (size * chunks), chunks)

    @property
    def first(self) -> bool:
        return self.rank == 0

    @property
    def last(self) -> bool:
        return self.rank == self.size - 1

    def first_layer(self, chunk: int = 0) -> int:
        return (chunk * self.size + self.rank) * self.layers_per_chunk

    def local_name(self, name: str) -> str | None:
        """A whole-model weight name (megatron's) -> its name on this rank; None where another stage holds it."""
        chunk, local = 0, name
        match = _LAYER.match(name)
        if match is not None:
            block, offset = divmod(int(match.group(1)), self.layers_per_chunk)
            chunk, rank = divmod(block, self.size)
            if rank != self.rank:
                return None
            local = f"decoder.layers.{offset}.{name[match.end() :]}"
        elif name.startswith(_FIRST_ONLY):
            if not self.first:
                return None
        elif name.startswith(_LAST_ONLY):
            if not self.last:
                return None
            chunk = self.chunks - 1
        return self._in_chunk(chunk, local)

    def whole_name(self, local: str) -> str:
        """The inverse of `local_name`."""
        chunk = 0
        if self.chunks > 1:
            head, local = local.split(".", 1)
            chunk = int(head)
        return _renumber(local, self.first_layer(chunk))

    @property
    def output_name(self) -> str:
        """The last stage's output layer weight, by its local name."""
        return self._in_chunk(self.chunks - 1, "output_layer.weight")

    def _in_chunk(self, chunk: int, name: str) -> str:
        return f"{chunk}.{name}" if self.chunks > 1 else name


def stage_weights(weights: StateDict, stage: Stage | None, arch: Architecture) -> StateDict:
    """Whole-model weights (a TP rank's shard of them) -> this stage's, by their local names; the last stage's
    output layer is the embedding itself where they are tied (megatron keeps a copy there)."""
    if stage is None:
        return weights
    out = {local: tensor for name, tensor in weights.items() if (local := stage.local_name(name)) is not None}
    if stage.last and arch.tie_word_embeddings and "embedding.word_embeddings.weight" in weights:
        out[stage.output_name] = weights["embedding.word_embeddings.weight"]
    return out


def whole_model_names(weights: StateDict, stage: Stage | None, arch: Architecture) -> StateDict:
    """The inverse for gathering: this stage's names -> the whole model's (the tied copy dropped)."""
    if stage is None:
        return weights
    out = {stage.whole_name(name): tensor for name, tensor in weights.items()}
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
    header = _header(tensor, device)
    dist.broadcast(header, src=src, group=group)
    if tensor is None:
        tensor = _empty_like_header(header, device)
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
    if stage is None:
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
    sends on (the last stage's: the tensor its output is made of).

    With virtual stages, training runs megatron's interleaved schedule over the rank's chunks; a forward-only pass
    walks the chunks itself (`walk_chunks`), since that schedule needs at least pipeline_parallel micro-batches."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from trainer_core.backends.megatron.cpu_shim import apply_cpu_shim

    apply_cpu_shim()
    chunks = chunks_of(wrapper.gpt)
    if len(chunks) > 1 and forward_only:
        return walk_chunks(wrapper, steps, stage_forward)
    if len(chunks) > 1:
        _check_micro_batches(chunks[0].config, len(steps))

    def forward_step(iterator: Iterator[MicroStep], chunk: Any) -> tuple[torch.Tensor, Callable[..., Any]]:
        step = next(iterator)
        with _running(wrapper.gpt, chunk):
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
        # One iterator per chunk: the interleaved schedule draws each chunk's micro-batches from its own.
        data_iterator=[iter(steps) for _ in chunks] if len(chunks) > 1 else iter(steps),
        model=chunks,  # megatron reads its config and sets each stage's input tensor on it
        num_microbatches=len(steps),
        seq_length=first.shape[-1],  # shapes travel with the tensors (variable_seq_lengths)
        micro_batch_size=first.shape[0],
        forward_only=forward_only,
    )


def _check_micro_batches(config: Any, count: int) -> None:
    """megatron's interleaved schedule runs a chunk's micro-batches in groups of pipeline_parallel
    (`microbatch_group_size_per_vp_stage`'s default): a step needs a whole number of groups."""
    size = config.pipeline_model_parallel_size
    if count % size:
        raise BackendError(
            f"backend.virtual_pipeline_parallel needs a multiple of pipeline_parallel ({size}) micro-batches per "
            f"optimizer step on each data-parallel replica; this step has {count}. Pick train.micro_batch_size (and "
            f"train.batch_size) so each replica's batch splits into a multiple of {size}, or set "
            "virtual_pipeline_parallel: 1."
        )


@contextlib.contextmanager
def _running(gpt: Any, chunk: Any) -> Iterator[None]:
    """Calls on the wrapper go to `chunk` (a rank's one GPTModel, or one of its virtual stages)."""
    if not isinstance(gpt, VirtualStages):
        yield
        return
    index = next(i for i, candidate in enumerate(gpt) if candidate is chunk)
    with gpt.running(index):
        yield


def walk_chunks(
    wrapper: Any, steps: Sequence[MicroStep], stage_forward: Callable[..., torch.Tensor]
) -> list[dict[str, torch.Tensor]]:
    """A forward-only pass through virtual stages, a micro-batch at a time: every rank's chunk 0 in pipeline order,
    then every rank's chunk 1, and so on (each chunk's input from the rank before it, rank 0's from the last rank's
    previous chunk). On the last rank each step's {"output"}, on the others []."""
    stages: VirtualStages = wrapper.gpt
    ranks = dist.get_process_group_ranks(pipeline_group())
    rank, size = ranks.index(dist.get_rank()), len(ranks)
    device = next(stages.parameters()).device
    outputs: list[dict[str, torch.Tensor]] = []
    for step in steps:
        for index, chunk in enumerate(stages):
            first, last = rank == 0 and index == 0, rank == size - 1 and index == len(stages) - 1
            chunk.set_input_tensor(None if first else _receive(ranks[(rank - 1) % size], device))
            with stages.running(index):
                output = stage_forward(**step.inputs)
            if last:
                outputs.append({"output": output.detach()})
            else:
                _send(output, ranks[(rank + 1) % size])
    return outputs


def _send(tensor: torch.Tensor, destination: int) -> None:
    tensor = tensor.detach().contiguous()
    dist.send(_header(tensor, tensor.device), destination)
    dist.send(tensor, destination)


def _receive(source: int, device: torch.device) -> torch.Tensor:
    header = _header(None, device)
    dist.recv(header, source)
    tensor = _empty_like_header(header, device)
    dist.recv(tensor, source)
    return tensor


def _header(tensor: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """A tensor's shape and dtype as a fixed-size int64 tensor (zeros to receive into, for None)."""
    header = torch.zeros(_HEADER, dtype=torch.int64, device=device)
    if tensor is not None:
        header[0] = tensor.dim()
        header[1 : 1 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
        header[-1] = _DTYPES.index(tensor.dtype)
    return header


def _empty_like_header(header: torch.Tensor, device: torch.device) -> torch.Tensor:
    ndim, dtype = int(header[0]), _DTYPES[int(header[-1])]
    return torch.empty(header[1 : 1 + ndim].tolist(), dtype=dtype, device=device)


def inference_step(wrapper: Any, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, context: Any) -> torch.Tensor:
    """One decoding forward through the pipeline (generate.py's `step`): each stage runs its layers with its own
    KV cache in `context`; every stage gets the last stage's logits for the last position."""

    def stage_forward(input_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return wrapper.gpt(input_ids, position_ids, attention_mask, inference_context=context, runtime_gather_output=True)

    return forward_everywhere(wrapper, {"input_ids": ids, "position_ids": positions, "attention_mask": mask}, stage_forward)


def forward_everywhere(wrapper: Any, inputs: dict[str, Any], stage_forward: Callable[..., torch.Tensor]) -> torch.Tensor:
    """One forward-only pass of `inputs` through the pipeline; the last stage's output tensor on every stage."""
    outputs = run_schedule(wrapper, [MicroStep(inputs)], forward_only=True, stage_forward=stage_forward)
    device, last = next(wrapper.gpt.parameters()).device, wrapper.gpt.config.pipeline_model_parallel_size - 1
    return broadcast_tensor(outputs[0]["output"] if outputs else None, last, device)
