"""The GRPO family's variants (trainer_core.losses.policy) and PPO's explained variance: each against values
written out by hand with Python loops, and against TRL's own GRPO loss (GRPOTrainer._compute_loss, TRL 1.16) on the
same tensors for the variants TRL has (loss_type grpo / dr_grpo / dapo, epsilon_high, importance_sampling_level
token / sequence, beta)."""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from trainer_core.losses.policy import (
    centered_moments,
    group_advantages,
    grpo_loss,
    overlong_penalty,
    sequence_kl,
)

# Two responses of 3 and 2 tokens (the second padded), their log-probabilities now, at sampling and under the reference.
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
NEW = torch.tensor([[-1.0, -0.5, -2.0], [-0.2, -1.5, 0.0]], dtype=torch.float64)
OLD = torch.tensor([[-1.4, -0.5, -1.7], [-0.3, -1.0, 0.0]], dtype=torch.float64)
REF = torch.tensor([[-1.2, -0.7, -1.9], [-0.1, -1.2, 0.0]], dtype=torch.float64)
ADV = torch.tensor([1.0, -0.5], dtype=torch.float64)


def by_hand(eps_low: float, eps_high: float, beta: float, aggregation: str, sequence: bool, max_tokens: int = 4) -> float:
    """The loss, one token at a time."""
    rows = []
    for i in range(2):
        tokens = [t for t in range(3) if MASK[i, t]]
        seq_log_ratio = sum(float(NEW[i, t] - OLD[i, t]) for t in tokens) / len(tokens)
        per_token = []
        for t in tokens:
            ratio = math.exp(seq_log_ratio if sequence else float(NEW[i, t] - OLD[i, t]))
            clipped = min(max(ratio, 1 - eps_low), 1 + eps_high)
            surrogate = -min(ratio * float(ADV[i]), clipped * float(ADV[i]))
            delta = float(REF[i, t] - NEW[i, t])
            per_token.append(surrogate + beta * (math.exp(delta) - delta - 1))  # k3
        rows.append(per_token)
    if aggregation == "grpo":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    if aggregation == "dr_grpo":
        return sum(sum(r) for r in rows) / (len(rows) * max_tokens)
    return sum(sum(r) for r in rows) / sum(len(r) for r in rows)  # dapo


@pytest.mark.parametrize("aggregation", ["grpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("sequence", [False, True], ids=["token", "sequence"])
@pytest.mark.parametrize("eps_high, beta", [(0.2, 0.0), (0.28, 0.04)])
def test_variants_against_values_by_hand(aggregation, sequence, eps_high, beta):
    out = grpo_loss(
        NEW, OLD, REF, ADV, MASK, 0.2, beta, "k3",
        clip_high=eps_high, aggregation=aggregation, importance="sequence" if sequence else "token", max_tokens=4,
    )  # fmt: skip
    assert float(out.loss) == pytest.approx(by_hand(0.2, eps_high, beta, aggregation, sequence), abs=1e-12)
    assert float(out.policy_loss) == pytest.approx(by_hand(0.2, eps_high, 0.0, aggregation, sequence), abs=1e-12)


def test_clip_fractions_and_ratio_by_hand():
    out = grpo_loss(NEW, OLD, None, ADV, MASK, 0.2, 0.0, clip_high=0.28)
    ratios = [math.exp(float(NEW[i, t] - OLD[i, t])) for i in range(2) for t in range(3) if MASK[i, t]]
    # response 0 (advantage > 0): ratios e^0.4=1.49 (high-clipped), 1, e^-0.3=0.74; response 1 (< 0): e^0.1, e^-0.5=0.61 (low)
    assert float(out.clipfrac_high) == pytest.approx(1 / 5) and float(out.clipfrac_low) == pytest.approx(1 / 5)
    assert float(out.ratio_mean) == pytest.approx(sum(ratios) / 5)
    assert (float(out.ratio_min), float(out.ratio_max)) == pytest.approx((min(ratios), max(ratios)))


def test_dapo_over_micro_batches_is_the_whole_batch_token_mean():
    whole = grpo_loss(NEW, OLD, REF, ADV, MASK, 0.2, 0.04, aggregation="dapo")
    tokens = float(MASK.sum())
    parts = [grpo_loss(NEW[i : i + 1], OLD[i : i + 1], REF[i : i + 1], ADV[i : i + 1], MASK[i : i + 1], 0.2, 0.04,
                       aggregation="dapo", token_normalizer=tokens) for i in range(2)]  # fmt: skip
    assert float(sum(p.loss for p in parts)) == pytest.approx(float(whole.loss), abs=1e-12)


def test_baselines_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0], dtype=torch.float64)  # groups of 3: [1,0,0], [1,1,1]
    centered = [1 - 1 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0]
    group_mean = group_advantages(rewards, 3, "group_mean", normalize_std=False)
    assert group_mean.tolist() == pytest.approx(centered)
    rloo = group_advantages(rewards, 3, "rloo", normalize_std=False)
    assert rloo.tolist() == pytest.approx([1.0, -0.5, -0.5, 0.0, 0.0, 0.0])  # r - mean of the other two
    batch_mean = sum(centered) / 6
    batch_std = math.sqrt(sum((c - batch_mean) ** 2 for c in centered) / 5)
    plus = group_advantages(rewards, 3, "reinforce++")
    assert plus.tolist() == pytest.approx([(c - batch_mean) / (batch_std + 1e-4) for c in centered])
    # the batch's scale from moments summed over ranks: two halves give the whole
    other_half = centered_moments(torch.tensor(centered[3:], dtype=torch.float64))
    first_half = group_advantages(rewards[:3], 3, "reinforce++", reduce_sum=lambda mine: mine + other_half)
    assert first_half.tolist() == pytest.approx(plus[:3].tolist())
    assert group_advantages(rewards, 3, "reinforce++", normalize_std=False).tolist() == pytest.approx(centered)


