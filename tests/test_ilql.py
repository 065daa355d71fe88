"""The ILQL recipe through `python -m trainer_core run`: from random weights, offline RL on logged random
walks steers greedy decoding to near-shortest paths, well above the data's own mean reward and above
plain behaviour cloning; resume is exact (heads and target heads included); the losses by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.harness.specs import ILQL_SPEC
from tests.harness.training import assert_resume_is_exact, dropout_model, metrics, run_spec
from trainer_core.losses.ilql import (
    MAX_AWAC_WEIGHT,
    awac_weights,
    cql_loss,
    expectile_loss,
    guided_logits,
    ilql_loss,
    q_targets,
    terminal_rewards,
)
from trainer_core.recipes.ilql import IlqlHeads

pytestmark = pytest.mark.usefixtures("one_thread")

# eval_fraction 0: evaluation answers all 20 start nodes (as trlx's randomwalks does), not a held-out
# handful whose 0.2-wide score steps make the comparison noisy; the walks from every start stay logged.
SPEC = ILQL_SPEC


@pytest.mark.parametrize("seed", [0, 1])
def test_ilql_learns_shortest_walks(tmp_path: Path, seed: int) -> None:
    """400 steps from random weights (about 15 s). The logged walks average 0.50 optimality; guided greedy
    paths end at or above 0.75 (measured 0.91 and 0.97 for seeds 0 and 1; 0.92 for seed 2) where beta 0,
    behaviour cloning, ends at 0.62."""
    out = tmp_path / "out"
    run_spec(tmp_path / "ilql.yaml", {**SPEC, "train": {**SPEC["train"], "seed": seed}}, "--out", str(out))
    behaviour = metrics(out, "data/reward_mean")[0]
    optimality = metrics(out, "eval/optimality")
    assert sorted(optimality) == [0, 100, 200, 300, 400]
    assert 0.45 < behaviour < 0.55, behaviour
    assert optimality[400] >= max(behaviour + 0.25, optimality[0] + 0.25), optimality
    assert metrics(out, "eval/reward") == optimality
    for key in ("train/loss", "ilql/loss_q", "ilql/loss_v", "ilql/loss_cql", "ilql/loss_awac", "ilql/q_mean",
                "ilql/v_mean", "train/lr", "train/grad_norm", "perf/step_s", "perf/tokens_per_s"):  # fmt: skip
        assert sorted(metrics(out, key)) == list(range(50, 401, 50)), key
    assert metrics(out, "train/loss")[400] < metrics(out, "train/loss")[50]
    assert (out / "samples.jsonl").read_text().strip()
    assert (out / "final" / "model.safetensors").exists() and not (out / "final" / "modules").exists()


def test_resume_is_exact(tmp_path: Path) -> None:
    """6 steps straight vs 3 then --resume, with dropout on, target syncs before and after the stop and
    held-out rows for eval/loss: the same LM bit for bit and the same logged losses and eval scores."""
    spec = {
        **SPEC,
        "model": {"path": str(dropout_model(tmp_path / "model")), "max_seq_len": 16},
        "data": {"source": "builtin:randomwalks", "eval_fraction": 0.25},
        "train": {"steps": 6, "batch_size": 8, "micro_batch_size": 4, "lr": 3e-3, "warmup_steps": 2, "eval_every": 3},
        "ilql": {**SPEC["ilql"], "alpha": 0.5, "steps_for_target_q_sync": 2},
    }
    keys = ("train/loss", "train/grad_norm", "ilql/loss_q", "ilql/loss_v", "ilql/loss_cql", "ilql/loss_awac",
            "ilql/q_mean", "ilql/v_mean", "eval/loss", "eval/optimality", "data/reward_mean")  # fmt: skip
    assert_resume_is_exact(tmp_path, spec, 3, keys)


# --- pure losses ---


def test_expectile_loss_weighs_under_and_over_estimates_apart() -> None:
    """|τ - 1(u < 0)|·u²: with τ = 0.7 a target above the prediction costs 0.7·u², below it 0.3·u²."""
    torch.testing.assert_close(expectile_loss(torch.tensor([2.0, -2.0, 0.0]), 0.7), torch.tensor([2.8, 1.2, 0.0]))


def test_terminal_reward_and_discounted_target() -> None:
    """The row's reward sits on its last response token only; no bootstrap past it."""
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1]])
    rewards, terminal = terminal_rewards(torch.tensor([1.0, 0.5]), mask)
    torch.testing.assert_close(rewards, torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.5]]))
    assert terminal.tolist() == [[False, False, True, False], [False, False, False, True]]
    targets = q_targets(rewards, torch.full((2, 4), 2.0), terminal, gamma=0.5)
    torch.testing.assert_close(targets[0, 1:3], torch.tensor([1.0, 1.0]))  # 0 + 0.5·2, then the reward alone
    torch.testing.assert_close(targets[1], torch.tensor([1.0, 1.0, 1.0, 0.5]))


