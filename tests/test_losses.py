"""trainer_core.losses against references written out by hand: Python loops over math.log/exp."""

import math

import pytest
import torch

from trainer_core.losses import (
    IGNORE_INDEX,
    DpoLoss,
    bradley_terry_loss,
    dpo_loss,
    dpo_metrics,
    pairwise_metrics,
    sequence_logprobs,
    sft_loss,
)

M = IGNORE_INDEX


def ref_token_logprobs(logits: list, labels: list) -> list[list[float | None]]:
    """log p(labels[b][t] | position t - 1) per row, None where masked or with no prediction."""
    rows = []
    for row_logits, row_labels in zip(logits, labels, strict=True):
        row = [None]
        for t in range(1, len(row_labels)):
            y = row_labels[t]
            if y == M:
                row.append(None)
                continue
            scores = row_logits[t - 1]
            log_z = math.log(sum(math.exp(s) for s in scores))
            row.append(scores[y] - log_z)
        rows.append(row)
    return rows


def log_sigmoid(x: float) -> float:
    return -math.log(1 + math.exp(-x))


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7, dtype=torch.float64)
    labels = torch.tensor(
        [
            [M, M, 3, 1, 6],  # prompt of two tokens, then the response
            [M, 2, 0, M, M],  # response, then padding
            [M, M, M, M, M],  # nothing to learn from
        ]
    )
    return logits, labels


# --- SFT ---------------------------------------------------------------------------------------


def test_sft_loss_matches_a_loop_over_tokens(batch):
    logits, labels = batch
    logps = [lp for row in ref_token_logprobs(logits.tolist(), labels.tolist()) for lp in row if lp is not None]
    loss, num_tokens = sft_loss(logits, labels)
    assert num_tokens.item() == len(logps) == 5
    assert loss.item() == pytest.approx(-sum(logps) / len(logps), rel=1e-6)


def test_masked_positions_and_the_last_position_contribute_nothing(batch):
    logits, labels = batch
    loss, _ = sft_loss(logits, labels)
    changed = logits.clone()
    changed[0, :1] = 100.0  # predicts labels[0, 1], masked (prompt)
    changed[1, 3:] = -50.0  # predicts padding, and the last position predicts nothing
    changed[:, -1] = 9.0  # no next token for the last position anywhere
    changed[2] = 3.0  # the all-masked row
    assert sft_loss(changed, labels)[0].item() == pytest.approx(loss.item(), rel=1e-9)


def test_an_all_masked_row_does_not_change_the_mean(batch):
    logits, labels = batch
    assert sft_loss(logits, labels)[0].item() == pytest.approx(sft_loss(logits[:2], labels[:2])[0].item(), rel=1e-9)


def test_an_all_masked_batch_gives_zero_not_nan(batch):
    logits, labels = batch
    logits = logits[2:].clone().requires_grad_()
    loss, num_tokens = sft_loss(logits, labels[2:])
    loss.backward()
    assert loss.item() == 0.0 and num_tokens.item() == 0
    assert torch.equal(logits.grad, torch.zeros_like(logits))


def test_shift_a_model_sure_of_the_next_token_has_zero_loss():
    labels = torch.tensor([[4, 1, 3, 0, 2]])
    next_token = torch.zeros(1, 5, 6)
    next_token[0, torch.arange(4), labels[0, 1:]] = 50.0  # position t is sure of labels[t + 1]
    same_token = torch.zeros(1, 5, 6)
    same_token[0, torch.arange(5), labels[0]] = 50.0  # position t is sure of labels[t]: off by one
    assert sft_loss(next_token, labels)[0].item() == pytest.approx(0.0, abs=1e-6)
    assert sft_loss(same_token, labels)[0].item() > 40.0