def test_overlong_penalty_and_sequence_kl_by_hand():
    lengths = torch.tensor([10, 12, 14, 16])
    assert overlong_penalty(lengths, max_tokens=16, buffer=4).tolist() == pytest.approx([0.0, 0.0, -0.5, -1.0])
    kl = sequence_kl(NEW, REF, MASK)
    assert kl.tolist() == pytest.approx([0.2 + 0.2 - 0.1, -0.1 - 0.3])
    with pytest.raises(ValueError, match="buffer must be in 1..max_tokens"):
        overlong_penalty(lengths, max_tokens=16, buffer=17)


# --- TRL's GRPO loss on the same tensors ---


def trl_loss(loss_type: str, eps_high: float, level: str, beta: float, max_tokens: int) -> tuple[float, dict]:
    """GRPOTrainer._compute_loss with the model's log-probabilities given (NEW), on one process, no accumulation."""
    from trl import GRPOTrainer

    trainer = object.__new__(GRPOTrainer)  # the loss only: none of the trainer's set-up (model, data, accelerate)
    entropies = torch.zeros_like(NEW)
    trainer.__dict__.update(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (NEW.clone(), entropies, None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        loss_type=loss_type,
        epsilon_low=0.2,
        epsilon_high=eps_high,
        use_vllm=False,
        max_completion_length=max_tokens,
        current_gradient_accumulation_steps=1,
        _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        model=SimpleNamespace(training=True),
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        accelerator=SimpleNamespace(
            num_processes=1, gather=lambda x: x, gather_for_metrics=lambda x: x, reduce=lambda x, reduction: x,
            sync_gradients=True,
        ),
    )  # fmt: skip
    inputs = {
        "prompt_ids": torch.zeros(2, 1, dtype=torch.long),
        "prompt_mask": torch.ones(2, 1, dtype=torch.long),
        "completion_ids": torch.zeros(2, 3, dtype=torch.long),
        "completion_mask": MASK.long(),
        "advantages": ADV,
        "old_per_token_logps": OLD,
        "ref_per_token_logps": REF,
        "num_items_in_batch": MASK.sum(),
    }
    loss = GRPOTrainer._compute_loss(trainer, None, inputs)
    return float(loss), {k: v[-1] for k, v in trainer._metrics["train"].items()}


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("eps_high, beta", [(0.2, 0.0), (0.28, 0.04)])
def test_the_same_loss_as_trl(loss_type, level, eps_high, beta):
    theirs, metrics = trl_loss(loss_type, eps_high, level, beta, max_tokens=4)
    ours = grpo_loss(
        NEW, OLD, REF, ADV, MASK, 0.2, beta, "k3", clip_high=eps_high, aggregation=loss_type, importance=level, max_tokens=4
    )
    assert float(ours.loss) == pytest.approx(theirs, abs=1e-12)
    assert float(ours.clipfrac_low) == pytest.approx(metrics["clip_ratio/low_mean"], abs=1e-6)  # TRL reports float32
    assert float(ours.clipfrac_high) == pytest.approx(metrics["clip_ratio/high_mean"], abs=1e-6)
    if beta:
        assert float(ours.kl) == pytest.approx(metrics["kl"], rel=0.2)  # TRL: token mean; ours: per response, then mean


def test_explained_variance_by_hand_and_over_split_batches():
    from trainer_core.losses.policy import explained_variance, value_moments

    returns = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 9.0]])
    values = torch.tensor([[1.5, 1.5, 7.0], [2.0, 1.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]], dtype=torch.bool)  # the third tokens are padding
    r, v = [1.0, 2.0, 3.0, 0.0], [1.5, 1.5, 2.0, 1.0]
    e = [a - b for a, b in zip(r, v, strict=True)]

    def var(x):
        m = sum(x) / len(x)
        return sum((y - m) ** 2 for y in x) / len(x)

    expected = 1 - var(e) / var(r)
    assert explained_variance(value_moments(values, returns, mask)) == pytest.approx(expected)
    halves = value_moments(values[:1], returns[:1], mask[:1]) + value_moments(values[1:], returns[1:], mask[1:])
    assert explained_variance(halves) == pytest.approx(expected)  # what the ranks' summed moments give
    assert explained_variance(value_moments(returns, returns, mask)) == pytest.approx(1.0)  # a perfect critic
    assert math.isnan(explained_variance(value_moments(values, torch.ones_like(returns), mask)))  # no variance to explain
