"""A GPTModel shard's final hidden states (after the final norm), for heads that read the trunk.

A reward model's score head and PPO's value head read the transformer's last hidden states, not
its logits. GPTModel.forward is embedding -> decoder -> output layer; `final_hidden_states` runs
the first two as forward does (megatron-core 0.16's `_preprocess`, then `decoder`, whose last
module is the final norm when the model post-processes) and stops there, so a score model never
computes vocabulary logits. `logits_from_hidden` is forward's remaining step, for a policy whose
value head also needs the hidden states (both from one pass).
"""

from __future__ import annotations

import torch
from megatron.core.models.gpt import GPTModel
from megatron.core.tensor_parallel import gather_from_sequence_parallel_region


def final_hidden_states(gpt: GPTModel, input_ids: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[seq, batch, hidden] (megatron's layout), the same on every TP rank (row-parallel outputs are all-reduced);
    under sequence parallelism this rank's [seq / tp, batch, hidden] (`whole_sequence` gathers them)."""
    preprocessed = gpt._preprocess(input_ids=input_ids, position_ids=position_ids)
    decoder_input, rotary_pos_emb, rotary_pos_cos, rotary_pos_sin, sequence_len_offset, padding_mask = preprocessed[:6]
    return gpt.decoder(
        hidden_states=decoder_input,
        attention_mask=mask,
        rotary_pos_emb=rotary_pos_emb,
        rotary_pos_cos=rotary_pos_cos,
        rotary_pos_sin=rotary_pos_sin,
        rotary_pos_cos_sin=preprocessed[6] if len(preprocessed) == 7 else None,
        sequence_len_offset=sequence_len_offset,
        padding_mask=padding_mask,
    )


def logits_from_hidden(gpt: GPTModel, hidden: torch.Tensor) -> torch.Tensor:
    """GPTModel.forward's output step on `final_hidden_states`: [batch, seq, padded vocab] (gathered over TP
    when the model was built with parallel_output=False)."""
    weight = gpt.shared_embedding_or_output_weight() if gpt.share_embeddings_and_output_weights else None
    logits, _ = gpt.output_layer(hidden, weight=weight)
    return logits.transpose(0, 1).contiguous()


def whole_sequence(gpt: GPTModel, hidden: torch.Tensor) -> torch.Tensor:
    """`final_hidden_states` over the whole sequence on every TP rank: gathered under sequence parallelism.

    For a head whole on every rank (a score or value head): each rank computes the same loss from the
    gathered states, so the backward pass keeps its own positions' gradient (a split, not a reduce-scatter)."""
    if not gpt.config.sequence_parallel:
        return hidden
    return gather_from_sequence_parallel_region(hidden, tensor_parallel_output_grad=False)
