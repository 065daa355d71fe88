"""Policy-gradient losses and the advantage estimates they use (PPO, GRPO): pure functions on tensors.

Shapes: per-token tensors are [B, R] over the R response positions of B rollouts, with `mask`
[B, R] (bool) marking the tokens a response really has (padding after its end is False).
Sequence-level tensors are [B]. Nothing here calls a model or keeps state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

KlEstimator = Literal["k1", "k3"]


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean over the masked-in entries (of each row when dim is given); 0 where there are none."""
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1)
    return (values * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def masked_whiten(values: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """(values - mean) / std over the masked-in entries; shift_mean=False keeps the mean (rewards)."""
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    return (whitened if shift_mean else whitened + mean) * mask.to(values.dtype)


def response_logprobs(logits: Tensor, input_ids: Tensor, prompt_width: int) -> Tensor:
    """log π(token) of each response token [B, R], from the model's logits over prompt + response [B, P+R, V].

    logits[:, t] predicts input_ids[:, t + 1], so the response tokens (positions P..P+R-1) are
    scored by logits P-1..P+R-2. Computed in at least float32.
    """
    scores = logits[:, prompt_width - 1 : -1]
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32))
    tokens = input_ids[:, prompt_width:]
    return torch.gather(F.log_softmax(scores, dim=-1), 2, tokens.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of each position's next-token distribution: -Σ p log p over the vocabulary."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    logp = F.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: KlEstimator = "k1") -> Tensor:
    """Per-token estimate of KL(π || π_ref) from the sampled tokens' log-probabilities.

    k1 = log π - log π_ref (unbiased, can be negative); k3 = r - log r - 1 with r = π_ref/π
    (unbiased, never negative, lower variance; Schulman 2020, as GRPO uses it).
    """
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        return log_ratio
    if estimator == "k3":
        return torch.exp(-log_ratio) + log_ratio - 1
    raise ValueError(f"estimator must be 'k1' or 'k3', got {estimator!r}")


def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016) over each response: (advantages, returns).

    δ_t = r_t + γ V_{t+1} - V_t, A_t = δ_t + γλ A_{t+1}; the value after a response's last token
    is 0 (the episode ends). returns = A + V are the value targets. Masked-out positions get 0.

    The recursion runs over the masked-in tokens alone: t+1 is the next one of them, so in a multi-turn episode the
    environment's tokens between two policy turns are part of the step from one policy token to the next (their
    state is in V of the next), not an end of the episode. A single response (its tokens first, padding after) is
    what it was.
    """
    mask_f = mask.to(values.dtype)
    values = values * mask_f
    advantages = torch.zeros_like(values)
    running = torch.zeros_like(values[:, 0])
    next_value = torch.zeros_like(values[:, 0])
    for t in reversed(range(values.shape[1])):
        keep = mask_f[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        here = delta + gamma * lam * running
        advantages[:, t] = here * keep
        running = torch.where(keep > 0, here, running)  # a masked-out position passes both on unchanged
        next_value = torch.where(keep > 0, values[:, t], next_value)
    return advantages, (advantages + values) * mask_f


def value_moments(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """[tokens, Σ R, Σ R², Σ (R - V), Σ (R - V)²] (float64) over the masked-in tokens: summed over ranks, the
    inputs of explained_variance."""
    keep = mask.bool()
    r, e = returns[keep].double(), (returns - values)[keep].double()
    count = torch.tensor(float(r.numel()), dtype=torch.float64, device=r.device)
    return torch.stack([count, r.sum(), (r**2).sum(), e.sum(), (e**2).sum()])


def explained_variance(moments: Tensor) -> float:
    """1 - Var(R - V) / Var(R): how much of the returns' variance the value head's predictions explain (1: all of it;
    0 or below: none; a critic health signal, as OpenAI baselines and trlx report it). NaN without variance."""
    count, r_sum, r_sq, e_sum, e_sq = (float(x) for x in moments)
    if count < 2:
        return float("nan")
    var_r = r_sq / count - (r_sum / count) ** 2
    var_e = e_sq / count - (e_sum / count) ** 2
    return 1.0 - var_e / var_r if var_r > 0 else float("nan")


class PolicyLoss(NamedTuple):
    loss: Tensor  # scalar: call backward on it
    clipfrac: Tensor  # share of tokens whose ratio was clipped
    approx_kl: Tensor  # mean of (r - 1) - log r between the updated and the rollout policy (≥ 0)
    clipfrac_low: Tensor  # ratio below 1 - cliprange with a negative advantage
    clipfrac_high: Tensor  # ratio above 1 + cliprange with a positive advantage
    ratio_mean: Tensor  # the importance ratio over response tokens
    ratio_min: Tensor
    ratio_max: Tensor


def ppo_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cliprange: float,
    rollout_weights: Tensor | None = None,
) -> PolicyLoss:
    """The clipped surrogate (Schulman et al. 2017, eq. 7), averaged over every response token of the batch;
    `rollout_weights`: per-token constants weighing it (truncated importance sampling, as grpo_loss takes them)."""
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    # L = -min(r A, clip(r, 1-ε, 1+ε) A): no gain from moving the ratio past the clip range.
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - cliprange, 1 + cliprange)
    surrogate = torch.maximum(unclipped, clipped)
    if rollout_weights is not None:
        surrogate = surrogate * rollout_weights.detach()
    loss = masked_mean(surrogate, mask)
    with torch.no_grad():
        clipfrac = masked_mean((clipped > unclipped).to(logprobs.dtype), mask)
        approx_kl = masked_mean(ratio - 1 - log_ratio, mask)
        low = masked_mean(((ratio < 1 - cliprange) & (advantages < 0)).to(logprobs.dtype), mask)
        high = masked_mean(((ratio > 1 + cliprange) & (advantages > 0)).to(logprobs.dtype), mask)
        keep = mask.bool()
        inside = ratio[keep] if keep.any() else ratio.new_ones(1)
        extremes = inside.min(), inside.max()
    return PolicyLoss(loss, clipfrac, approx_kl, low, high, masked_mean(ratio.detach(), mask), *extremes)


def ppo_value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, cliprange_value: float
) -> tuple[Tensor, Tensor]:
    """Clipped value loss, 0.5·max((V - R)², (clip(V, V_old ± ε) - R)²), and the share of clipped tokens."""
    clipped_values = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    unclipped_loss = (values - returns) ** 2
    clipped_loss = (clipped_values - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(unclipped_loss, clipped_loss), mask)
    with torch.no_grad():
        clipfrac = masked_mean((clipped_loss > unclipped_loss).to(values.dtype), mask)
    return loss, clipfrac


Baseline = Literal["group_mean", "rloo", "reinforce++"]
Aggregation = Literal["grpo", "dr_grpo", "dapo"]
ImportanceLevel = Literal["token", "sequence"]


def group_advantages(
    rewards: Tensor,
    group_size: int,
    baseline: Baseline = "group_mean",
    normalize_std: bool = True,
    reduce_sum: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """One advantage per response [N] from rewards [N] laid out as N / group_size groups of consecutive responses.

    group_mean: r - mean(group) (GRPO, Shao et al. 2024); rloo: r - mean(the group's others)
    (Ahmadian et al. 2024). normalize_std divides by the group's std (+1e-4): a group whose
    responses all scored the same gets advantage 0, not a division by zero. reinforce++: r - mean(group),
    whitened over the whole batch instead of each group (REINFORCE++ with a group baseline, Hu et al. 2025:
    a group's own std, a few responses, is a noisy scale); `reduce_sum` sums its [count, sum, sum of squares]
    moments over every rank's share of the batch (default: these rewards alone).
    """
    if rewards.ndim != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be [N] with N a multiple of group_size {group_size}, got {tuple(rewards.shape)}")
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2, got {group_size}")
    groups = rewards.view(-1, group_size)
    mean = groups.mean(dim=1, keepdim=True)
    if baseline == "rloo":
        centered = (groups - mean) * group_size / (group_size - 1)  # r - (Σ others)/(G-1)
    elif baseline in ("group_mean", "reinforce++"):
        centered = groups - mean
    else:
        raise ValueError(f"baseline must be 'group_mean', 'rloo' or 'reinforce++', got {baseline!r}")
    if normalize_std and baseline == "reinforce++":
        moments = centered_moments(centered.reshape(-1))
        moments = reduce_sum(moments) if reduce_sum is not None else moments
        count, total, squares = moments[0], moments[1], moments[2]
        batch_mean = total / count
        batch_var = (squares / count - batch_mean**2).clamp(min=0) * count / (count - 1).clamp(min=1)
        return ((centered.reshape(-1) - batch_mean) / (batch_var.sqrt() + 1e-4)).to(rewards.dtype)
    if normalize_std:
        centered = centered / (groups.std(dim=1, keepdim=True) + 1e-4)
    return centered.reshape(-1)


def centered_moments(rewards_centered: Tensor) -> Tensor:
    """[count, sum, sum of squares] (float64) of group-centered rewards: summed over ranks, REINFORCE++'s batch scale."""
    values = rewards_centered.to(torch.float64)
    return torch.stack(
        [torch.tensor(float(values.numel()), dtype=torch.float64, device=values.device), values.sum(), (values**2).sum()]
    )


def overlong_penalty(lengths: Tensor, max_tokens: int, buffer: int) -> Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), added to each response's reward: 0 up to
    max_tokens - buffer tokens, then falling linearly to -1 at max_tokens (a response cut off there gets -1)."""
    if not 0 < buffer <= max_tokens:
        raise ValueError(f"buffer must be in 1..max_tokens ({max_tokens}), got {buffer}")
    start = max_tokens - buffer
    return torch.clamp((start - lengths.to(torch.float32)) / buffer, min=-1.0, max=0.0)


def sequence_kl(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Σ over each response's tokens of log π - log π_ref (k1): the KL a reward carries when the penalty is in the
    reward (PPO's way, Ouyang et al. 2022) rather than in the loss."""
    return ((logprobs - ref_logprobs) * mask.to(logprobs.dtype)).sum(-1)


class GrpoLoss(NamedTuple):
    loss: Tensor
    policy_loss: Tensor  # the clipped surrogate part, aggregated as the loss is
    kl: Tensor  # mean per-token KL estimate to the reference
    clipfrac: Tensor  # tokens whose ratio was clipped (either side)
    approx_kl: Tensor
    clipfrac_low: Tensor  # ratio below 1 - cliprange with a negative advantage
    clipfrac_high: Tensor  # ratio above 1 + clip_high with a positive advantage
    ratio_mean: Tensor  # the importance ratio over response tokens (per response, with importance "sequence")
    ratio_min: Tensor
    ratio_max: Tensor


def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    ref_logprobs: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    cliprange: float,
    beta: float,
    estimator: KlEstimator = "k3",
    *,
    clip_high: float | None = None,
    aggregation: Aggregation = "grpo",
    importance: ImportanceLevel = "token",
    max_tokens: int | None = None,
    token_normalizer: float | None = None,
    rollout_weights: Tensor | None = None,
) -> GrpoLoss:
    """GRPO's objective (Shao et al. 2024, eq. 3): per token, the clipped surrogate with the response's
    advantage plus β·KL to the reference, and its variants:

    clip_high       the upper clip 1 + clip_high instead of 1 + cliprange ("clip-higher", DAPO: Yu et al. 2025)
    importance      token: each token's ratio; sequence: one ratio per response, exp of its tokens' mean log-ratio
                    (GSPO: Zheng et al. 2025), clipped as one
    aggregation     grpo: mean over each response's tokens, then over responses (longer responses weigh less per
                    token); dr_grpo: sum over tokens / (responses · max_tokens), a constant (Dr. GRPO: Liu et al.
                    2025, "Understanding R1-Zero-Like Training"); dapo: sum over tokens / token_normalizer, the
                    tokens of the whole step's batch (DAPO's token-level loss)
    rollout_weights per token, constants that weigh the surrogate (not the KL term): truncated importance sampling's
                    min(π_trainer / π_engine, C) for tokens a rollout engine drew (Yao et al. 2025)
    """
    log_ratio = logprobs - old_logprobs
    mask_f = mask.to(logprobs.dtype)
    if importance == "sequence":
        log_ratio = ((log_ratio * mask_f).sum(-1) / mask_f.sum(-1).clamp(min=1)).unsqueeze(1)
    elif importance != "token":
        raise ValueError(f"importance must be 'token' or 'sequence', got {importance!r}")
    ratio = torch.exp(log_ratio)
    adv = advantages.unsqueeze(1)
    high = cliprange if clip_high is None else clip_high
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1 - cliprange, 1 + high)
    surrogate = torch.maximum(unclipped, clipped).expand_as(logprobs)
    if rollout_weights is not None:
        surrogate = surrogate * rollout_weights.detach()
    if ref_logprobs is not None and beta > 0:
        kl = kl_penalty(logprobs, ref_logprobs, estimator)
    else:
        kl = torch.zeros_like(logprobs)

    def aggregate(per_token: Tensor) -> Tensor:
        if aggregation == "grpo":
            return masked_mean(per_token, mask, dim=1).mean()
        if aggregation == "dr_grpo":
            if max_tokens is None:
                raise ValueError("aggregation dr_grpo needs max_tokens (the generation's max_new_tokens)")
            return (per_token * mask_f).sum() / (per_token.shape[0] * max_tokens)
        if aggregation == "dapo":
            normalizer = token_normalizer if token_normalizer is not None else mask_f.sum().clamp(min=1)
            return (per_token * mask_f).sum() / normalizer
        raise ValueError(f"aggregation must be 'grpo', 'dr_grpo' or 'dapo', got {aggregation!r}")

    loss = aggregate(surrogate + beta * kl)
    with torch.no_grad():
        policy_loss = aggregate(surrogate)
        kl_mean = masked_mean(kl, mask, dim=1).mean()
        token_ratio = ratio.expand_as(logprobs)
        clipfrac = masked_mean((clipped > unclipped).expand_as(logprobs).to(logprobs.dtype), mask)
        low = ((ratio < 1 - cliprange) & (adv < 0)).expand_as(logprobs).to(logprobs.dtype)
        high_clipped = ((ratio > 1 + high) & (adv > 0)).expand_as(logprobs).to(logprobs.dtype)
        approx_kl = masked_mean(token_ratio - 1 - log_ratio.expand_as(logprobs), mask)
        present = mask.bool()
        ratios = token_ratio[present] if present.any() else torch.ones(1, device=logprobs.device)
        return GrpoLoss(
            loss,
            policy_loss,
            kl_mean,
            clipfrac,
            approx_kl,
            masked_mean(low, mask),
            masked_mean(high_clipped, mask),
            masked_mean(token_ratio, mask),
            ratios.min(),
            ratios.max(),
        )
