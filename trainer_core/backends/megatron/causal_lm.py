"""A Megatron-Core GPTModel shard that the recipes call like the Hugging Face causal LM it replaced.

`MegatronCausalLM(input_ids=..., attention_mask=..., position_ids=...)` returns an object with `.logits` over the
model's REAL vocabulary, [batch, seq, vocab_size], on every tensor-parallel rank: the output layer
gathers its vocabulary slices (autograd-aware: the backward pass splits the gradient again) and the
padding columns past vocab_size are cut off, so a softmax over them equals the HF model's (padded
columns would otherwise add exp(0) terms to every normaliser).

Gathering the logits costs a full [batch, seq, padded vocab] tensor per rank; megatron's
vocab-parallel cross entropy would avoid it, but the recipes' losses (SFT, DPO log-probabilities)
take whole logits, and this keeps them unchanged. The Hugging Face model it came from stays beside
it, unregistered (its parameters are not this module's): checkpoints and exports write through it
(config, save_pretrained) with the weights gathered from the shards.

`output_hidden_states=True` (PPO's value head reads the trunk) also returns the final hidden states,
after the final norm, as `.hidden_states[-1]` ([batch, seq, hidden], the same on every TP rank); the
earlier layers' are not kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from megatron.core.models.gpt import GPTModel
from torch import nn

from trainer_core.backends.megatron.layout import Layout
from trainer_core.backends.megatron.model import causal_inputs
from trainer_core.backends.megatron.sequence_parallel import pad_sequence
from trainer_core.backends.megatron.trunk import final_hidden_states, logits_from_hidden, whole_sequence


@dataclass
class CausalLMOutput:
    """What the recipes read off a causal LM's forward: the logits (and the final hidden states when asked)."""

    logits: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


def attention_inputs(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions, megatron's mask: True = masked) for an HF-style call."""
    positions, mask = causal_inputs(input_ids)
    if attention_mask is not None:
        mask = mask | ~attention_mask.bool()[:, None, None, :]  # padded keys masked as HF masks them (True = masked)
    if position_ids is not None:
        # Learned positions (GPT-2) read them; megatron's rotary embedding (Llama) numbers the columns 0..seq-1
        # whatever they say, which gives the same attention: rotary scores depend on position differences only,
        # and a left-padded row's real tokens keep theirs (its padded keys are masked).
        positions = position_ids
    return positions, mask


class PipelineStage:
    """What a wrapper around this rank's GPTModel does under pipeline parallelism (`self.gpt`, `self.output`).

    A call runs this rank's stage only while megatron's schedule drives it (`stage_forward`: the last stage's output
    is the recipe's, the others' the hidden states they send on); called directly, without gradients
    (evaluation, a reference model), it runs the whole pipeline forward-only and every stage gets the last
    stage's output (`pipelined_forward`)."""

    gpt: GPTModel
    _stage_local = False

    @property
    def pipelined(self) -> bool:
        return self.gpt.config.pipeline_model_parallel_size > 1

    @property
    def last_stage(self) -> bool:
        return bool(self.gpt.post_process)

    def stage_forward(self, **inputs: Any) -> torch.Tensor:
        """This stage's part of a forward pass, as megatron's schedule runs it: the tensor it sends on (hidden
        states), or on the last stage the tensor `output` turns into what the recipe reads (logits, scores)."""
        wrappers = [m for m in self.modules() if isinstance(m, PipelineStage)]  # type: ignore[attr-defined]
        for wrapper in wrappers:
            wrapper._stage_local = True
        try:
            output = self(**inputs)  # type: ignore[operator]
        finally:
            for wrapper in wrappers:
                wrapper._stage_local = False
        return output if isinstance(output, torch.Tensor) else self.output_tensor(output)

    def pipelined_forward(self, **inputs: Any) -> Any:
        """The whole pipeline, forward only, for a call outside training: the last stage's output on every stage."""
        from trainer_core.backends.megatron.pipeline import forward_everywhere

        if torch.is_grad_enabled():
            raise RuntimeError(
                "under pipeline parallelism a forward pass with gradients runs in backend.forward_backward (megatron's "
                "schedule); call the model directly only under torch.no_grad()."
            )
        return self.output(forward_everywhere(self, inputs, self.stage_forward))

    def output(self, tensor: torch.Tensor) -> Any:
        """The recipe's view of the last stage's output tensor."""
        raise NotImplementedError

    def output_tensor(self, output: Any) -> torch.Tensor:
        """The inverse of `output`: what the last stage hands the schedule."""
        return output.logits


class ShardOf(PipelineStage, nn.Module):
    """A GPTModel shard standing in for the Hugging Face model it was converted from."""

    def __init__(self, gpt: GPTModel, layout: Layout, hf_model: nn.Module) -> None:
        super().__init__()
        self.gpt, self.layout, self.arch = gpt, layout, layout.arch
        self._hf = [hf_model]  # a list: an attribute holding a Module would register its parameters here

    @property
    def hf_model(self) -> Any:
        """The Hugging Face model this shard was converted from (its config and save_pretrained; weights stale)."""
        return self._hf[0]

    @property
    def config(self) -> Any:
        return self.hf_model.config

    def megatron_inputs(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(input ids, positions, megatron's mask) of an HF-style call; under sequence parallelism padded on the
        right to a multiple of the TP size (cut the outputs back to input_ids' length)."""
        if self.gpt.config.sequence_parallel:
            tp_size = self.gpt.config.tensor_model_parallel_size
            input_ids, attention_mask, position_ids = pad_sequence(input_ids, attention_mask, position_ids, tp_size)
        positions, mask = attention_inputs(input_ids, attention_mask, position_ids)
        return input_ids, positions, mask


class MegatronCausalLM(ShardOf):
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        **unused: Any,
    ) -> CausalLMOutput | torch.Tensor:
        if unused:
            raise TypeError(f"the megatron causal LM takes input_ids, attention_mask and position_ids, not {sorted(unused)}")
        if self.pipelined and output_hidden_states and not (self._stage_local and self.last_stage):
            raise RuntimeError("a pipelined causal LM gives its hidden states on the last stage, inside megatron's schedule.")
        if self.pipelined and not self._stage_local:
            return self.pipelined_forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        length = input_ids.shape[-1]
        ids, positions, mask = self.megatron_inputs(input_ids, attention_mask, position_ids)
        if not output_hidden_states:
            logits = self.gpt(ids, positions, mask)
            if not self.last_stage:
                return logits  # the hidden states this stage sends on
            return self.output(logits[:, :length, : self.arch.vocab_size])
        hidden = final_hidden_states(self.gpt, ids, positions, mask)
        logits = logits_from_hidden(self.gpt, hidden)
        whole = whole_sequence(self.gpt, hidden)[:length]
        return CausalLMOutput(logits=logits[:, :length, : self.arch.vocab_size], hidden_states=(whole.transpose(0, 1),))

    def output(self, tensor: torch.Tensor) -> CausalLMOutput:
        return CausalLMOutput(logits=tensor)