def test_cql_and_awac_weights() -> None:
    q = torch.tensor([[[0.0, math.log(3.0)]]])  # softmax [1/4, 3/4]
    torch.testing.assert_close(cql_loss(q, torch.tensor([[0]])), torch.tensor([[math.log(4.0)]]))
    weights = awac_weights(torch.tensor([2.0, 10.0]), torch.tensor([0.0, 0.0]), beta=0.5)
    torch.testing.assert_close(weights, torch.tensor([math.e, MAX_AWAC_WEIGHT]))


def test_ilql_loss_by_hand() -> None:
    """One row: a prompt transition (masked, junk values), then two response actions, the second terminal."""
    actions = torch.tensor([[1, 0, 1]])
    mask = torch.tensor([[False, True, True]])
    values = torch.tensor([[5.0, 0.2, 0.4, 9.0]], requires_grad=True)  # V(s_3) = 9 is past the end: never used
    q = torch.tensor([[[7.0, 7.0], [0.5, 0.0], [0.0, 0.8]]], requires_grad=True)
    target_a = torch.tensor([[[0.0, 0.0], [0.6, 0.0], [0.0, 0.3]]])
    target_b = torch.tensor([[[0.0, 0.0], [0.4, 0.0], [0.0, 0.9]]])
    logits = torch.zeros(1, 3, 2, requires_grad=True)
    out = ilql_loss(
        logits, [q], [target_a, target_b], values, actions, torch.tensor([1.0]), mask,
        tau=0.7, gamma=0.5, cql_scale=0.1, awac_scale=2.0, beta=1.0,
    )  # fmt: skip
    # Q targets: 0 + 0.5·V(s_2) = 0.2, then the reward 1.0; taken Q 0.5 and 0.8.
    loss_q = (0.5 - 0.2) ** 2 + (0.8 - 1.0) ** 2
    # min target Q 0.4 and 0.3 against V 0.2 and 0.4: one under- and one over-estimate.
    loss_v = 0.7 * 0.2**2 + 0.3 * 0.1**2
    loss_cql = math.log(1 + math.exp(-0.5)) + math.log(1 + math.exp(-0.8))
    loss_awac = math.log(2.0) * (math.exp(0.2) + math.exp(-0.1))
    expected = (loss_q + loss_v + 0.1 * loss_cql + 2.0 * loss_awac) / 2
    for got, want in ((out.loss_q, loss_q), (out.loss_v, loss_v), (out.loss_cql, loss_cql), (out.loss_awac, loss_awac)):
        assert got.item() == pytest.approx(want, rel=1e-5)
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)
    assert out.sums()[4:].tolist() == pytest.approx([1.3, 0.6, 2.0])
    out.loss.backward()
    assert values.grad[0, 0] == 0 and values.grad[0, 3] == 0  # masked state and the terminal next state
    assert values.grad[0, 2] != 0  # V(s_2) is fitted, but not through the TD target (detached)
    assert (q.grad[0, 0] == 0).all() and (logits.grad[0, 0] == 0).all()


def test_ilql_loss_normalizer_and_two_heads_sum() -> None:
    """Terms sum over Q heads; a given normalizer replaces the batch's action count."""
    torch.manual_seed(0)
    logits, q1, q2, t1 = (torch.randn(2, 3, 5) for _ in range(4))
    values, actions, mask = torch.randn(2, 4), torch.randint(0, 5, (2, 3)), torch.tensor([[1, 1, 0], [1, 1, 1]])
    args = {"tau": 0.7, "gamma": 0.99, "cql_scale": 0.1, "awac_scale": 1.0, "beta": 1.0}
    one = ilql_loss(logits, [q1], [t1], values, actions, torch.tensor([0.3, 1.0]), mask, **args)
    two = ilql_loss(logits, [q1, q2], [t1], values, actions, torch.tensor([0.3, 1.0]), mask, **args, normalizer=10.0)
    other = ilql_loss(logits, [q2], [t1], values, actions, torch.tensor([0.3, 1.0]), mask, **args)
    torch.testing.assert_close(two.loss_q, one.loss_q + other.loss_q)
    torch.testing.assert_close(two.loss_cql, one.loss_cql + other.loss_cql)
    total = two.loss_q + two.loss_v + 0.1 * two.loss_cql + two.loss_awac
    torch.testing.assert_close(two.loss, total / 10.0)
    assert one.actions.item() == 5


def test_guided_logits_add_the_advantage() -> None:
    """logits + β·(min over target heads of Q - V)."""
    out = guided_logits(torch.tensor([1.0, 2.0]), [torch.tensor([1.0, 3.0]), torch.tensor([2.0, 2.0])], torch.tensor(0.5), 2.0)
    torch.testing.assert_close(out, torch.tensor([2.0, 5.0]))


def test_target_heads_follow_by_polyak_averaging() -> None:
    heads = IlqlHeads(hidden_size=4, vocab_size=6, two_qs=True, seed=0)
    assert len(heads.q_heads) == 2 and not any(p.requires_grad for p in heads.target_q_heads.parameters())
    with torch.no_grad():
        for p in heads.q_heads.parameters():
            p.add_(1.0)
    before = [p.clone() for p in heads.target_q_heads.parameters()]
    heads.sync_targets(0.25)
    for old, new, source in zip(before, heads.target_q_heads.parameters(), heads.q_heads.parameters(), strict=True):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * source)
