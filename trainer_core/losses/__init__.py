"""The losses, pure functions of tensors with the paper each follows cited where it is defined:

    supervised.py   SFT's token loss, the reward model's Bradley-Terry loss, SteerLM's attribute loss, DPO and its
                    variants, SPIN
    policy.py       PPO's clipped policy and value losses, GAE, KL estimators, GRPO's group advantages and loss
    ilql.py         ILQL's expectile, CQL and AWAC terms and its guided decoding

The supervised ones are importable from here (`from trainer_core.losses import sft_loss`).
"""

from trainer_core.losses.supervised import (
    IGNORE_INDEX,
    DpoLoss,
    attribute_loss,
    bradley_terry_loss,
    dpo_loss,
    dpo_metrics,
    pairwise_metrics,
    sequence_logprobs,
    sft_loss,
    spin_loss,
    token_logprobs,
)

__all__ = [
    "IGNORE_INDEX",
    "DpoLoss",
    "attribute_loss",
    "bradley_terry_loss",
    "dpo_loss",
    "dpo_metrics",
    "pairwise_metrics",
    "sequence_logprobs",
    "sft_loss",
    "spin_loss",
    "token_logprobs",
]