def test_sum_reduction_lets_micro_batches_average_by_total_tokens(batch):
    logits, labels = batch
    mean, num_tokens = sft_loss(logits, labels)
    total, total_tokens = sft_loss(logits, labels, reduction="sum")
    assert total_tokens.item() == num_tokens.item()
    assert total.item() == pytest.approx(mean.item() * num_tokens.item(), rel=1e-9)
    # Accumulating over micro-batches of 3 and 2 tokens: summed losses / all tokens = the full-batch mean.
    first, n1 = sft_loss(logits[:1], labels[:1], reduction="sum")
    rest, n2 = sft_loss(logits[1:], labels[1:], reduction="sum")
    assert (first + rest).item() / (n1 + n2).item() == pytest.approx(mean.item(), rel=1e-9)


def test_sft_loss_is_float32_for_bf16_logits(batch):
    logits, labels = batch
    loss, _ = sft_loss(logits.to(torch.bfloat16), labels)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(sft_loss(logits, labels)[0].item(), rel=2e-2)


def test_sft_loss_rejects_an_unknown_reduction(batch):
    with pytest.raises(ValueError, match="reduction"):
        sft_loss(*batch, reduction="none")


# --- sequence log-probabilities ----------------------------------------------------------------


def test_sequence_logprobs_sum_and_average(batch):
    logits, labels = batch
    rows = ref_token_logprobs(logits.tolist(), labels.tolist())
    sums = [sum(lp for lp in row if lp is not None) for row in rows]
    means = [s / max(1, sum(lp is not None for lp in row)) for s, row in zip(sums, rows, strict=True)]
    assert sequence_logprobs(logits, labels).tolist() == pytest.approx(sums, rel=1e-9)
    assert sequence_logprobs(logits, labels, average=True).tolist() == pytest.approx(means, rel=1e-9)
    assert sums[2] == 0.0 and means[2] == 0.0  # the all-masked row


def test_sequence_logprobs_honours_a_custom_ignore_index():
    logits = torch.zeros(1, 3, 4)  # uniform: each token has log-probability -log 4
    labels = torch.tensor([[0, 1, -1]])
    assert sequence_logprobs(logits, labels, ignore_index=-1).item() == pytest.approx(-math.log(4))


def test_gradients_flow_through_sft_and_sequence_logprobs(batch):
    logits, labels = batch
    logits = logits.clone().requires_grad_()
    (sft_loss(logits, labels)[0] + sequence_logprobs(logits, labels).sum()).backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


# --- reward model ------------------------------------------------------------------------------


def test_bradley_terry_loss_by_hand():
    chosen, rejected = torch.tensor([1.0, 0.0, -2.0]), torch.tensor([0.0, 0.0, 1.0])
    expected = [math.log(1 + math.exp(-1.0)), math.log(2.0), math.log(1 + math.exp(3.0))]
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(sum(expected) / 3, rel=1e-6)


@pytest.mark.parametrize("margin", [0.5, torch.tensor([0.5, 1.0, 0.0])])
def test_bradley_terry_loss_subtracts_the_margin(margin):
    chosen, rejected = torch.tensor([1.0, 0.0, -2.0]), torch.tensor([0.0, 0.0, 1.0])
    margins = [0.5] * 3 if isinstance(margin, float) else margin.tolist()
    diffs = [c - r - m for c, r, m in zip(chosen.tolist(), rejected.tolist(), margins, strict=True)]
    expected = sum(-log_sigmoid(d) for d in diffs) / 3
    assert bradley_terry_loss(chosen, rejected, margin=margin).item() == pytest.approx(expected, rel=1e-6)


def test_bradley_terry_gradient_by_hand():
    chosen = torch.tensor([1.0, -0.5], requires_grad=True)
    rejected = torch.tensor([0.0, 0.5], requires_grad=True)
    bradley_terry_loss(chosen, rejected).backward()
    # d/dr_c of -log σ(r_c - r_r), averaged over 2 pairs: -(1 - σ(d)) / 2; the rejected side is its negative.
    expected = [-(1 - 1 / (1 + math.exp(-d))) / 2 for d in (1.0, -1.0)]
    assert chosen.grad.tolist() == pytest.approx(expected, rel=1e-6)
    assert rejected.grad.tolist() == pytest.approx([-g for g in expected], rel=1e-6)


