"""Recipe models with a head beside the transformer, their transformer run as a GPTModel shard.

- `MegatronScoreModel`: a Hugging Face sequence classifier (the reward recipe's model, one output):
  the trunk is the GPTModel shard, stopped at its final hidden states (trunk.py: no vocabulary
  logits), and the classifier's own `score` layer, whole on every TP rank, reads them at each row's
  last non-pad token, as the HF model pools.
- `MegatronComposite`: a recipe module around a causal LM (PPO's actor-critic: `policy` and a value
  head): a shallow copy of it whose causal LM is the MegatronCausalLM, its other children shared
  with the original (so the value head's parameters are the recipe's own, whole on every TP rank).

Heads get the same input on every TP rank (hidden states are replicated), so they compute the same
output and gradients there; the gradient they send into the trunk is therefore the whole one on
every rank, which is what megatron's TP layers expect of a replicated activation. Both keep the
recipe's original module beside them, unregistered, as `hf_model` (checkpoints name weights by it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from megatron.core.models.gpt import GPTModel
from torch import nn

from trainer_core.backends.megatron.causal_lm import MegatronCausalLM, PipelineStage, ShardOf
from trainer_core.backends.megatron.layout import Layout
from trainer_core.backends.megatron.trunk import final_hidden_states, whole_sequence


@dataclass
class ScoreOutput:
    """What the reward recipe reads off a sequence classifier: pooled logits [batch, num_labels]."""

    logits: torch.Tensor


class MegatronScoreModel(ShardOf):
    def __init__(self, gpt: GPTModel, layout: Layout, hf_model: nn.Module) -> None:
        super().__init__(gpt, layout, hf_model)
        self.score = hf_model.score  # the recipe's own head: its parameters stay the optimizer's

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **unused: Any,
    ) -> ScoreOutput | torch.Tensor:
        if unused:
            raise TypeError(f"the megatron score model takes input_ids, attention_mask and position_ids, not {sorted(unused)}")
        if self.pipelined and not self._stage_local:
            return self.pipelined_forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        ids, positions, mask = self.megatron_inputs(input_ids, attention_mask, position_ids)
        hidden = final_hidden_states(self.gpt, ids, positions, mask)
        if not self.last_stage:
            return hidden  # this stage's output, sent on to the next
        hidden = whole_sequence(self.gpt, hidden)[: input_ids.shape[-1]].transpose(0, 1)
        logits = self.score(hidden)
        # As the HF classifier pools: the rightmost token that is not padding (left or right padded rows alike).
        pad = self.config.pad_token_id
        if pad is None:
            last = torch.full((len(input_ids),), input_ids.shape[-1] - 1, device=input_ids.device)
        else:
            indices = torch.arange(input_ids.shape[-1], device=input_ids.device, dtype=torch.int32)
            last = (indices * (input_ids != pad).to(torch.int32)).argmax(-1)
        return self.output(logits[torch.arange(len(input_ids), device=logits.device), last])

    def output(self, tensor: torch.Tensor) -> ScoreOutput:
        return ScoreOutput(logits=tensor)


class MegatronComposite(PipelineStage, nn.Module):
    def __init__(self, root: nn.Module, name: str, causal: MegatronCausalLM, layout: Layout) -> None:
        super().__init__()
        swapped = copy.copy(root)
        swapped._modules = dict(root._modules)  # copy.copy shares the child table; the original keeps its HF model
        swapped._modules[name] = causal
        self.module = swapped
        self.layout = layout
        self._causal = [causal]
        self._hf = [root]

    @property
    def gpt(self) -> GPTModel:
        return self._causal[0].gpt

    @property
    def arch(self) -> Any:
        return self.layout.arch

    @property
    def hf_model(self) -> nn.Module:
        """The recipe's module as it built it (its causal LM the HF one: weights stale, `full_state` has them)."""
        return self._hf[0]

    def forward(self, **inputs: Any) -> Any:
        if self.pipelined and not self._stage_local:
            return self.pipelined_forward(**inputs)
        if self.pipelined and not self.last_stage:
            return self._causal[0](**inputs)  # the hidden states this stage sends on
        return self.module(**inputs)

    def output(self, tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, values): the last stage hands them to the schedule as one tensor, values in the last column."""
        return tensor[..., :-1], tensor[..., -1]

    def output_tensor(self, output: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        logits, values = output
        return torch.cat([logits, values.unsqueeze(-1).to(logits.dtype)], dim=-1)
