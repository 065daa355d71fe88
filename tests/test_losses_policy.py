"""trainer_core.losses.policy and the KL controller: hand-computed values for GAE (a multi-turn episode's equals GAE
over its policy tokens alone), the clipped PPO losses and their health signals, GRPO's group advantages (mean and
leave-one-out) and loss, and the KL estimators."""

from __future__ import annotations

import math

import pytest
import torch

from trainer_core.losses.policy import (
    gae,
    group_advantages,
    grpo_loss,
    kl_penalty,
    masked_mean,
    masked_whiten,
    ppo_policy_loss,
    ppo_value_loss,
    response_logprobs,
)
from trainer_core.recipes.kl_control import KlController


def test_gae_by_hand_with_the_episode_ending_at_the_mask() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0, 9.0]])
    values = torch.tensor([[0.5, 0.2, 0.4, 7.0]])
    mask = torch.tensor([[True, True, True, False]])  # the 4th position is padding: ignored
    gamma, lam = 0.9, 0.8
    d2 = 1.0 - 0.4  # last real token: no next value
    d1 = 0.0 + gamma * 0.4 - 0.2
    d0 = 0.0 + gamma * 0.2 - 0.5
    a2 = d2
    a1 = d1 + gamma * lam * a2
    a0 = d0 + gamma * lam * a1
    advantages, returns = gae(rewards, values, mask, gamma, lam)
    assert advantages.tolist()[0] == pytest.approx([a0, a1, a2, 0.0])
    assert returns.tolist()[0] == pytest.approx([a0 + 0.5, a1 + 0.2, a2 + 0.4, 0.0])


def test_gae_of_a_multi_turn_episode_skips_the_environments_tokens() -> None:
    """Policy tokens, two of the environment's (masked out), policy tokens again, padding: the advantages and returns
    of the policy's tokens are those of the same tokens without the gap (the environment's answer is part of the
    step between two policy tokens, not an end), and the gap's are 0."""
    rewards = torch.tensor([[0.1, 0.0, 5.0, 5.0, -0.2, 1.0, 9.0]])
    values = torch.tensor([[0.5, 0.2, 3.0, 3.0, 0.4, 0.3, 7.0]])
    mask = torch.tensor([[True, True, False, False, True, True, False]])
    gamma, lam = 0.9, 0.8
    advantages, returns = gae(rewards, values, mask, gamma, lam)
    keep = mask[0]
    alone_a, alone_r = gae(rewards[:, keep], values[:, keep], torch.ones(1, 4, dtype=torch.bool), gamma, lam)
    assert advantages[0, keep].tolist() == pytest.approx(alone_a[0].tolist())
    assert returns[0, keep].tolist() == pytest.approx(alone_r[0].tolist())
    assert advantages[0, ~keep].tolist() == [0.0, 0.0, 0.0] and returns[0, ~keep].tolist() == [0.0, 0.0, 0.0]
    d1 = 0.0 + gamma * 0.4 - 0.2  # the token before the gap looks past it, to the next policy token's value
    assert float(alone_a[0, 1]) == pytest.approx(d1 + gamma * lam * float(alone_a[0, 2]))


def test_ppo_policy_loss_clips_the_ratio_in_the_advantage_direction() -> None:
    old = torch.zeros(1, 3)
    new = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))  # ratios 1.5, 0.5, 1.1
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    out = ppo_policy_loss(new, old, adv, mask, cliprange=0.2)
    # token 1: min(1.5, 1.2)·1 -> 1.2; token 2: -min(0.5·-1, 0.8·-1) = 0.8; token 3: unclipped 2.2
    assert out.loss.item() == pytest.approx(-(1.2 - 0.8 + 2.2) / 3)
    assert out.clipfrac.item() == pytest.approx(2 / 3)
    ratios = torch.tensor([1.5, 0.5, 1.1])
    assert out.approx_kl.item() == pytest.approx(float((ratios - 1 - ratios.log()).mean()))
    # the health signals: token 2 under 1 - 0.2 with a negative advantage, token 1 over 1 + 0.2 with a positive one
    assert out.clipfrac_low.item() == pytest.approx(1 / 3) and out.clipfrac_high.item() == pytest.approx(1 / 3)
    assert out.ratio_mean.item() == pytest.approx(3.1 / 3)
    assert (out.ratio_min.item(), out.ratio_max.item()) == pytest.approx((0.5, 1.5))