def test_pairwise_metrics_count_a_tie_as_wrong():
    metrics = pairwise_metrics(torch.tensor([2.0, 1.0, 0.0, 3.0]), torch.tensor([1.0, 1.0, 1.0, 0.0]))
    assert metrics["accuracy"].item() == pytest.approx(2 / 4)  # the tie (1.0 vs 1.0) counts 0
    assert metrics["margin"].item() == pytest.approx((1 + 0 - 1 + 3) / 4)


# --- DPO ---------------------------------------------------------------------------------------

PC, PR = [-12.0, -30.0, -7.5, -20.0], [-15.0, -25.0, -9.0, -20.0]  # policy log π(y_c|x), log π(y_r|x)
RC, RR = [-13.0, -28.0, -8.0, -19.0], [-14.0, -26.0, -8.5, -21.0]  # reference


def logratio_diffs() -> list[float]:
    return [(pc - rc) - (pr - rr) for pc, pr, rc, rr in zip(PC, PR, RC, RR, strict=True)]


def run_dpo(beta: float, **kwargs) -> DpoLoss:
    pc, pr, rc, rr = (torch.tensor(xs, dtype=torch.float64) for xs in (PC, PR, RC, RR))
    return dpo_loss(pc, pr, rc, rr, beta=beta, **kwargs)


def test_dpo_at_the_reference_is_log_two_with_zero_rewards():
    logps = torch.tensor([-12.0, -30.0, -7.5])
    out = dpo_loss(logps, logps - 3, logps.clone(), logps - 3, beta=0.1)
    assert out.loss.item() == pytest.approx(math.log(2))
    assert out.losses.tolist() == pytest.approx([math.log(2)] * 3)
    assert out.chosen_rewards.tolist() == [0.0] * 3 and out.rejected_rewards.tolist() == [0.0] * 3


def test_dpo_sigmoid_by_hand():
    beta = 0.5
    expected = [math.log(1 + math.exp(-beta * h)) for h in logratio_diffs()]
    out = run_dpo(beta)
    assert out.losses.tolist() == pytest.approx(expected, rel=1e-9)
    assert out.loss.item() == pytest.approx(sum(expected) / 4, rel=1e-9)


def test_dpo_rewards_are_beta_times_the_log_ratio_and_detached():
    beta = 0.25
    policy = torch.tensor(PC, dtype=torch.float64, requires_grad=True)
    out = dpo_loss(policy, torch.tensor(PR), torch.tensor(RC), torch.tensor(RR), beta=beta)
    assert out.chosen_rewards.tolist() == pytest.approx([beta * (p - r) for p, r in zip(PC, RC, strict=True)])
    assert out.rejected_rewards.tolist() == pytest.approx([beta * (p - r) for p, r in zip(PR, RR, strict=True)])
    assert not out.chosen_rewards.requires_grad and not out.rejected_rewards.requires_grad


def test_dpo_label_smoothing_is_conservative_dpo():
    beta, eps = 0.5, 0.2
    expected = [(1 - eps) * -log_sigmoid(beta * h) + eps * -log_sigmoid(-beta * h) for h in logratio_diffs()]
    assert run_dpo(beta, label_smoothing=eps).losses.tolist() == pytest.approx(expected, rel=1e-9)


def test_dpo_nll_term_is_rpo_by_hand():
    """nll_weight·NLL of the chosen answer added per pair; the rewards stay the DPO ones."""
    beta, weight = 0.5, 0.7
    nll = torch.tensor([2.0, 0.5, 1.25, 3.0], dtype=torch.float64)
    expected = [math.log(1 + math.exp(-beta * h)) + weight * n for h, n in zip(logratio_diffs(), nll.tolist(), strict=True)]
    out = run_dpo(beta, chosen_nll=nll, nll_weight=weight)
    assert out.losses.tolist() == pytest.approx(expected, rel=1e-9)
    assert out.chosen_rewards.tolist() == pytest.approx(run_dpo(beta).chosen_rewards.tolist())
    with pytest.raises(ValueError, match="chosen_nll"):
        run_dpo(beta, nll_weight=weight)
    with pytest.raises(ValueError, match="nll_weight"):
        run_dpo(beta, chosen_nll=nll, nll_weight=-1.0)


