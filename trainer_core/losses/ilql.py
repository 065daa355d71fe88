"""ILQL losses (Snell et al. 2022, "Offline RL for Natural Language Generation with Implicit Language
Q Learning"): pure functions on tensors, no modules and no model calls.

Layout: a batch of B token sequences gives T = L - 1 transitions per row. Transition t is the state
after tokens 0..t (the hidden state at position t), the action is token t + 1, and `mask` [B, T]
marks the actions that are response tokens (prompt and padding masked). `values` [B, T + 1] holds
V(s_t) for every position, so values[:, t + 1] is the value of the state an action leads to.
Q-values are [B, T, V] over the whole vocabulary; `actions` [B, T] picks the taken token's value.
The reward is terminal: the row's scalar reward sits on its last action and 0 elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

# exp(beta * advantage) is capped, as IQL's reference implementation does, so one over-optimistic
# Q-value cannot make a single token's cross-entropy dominate the batch.
MAX_AWAC_WEIGHT = 100.0


def last_action(mask: Tensor) -> Tensor:
    """[B, T] bool: True at each row's last masked-in action (the terminal transition)."""
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask.bool(), positions, -1).max(dim=1, keepdim=True).values
    return mask.bool() & (positions == last)


def terminal_rewards(rewards: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row rewards [B] -> (per-action rewards [B, T] with each reward on the row's last action, terminal [B, T])."""
    terminal = last_action(mask)
    return terminal.to(rewards.dtype) * rewards[:, None], terminal


def q_targets(rewards: Tensor, next_values: Tensor, terminal: Tensor, gamma: float) -> Tensor:
    """r_t + γ·V(s_{t+1}), with no bootstrap past the terminal action (ILQL eq. 2, the TD target)."""
    return rewards + gamma * next_values * (~terminal.bool()).to(next_values.dtype)


def expectile_loss(diff: Tensor, tau: float) -> Tensor:
    """|τ - 1(diff < 0)|·diff² elementwise, diff = target - prediction (IQL eq. 5): τ > 0.5 fits an upper expectile."""
    weight = torch.where(diff < 0, 1.0 - tau, tau)
    return weight * diff.pow(2)


def cql_loss(q_values: Tensor, actions: Tensor) -> Tensor:
    """Cross-entropy of the Q-values as logits against the taken token, elementwise [B, T] (ILQL eq. 4):
    pushes down the Q-values of tokens the data never took."""
    flat = q_values.flatten(0, 1).float()
    return F.cross_entropy(flat, actions.flatten(), reduction="none").view(actions.shape)


def awac_weights(target_q: Tensor, values: Tensor, beta: float) -> Tensor:
    """exp(β·(Q_target(s, a) - V(s))), capped at MAX_AWAC_WEIGHT and without gradient (AWAC, Nair et al. 2020)."""
    exponent = (beta * (target_q - values)).detach().clamp(max=math.log(MAX_AWAC_WEIGHT))
    return exponent.exp()


@dataclass
class IlqlLoss:
    """`loss` is what to backpropagate (the weighted sum divided by `normalizer`); the rest are detached
    sums over the masked actions, for metrics reduced over micro-batches and ranks."""

    loss: Tensor
    loss_q: Tensor
    loss_v: Tensor
    loss_cql: Tensor
    loss_awac: Tensor
    q_sum: Tensor  # Q(s, a) of the taken actions, averaged over the Q heads
    v_sum: Tensor  # V(s) before each action
    actions: Tensor  # how many actions the sums run over

    def sums(self) -> Tensor:
        """[loss_q, loss_v, loss_cql, loss_awac, q, v, actions] as float64."""
        parts = [self.loss_q, self.loss_v, self.loss_cql, self.loss_awac, self.q_sum, self.v_sum, self.actions]
        return torch.stack([p.detach().double() for p in parts])


def ilql_loss(
    logits: Tensor,
    qs: list[Tensor],
    target_qs: list[Tensor],
    values: Tensor,
    actions: Tensor,
    rewards: Tensor,
    mask: Tensor,
    *,
    tau: float,
    gamma: float,
    cql_scale: float,
    awac_scale: float,
    beta: float,
    normalizer: float | Tensor | None = None,
) -> IlqlLoss:
    """The ILQL objective over [B, T] transitions (see the module docstring for shapes).

    rewards: per row [B], placed on each row's last action. Q heads regress to r + γ·V(s'); V to the
    τ-expectile of the smaller target Q; CQL and the advantage-weighted LM loss (logits [B, T, V], the
    policy's scores of the next token) are added with their scales. Every term is summed over masked
    actions (summed over Q heads too) and divided by `normalizer` (default: this batch's actions).
    """
    maskf = mask.to(torch.float32)
    step_rewards, terminal = terminal_rewards(rewards.float(), mask)
    v_now, v_next = values[:, :-1].float(), values[:, 1:].float()
    target = q_targets(step_rewards, v_next.detach(), terminal, gamma)

    taken = [q.float().gather(-1, actions[..., None]).squeeze(-1) for q in qs]
    target_taken = torch.stack([q.float().gather(-1, actions[..., None]).squeeze(-1) for q in target_qs]).min(dim=0).values
    target_taken = target_taken.detach()

    loss_q = sum((((q - target) ** 2) * maskf).sum() for q in taken)
    loss_v = (expectile_loss(target_taken - v_now, tau) * maskf).sum()
    loss_cql = sum((cql_loss(q, actions) * maskf).sum() for q in qs)
    lm_nll = F.cross_entropy(logits.flatten(0, 1).float(), actions.flatten(), reduction="none").view(actions.shape)
    loss_awac = (lm_nll * awac_weights(target_taken, v_now, beta) * maskf).sum()

    count = maskf.sum()
    scale = count.clamp(min=1.0) if normalizer is None else normalizer
    total = (loss_q + loss_v + cql_scale * loss_cql + awac_scale * loss_awac) / scale
    q_sum = (torch.stack(taken).mean(dim=0) * maskf).sum()
    return IlqlLoss(
        loss=total,
        loss_q=loss_q.detach(),
        loss_v=loss_v.detach(),
        loss_cql=loss_cql.detach(),
        loss_awac=loss_awac.detach(),
        q_sum=q_sum.detach(),
        v_sum=(v_now * maskf).sum().detach(),
        actions=count,
    )


def guided_logits(logits: Tensor, target_qs: list[Tensor], value: Tensor, beta: float) -> Tensor:
    """The policy's next-token logits shifted by β·(min Q_target(s, ·) - V(s)) (ILQL's sampling rule, eq. 6)."""
    q_min = torch.stack([q.float() for q in target_qs]).min(dim=0).values
    return logits.float() + beta * (q_min - value.float()[..., None])
