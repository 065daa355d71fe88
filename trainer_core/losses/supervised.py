"""Training losses: pure functions on tensors (no modules, no state, no model calls).

Shapes: logits are [B, T, V] and labels [B, T], aligned with the model's input ids; labels hold
IGNORE_INDEX (-100) where no loss is taken (prompt, padding). logits[:, t] scores labels[:, t + 1];
the shift happens here, so callers pass the model's logits and their labels as they are.
Log-probabilities are computed in at least float32, also for bf16/fp16 logits.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE_INDEX = -100
DpoLossType = Literal["sigmoid", "ipo", "hinge"]
DPO_LOSS_TYPES: tuple[str, ...] = ("sigmoid", "ipo", "hinge")


def token_logprobs(logits: Tensor, labels: Tensor, ignore_index: int = IGNORE_INDEX) -> tuple[Tensor, Tensor]:
    """Log-probability of each next label token, and the mask of positions that count.

    Both are [B, T - 1]: the last position has no next token and the first label has no
    prediction. Masked positions hold 0 in the log-probabilities.
    """
    # log p(y_{t+1} | y_<=t) = -CE(logits_t, y_{t+1}): logits at t predict the label at t + 1.
    logits, labels = logits[:, :-1], labels[:, 1:]
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    nll = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=ignore_index, reduction="none")
    return -nll.view(labels.shape), labels != ignore_index


def sft_loss(
    logits: Tensor,
    labels: Tensor,
    ignore_index: int = IGNORE_INDEX,
    reduction: Literal["mean", "sum"] = "mean",
) -> tuple[Tensor, Tensor]:
    """Next-token cross-entropy over the unmasked tokens, and how many there were.

    reduction="sum" returns the summed loss so gradient accumulation can divide by the total
    token count of all micro-batches (a mean of per-micro-batch means weighs short ones too much).
    With no unmasked token the loss is 0 (not NaN) and the count 0.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    logps, mask = token_logprobs(logits, labels, ignore_index)
    # L = -(1/N) Σ_t log p(y_t | y_<t) over the N unmasked tokens (maximum likelihood, the SFT objective).
    total = -logps.sum()
    num_tokens = mask.sum()
    if reduction == "sum":
        return total, num_tokens
    return total / num_tokens.clamp(min=1), num_tokens


def sequence_logprobs(logits: Tensor, labels: Tensor, ignore_index: int = IGNORE_INDEX, average: bool = False) -> Tensor:
    """log π(y | x) of each sequence's unmasked label tokens: [B].

    average=True divides by each row's token count (length-normalized, as IPO is usually run).
    A row with no unmasked token gets 0.
    """
    logps, mask = token_logprobs(logits, labels, ignore_index)
    # log π(y | x) = Σ_t log π(y_t | x, y_<t), the sequence log-likelihood in DPO (Rafailov et al. 2023, eq. 7).
    summed = logps.sum(dim=-1)
    if not average:
        return summed
    return summed / mask.sum(dim=-1).clamp(min=1)


def bradley_terry_loss(chosen_rewards: Tensor, rejected_rewards: Tensor, margin: Tensor | float | None = None) -> Tensor:
    """Pairwise reward-model loss, averaged over pairs; margin is a float or a per-pair tensor."""
    diff = chosen_rewards - rejected_rewards
    if margin is not None:
        diff = diff - margin
    # L = -log σ(r(x, y_c) - r(x, y_r) - m)  (Ouyang et al. 2022, eq. 1; margin m: Touvron et al. 2023, eq. 2).
    return -F.logsigmoid(diff).mean()


def attribute_loss(predicted: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """SteerLM's attribute model (Dong et al. 2023, "SteerLM") as a regression model, one output per attribute, as
    NeMo Aligner's regression reward model trains it on HelpSteer (Wang et al. 2023, "HelpSteer"): the squared error
    of every row's every attribute, averaged over both, and the absolute errors [B, N] (what eval/mae reports).
    `predicted` and `target` are [B, N]; computed in at least float32."""
    if predicted.shape != target.shape or predicted.ndim != 2:
        raise ValueError(
            f"predicted and target must both be [rows, attributes], got {tuple(predicted.shape)} and {tuple(target.shape)}"
        )
    error = predicted.float() - target.float()
    return (error**2).mean(), error.detach().abs()


def pairwise_metrics(chosen: Tensor, rejected: Tensor) -> dict[str, Tensor]:
    """accuracy: fraction of pairs with chosen > rejected (a tie counts 0); margin: mean(chosen - rejected)."""
    chosen, rejected = chosen.detach(), rejected.detach()
    return {
        "accuracy": (chosen > rejected).float().mean(),
        "margin": (chosen - rejected).float().mean(),
    }


class DpoLoss(NamedTuple):
    loss: Tensor  # mean of `losses`; call backward on this
    losses: Tensor  # [B], one per pair
    chosen_rewards: Tensor  # [B], β·(log π(y_c|x) - log π_ref(y_c|x)), detached
    rejected_rewards: Tensor  # [B], β·(log π(y_r|x) - log π_ref(y_r|x)), detached


def _check_dpo_args(logps: tuple[Tensor, ...], beta: float, loss_type: str, label_smoothing: float) -> None:
    if not beta > 0:
        raise ValueError(f"beta must be > 0 (the strength of the KL penalty), got {beta!r}")
    if loss_type not in DPO_LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {', '.join(DPO_LOSS_TYPES)}, got {loss_type!r}")
    if not 0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing!r}")
    if label_smoothing and loss_type != "sigmoid":
        raise ValueError(f"label_smoothing applies to loss_type='sigmoid' only; set it to 0 for {loss_type!r}")
    if len({tuple(t.shape) for t in logps}) != 1:
        shapes = ", ".join(str(tuple(t.shape)) for t in logps)
        raise ValueError(f"policy_*_logps and ref_*_logps must have one shape [B], got {shapes}")


def dpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float,
    loss_type: DpoLossType = "sigmoid",
    label_smoothing: float = 0.0,
    chosen_nll: Tensor | None = None,
    nll_weight: float = 0.0,
) -> DpoLoss:
    """DPO and its variants from sequence log-probabilities ([B] each, see `sequence_logprobs`).

    nll_weight > 0 adds nll_weight·chosen_nll to each pair's loss (RPO, Pang et al. 2024), with
    chosen_nll the policy's per-token negative log-likelihood of each chosen response [B]. It keeps
    the chosen answers likely: plain DPO can lower both responses' likelihood while their gap grows.
    """
    logps = (policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    _check_dpo_args(logps, beta, loss_type, label_smoothing)
    if nll_weight < 0 or (nll_weight > 0) != (chosen_nll is not None):
        raise ValueError("nll_weight must be >= 0, and chosen_nll is given exactly when nll_weight > 0")
    chosen_logratios = policy_chosen_logps - ref_chosen_logps
    rejected_logratios = policy_rejected_logps - ref_rejected_logps
    # h = log π(y_c|x)/π_ref(y_c|x) - log π(y_r|x)/π_ref(y_r|x), the log-ratio difference.
    h = chosen_logratios - rejected_logratios
    if loss_type == "sigmoid":
        # (1 - ε)·-log σ(βh) + ε·-log σ(-βh)  (Rafailov et al. 2023, eq. 7; ε > 0: cDPO, Mitchell 2023).
        losses = -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)
    elif loss_type == "ipo":
        # (h - 1/(2β))²  (Azar et al. 2023, eq. 17, with τ = β).
        losses = (h - 1 / (2 * beta)) ** 2
    else:
        # max(0, 1 - βh) = β·max(0, δ - h) with δ = 1/β  (SLiC-HF calibration loss, Zhao et al. 2023).
        losses = F.relu(1 - beta * h)
    if chosen_nll is not None:
        losses = losses + nll_weight * chosen_nll
    return DpoLoss(
        loss=losses.mean(),
        losses=losses,
        chosen_rewards=beta * chosen_logratios.detach(),
        rejected_rewards=beta * rejected_logratios.detach(),
    )


def spin_loss(
    policy_real_logps: Tensor,
    policy_synthetic_logps: Tensor,
    opponent_real_logps: Tensor,
    opponent_synthetic_logps: Tensor,
    beta: float,
) -> DpoLoss:
    """SPIN's loss (Chen et al. 2024, "Self-Play Fine-Tuning Converts Weak Language Models to Strong Language
    Models", arXiv:2401.01335, L_SPIN of §4) from sequence log-probabilities [B] each:

        ℓ(λ·log p_θ(y|x)/p_θt(y|x) − λ·log p_θ(y'|x)/p_θt(y'|x)),   ℓ(t) = log(1 + e^(−t))

    with y the data's answer, y' the opponent's (the model of iteration t) own answer, p_θt that opponent and
    λ = beta. It is DPO's sigmoid loss with the data's answer always chosen and the opponent as the reference;
    chosen_rewards and rejected_rewards are the two λ-scaled log-ratios."""
    _check_dpo_args(
        (policy_real_logps, policy_synthetic_logps, opponent_real_logps, opponent_synthetic_logps), beta, "sigmoid", 0.0
    )
    real = policy_real_logps - opponent_real_logps
    synthetic = policy_synthetic_logps - opponent_synthetic_logps
    losses = F.softplus(-beta * (real - synthetic))  # log(1 + e^(−t)), computed without overflow
    return DpoLoss(
        loss=losses.mean(), losses=losses, chosen_rewards=beta * real.detach(), rejected_rewards=beta * synthetic.detach()
    )


def dpo_metrics(out: DpoLoss) -> dict[str, float]:
    """Means over the batch of the implicit rewards (Rafailov et al. 2023, §5: r = β log π/π_ref)."""
    pair = pairwise_metrics(out.chosen_rewards, out.rejected_rewards)
    return {
        "rewards/chosen": out.chosen_rewards.float().mean().item(),
        "rewards/rejected": out.rejected_rewards.float().mean().item(),
        "rewards/margin": pair["margin"].item(),
        "rewards/accuracy": pair["accuracy"].item(),
    }


__all__ = [
    "DPO_LOSS_TYPES",
    "IGNORE_INDEX",
    "DpoLoss",
    "DpoLossType",
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