def test_ipo_by_hand_and_zero_at_its_target():
    beta = 0.1
    expected = [(h - 1 / (2 * beta)) ** 2 for h in logratio_diffs()]
    assert run_dpo(beta, loss_type="ipo").losses.tolist() == pytest.approx(expected, rel=1e-9)
    chosen = torch.tensor([1 / (2 * beta)], requires_grad=True)  # h = 5 = 1/(2β) exactly
    out = dpo_loss(chosen, torch.zeros(1), torch.zeros(1), torch.zeros(1), beta=beta, loss_type="ipo")
    out.loss.backward()
    assert out.loss.item() == pytest.approx(0.0, abs=1e-12) and chosen.grad.item() == pytest.approx(0.0, abs=1e-6)


def test_hinge_by_hand():
    beta = 0.5  # h = [2, -3, 1, -2]: βh = 1 sits on the hinge, βh < 1 pays 1 - βh
    assert logratio_diffs() == [2.0, -3.0, 1.0, -2.0]
    expected = [max(0.0, 1 - beta * h) for h in logratio_diffs()]
    assert expected == [0.0, 2.5, 0.5, 2.0]
    assert run_dpo(beta, loss_type="hinge").losses.tolist() == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge"])
def test_dpo_gradients_are_finite_and_favour_the_chosen_response(loss_type):
    chosen = torch.tensor([-12.0, -30.0], requires_grad=True)
    rejected = torch.tensor([-15.0, -25.0], requires_grad=True)
    dpo_loss(
        chosen, rejected, torch.tensor([-12.0, -28.0]), torch.tensor([-14.0, -26.0]), beta=0.1, loss_type=loss_type
    ).loss.backward()
    assert torch.isfinite(chosen.grad).all() and torch.isfinite(rejected.grad).all()
    assert (chosen.grad < 0).all() and (rejected.grad > 0).all()  # descent raises log π(y_c), lowers log π(y_r)


def test_dpo_metrics_keys_and_means():
    metrics = dpo_metrics(run_dpo(0.5))
    chosen = [0.5 * (p - r) for p, r in zip(PC, RC, strict=True)]
    rejected = [0.5 * (p - r) for p, r in zip(PR, RR, strict=True)]
    assert set(metrics) == {"rewards/chosen", "rewards/rejected", "rewards/margin", "rewards/accuracy"}
    assert all(isinstance(v, float) for v in metrics.values())
    assert metrics["rewards/chosen"] == pytest.approx(sum(chosen) / 4)
    assert metrics["rewards/rejected"] == pytest.approx(sum(rejected) / 4)
    assert metrics["rewards/margin"] == pytest.approx((sum(chosen) - sum(rejected)) / 4)
    assert metrics["rewards/accuracy"] == pytest.approx(sum(c > r for c, r in zip(chosen, rejected, strict=True)) / 4)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"beta": 0.0}, "beta"),
        ({"beta": -0.1}, "beta"),
        ({"beta": float("nan")}, "beta"),
        ({"beta": 0.1, "loss_type": "kto"}, "loss_type"),
        ({"beta": 0.1, "label_smoothing": 0.5}, "label_smoothing"),
        ({"beta": 0.1, "label_smoothing": -0.1}, "label_smoothing"),
        ({"beta": 0.1, "loss_type": "ipo", "label_smoothing": 0.1}, "label_smoothing"),
        ({"beta": 0.1, "loss_type": "hinge", "label_smoothing": 0.1}, "label_smoothing"),
    ],
)
def test_dpo_rejects_bad_arguments_by_name(kwargs, field):
    with pytest.raises(ValueError, match=field):
        run_dpo(**kwargs)


def test_dpo_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="logps"):
        dpo_loss(torch.zeros(3), torch.zeros(3), torch.zeros(2), torch.zeros(3), beta=0.1)