def test_ppo_value_loss_takes_the_worse_of_clipped_and_unclipped() -> None:
    values, old, returns = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[2.0, 0.1]])
    loss, clipfrac = ppo_value_loss(values, old, returns, torch.ones(1, 2, dtype=torch.bool), cliprange_value=0.2)
    # token 1: unclipped (1-2)² = 1, clipped (0.2-2)² = 3.24 -> 3.24; token 2: 0.01 both
    assert loss.item() == pytest.approx(0.5 * (3.24 + 0.01) / 2)
    assert clipfrac.item() == pytest.approx(0.5)


def test_group_advantages_mean_and_leave_one_out() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])  # two groups of 4; the second all equal
    plain = group_advantages(rewards, 4, "group_mean", normalize_std=False)
    assert plain.tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])
    rloo = group_advantages(rewards, 4, "rloo", normalize_std=False)
    assert rloo.tolist()[:4] == pytest.approx([1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3])
    scaled = group_advantages(rewards, 4, "group_mean", normalize_std=True)
    std = float(torch.tensor([1.0, 0.0, 0.0, 1.0]).std())
    assert scaled.tolist()[0] == pytest.approx(0.5 / (std + 1e-4)) and scaled.tolist()[4:] == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_advantages(rewards[:7], 4)


def test_kl_estimators() -> None:
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    assert kl_penalty(logp, ref, "k1").tolist() == pytest.approx([0.5, -1.0])
    k3 = [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1]
    assert kl_penalty(logp, ref, "k3").tolist() == pytest.approx(k3)
    assert (kl_penalty(logp, ref, "k3") >= 0).all()


def test_grpo_loss_averages_per_response_then_over_responses() -> None:
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, False, False]])
    adv = torch.tensor([1.0, -2.0])
    ref = torch.full((2, 3), -0.1)
    out = grpo_loss(logp, logp.detach(), ref, adv, mask, cliprange=0.2, beta=0.5, estimator="k3")
    k3 = math.exp(-0.1) + 0.1 - 1
    # each token: -A·1 + β·k3; response means: -1 + βk3 and 2 + βk3; then their mean
    assert out.loss.item() == pytest.approx(((-1 + 0.5 * k3) + (2 + 0.5 * k3)) / 2)
    assert out.kl.item() == pytest.approx(k3, rel=1e-5)
    out.loss.backward()
    # d/dlogp of -A·exp(logp - old) at ratio 1 is -A, spread over each response's own tokens
    assert logp.grad[1, 1:].tolist() == [0.0, 0.0]


def test_response_logprobs_score_the_tokens_after_the_prompt() -> None:
    logits = torch.randn(1, 5, 7)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    got = response_logprobs(logits, ids, prompt_width=3)
    want = torch.log_softmax(logits, -1)[0, [2, 3], [4, 5]]
    assert torch.allclose(got[0], want)


def test_masked_helpers_ignore_padding() -> None:
    values = torch.tensor([[1.0, 3.0, 100.0]])
    mask = torch.tensor([[True, True, False]])
    assert masked_mean(values, mask).item() == 2.0
    whitened = masked_whiten(values, mask)
    assert whitened[0, :2].tolist() == pytest.approx([-1.0, 1.0], abs=1e-4) and whitened[0, 2] == 0


def test_kl_controller_fixed_and_adaptive() -> None:
    fixed = KlController(0.1)
    fixed.update(100.0, 32)
    assert fixed.value == 0.1
    adaptive = KlController(0.1, target=6.0, horizon=10000)
    adaptive.update(12.0, 256)  # error clipped to +0.2
    assert adaptive.value == pytest.approx(0.1 * (1 + 0.2 * 256 / 10000))
    adaptive.update(5.4, 256)  # error -0.1
    again = KlController(0.0)
    again.load_state_dict(adaptive.state_dict())
    assert again.value == adaptive.value == pytest.approx(0.1 * (1 + 0.2 * 256 / 10000) * (1 - 0.1 * 256 / 10000))
