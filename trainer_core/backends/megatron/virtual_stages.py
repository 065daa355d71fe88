"""Virtual pipeline stages (megatron-core's interleaved schedule): a rank holds several model chunks.

With `virtual_pipeline_parallel: V` over P pipeline ranks the layers split into P x V chunks of
n = layers / (P x V); rank r holds chunks r, P + r, 2P + r, ... (its chunk v has layers
(v*P + r)*n onwards, megatron-core's `get_transformer_layer_offset` with `vp_stage`), so a forward
pass crosses the ranks V times and each rank's idle time at the start and end of a step (the bubble)
shrinks by V. The embedding sits in rank 0's chunk 0, the final norm and output layer in rank P-1's
chunk V-1.

`VirtualStages` holds one rank's chunks (each a GPTModel built with its `vp_stage`) and stands in
for the one GPTModel a rank has otherwise: its parameters are named `<v>.<the chunk's name>`, and
a call, and what the wrappers read (`pre_process`, `post_process`, `decoder`...), go to the chunk
being run (`current`, set by whoever drives the chunks: megatron's schedule in training, the
forward-only walk in pipeline.py otherwise).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from megatron.core.models.gpt import GPTModel
from torch import nn


class VirtualStages(nn.ModuleList):
    def __init__(self, chunks: Sequence[GPTModel]) -> None:
        super().__init__(chunks)
        self.current = 0

    @property
    def chunk(self) -> GPTModel:
        return self[self.current]

    @contextmanager
    def running(self, index: int) -> Iterator[GPTModel]:
        """Calls and reads go to chunk `index` while it lasts."""
        before, self.current = self.current, index
        try:
            yield self[index]
        finally:
            self.current = before

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.chunk(*args, **kwargs)

    # What the wrappers, trunk.py and the backend read off a GPTModel.

    @property
    def config(self) -> Any:
        return self[0].config

    @property
    def pre_process(self) -> bool:
        return bool(self.chunk.pre_process)

    @property
    def post_process(self) -> bool:
        return bool(self.chunk.post_process)

    @property
    def decoder(self) -> nn.Module:
        return self.chunk.decoder

    @property
    def output_layer(self) -> nn.Module:
        return self.chunk.output_layer

    @property
    def share_embeddings_and_output_weights(self) -> bool:
        return bool(self[0].share_embeddings_and_output_weights)

    def _preprocess(self, **kwargs: Any) -> Any:
        return self.chunk._preprocess(**kwargs)

    def shared_embedding_or_output_weight(self) -> torch.Tensor:
        return self.chunk.shared_embedding_or_output_weight()

    def set_input_tensor(self, tensor: Any) -> None:
        self.chunk.set_input_tensor(tensor)

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None) -> dict[str, Any]:
        """Every chunk's, under `<v>.` as `state_dict` names them; the sharded keys (where the checkpoint stores a
        tensor) are the chunks' own, with global layer numbers, so any other layout reads them."""
        state: dict[str, Any] = {}
        for index, chunk in enumerate(self):
            for name, value in chunk.sharded_state_dict(prefix, sharded_offsets, metadata).items():
                state[f"{index}.{name}"] = value
        return state


def chunks_of(gpt: nn.Module) -> list[GPTModel]:
    """A rank's model chunks in order: the one GPTModel, or every virtual stage's."""
    return list(gpt) if isinstance(gpt, VirtualStages) else [gpt]
