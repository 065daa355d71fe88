"""Padding-free micro-batches and token budgets (trainer_core/recipes/packing.py): a packed step's loss and gradients
equal the padded step's, recipe by recipe, with the runs' own setup and micro-batches; the budget grouping keeps
every item once and every micro-batch within its budget; a model whose attention mixes packed sequences is refused.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from rlplane.spec import RunSpec
from tests.harness.training import ARITHMETIC, metrics, run_spec
from trainer_core.backends import make_backend
from trainer_core.models import ModelError, build_builtin
from trainer_core.recipes import common, dpo, grpo, packing, ppo, reward, sft, spin
from trainer_core.rollout.rollouts import Generation

pytestmark = pytest.mark.usefixtures("one_thread")

TOLERANCE = 1e-5
# The summed statistics' relative tolerance: grpo/entropy sums every response token's entropy over the whole vocabulary
# in fp32, whose rounding differs between the two layouts (measured 1.45e-5 on one draw of 2026-11-29; the gradients,
# log-probabilities and every other sum stay within TOLERANCE).
SUMS_TOLERANCE = 3e-5


def spec_of(algorithm: str, model: str, **train: Any) -> RunSpec:
    sections = {
        "reward": {"reward_model": {}},
        "grpo": {
            "grpo": {"group_size": 2, "beta": 0.04, "gen": {"max_new_tokens": 6}},
            "reward": {"kind": "builtin", "name": "arithmetic"},
        },
        "ppo": {"ppo": {"gen": {"max_new_tokens": 6}}, "reward": {"kind": "builtin", "name": "arithmetic"}},
        "spin": {"spin": {"prompts_per_iteration": 8, "gen": {"max_new_tokens": 4}}},
    }
    return RunSpec.model_validate(
        {
            "name": f"packing-{algorithm}",
            "algorithm": algorithm,
            "model": {"path": model, "max_seq_len": 32},
            "data": ARITHMETIC,
            "train": {"batch_size": 8, "lr": 1e-3, "steps": 4, **train},
            **sections.get(algorithm, {}),
        }
    )


def step_of(run: common.Run, steps: list) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Forward and backward of one step's micro-batches (no optimizer step): the summed statistics and the gradients."""
    run.model.zero_grad(set_to_none=True)
    totals = run.backend.forward_backward(run.model, steps).tolist()
    grads = {name: p.grad.detach().clone() for name, p in run.model.named_parameters() if p.grad is not None}
    return totals, grads


def assert_same_step(padded: tuple[list[float], dict], packed: tuple[list[float], dict]) -> None:
    (totals, grads), (packed_totals, packed_grads) = padded, packed
    assert packed_totals == pytest.approx(totals, rel=SUMS_TOLERANCE, abs=TOLERANCE)  # sums over tokens: relative
    assert grads.keys() == packed_grads.keys() and grads
    worst = max(float((grads[k] - packed_grads[k]).abs().max()) for k in grads)
    largest = max(float(g.abs().max()) for g in grads.values())
    assert worst <= TOLERANCE, (worst, largest)
    assert largest > 100 * TOLERANCE  # the gradients are not all but zero


# Each recipe's step as its train_step builds it: (setup, this rank's micro-steps from what the run draws).
def sft_steps(run: Any, local: Any) -> list:
    return sft.micro_steps(run, local)


def pair_steps(module: Any) -> Callable[[Any, Any], list]:
    return lambda run, local: module.micro_steps(run, local)


@pytest.mark.parametrize(
    ("algorithm", "module", "items", "model"),
    [
        ("sft", sft, "train_examples", "builtin:tiny-llama"),
        ("sft", sft, "train_examples", "builtin:tiny-gpt2"),
        ("dpo", dpo, "train_pairs", "builtin:tiny-llama"),
        ("reward", reward, "train_pairs", "builtin:tiny-llama"),
        ("spin", spin, None, "builtin:tiny-llama"),  # the first round's pairs, which each run answers and scores
    ],
    ids=["sft-llama", "sft-gpt2", "dpo-llama", "reward-llama", "spin-llama"],
)
def test_a_padding_free_step_equals_the_padded_one(algorithm: str, module: Any, items: str, model: str, tmp_path: Path) -> None:
    """The same examples through the padded and the padding-free path: equal statistics and gradients; a token budget
    with padding-free micro-batches (several micro-batches of different sizes) gives the same again."""
    padded_run = module.setup(spec_of(algorithm, model, micro_batch_size=4), tmp_path / "padded", stdout=False)
    packed_run = module.setup(spec_of(algorithm, model, padding_free=True), tmp_path / "packed", stdout=False)
    budget_run = module.setup(
        spec_of(algorithm, model, padding_free=True, micro_batch_tokens=40), tmp_path / "budget", stdout=False
    )
    try:
        if module is spin:
            for run in (padded_run, packed_run, budget_run):
                run.round = spin.begin_round(run, 0)
        local = getattr(padded_run, items)[:8] if items is not None else list(range(8))
        with packing.catching(getattr(padded_run, "head", None)):
            padded = step_of(padded_run, module.micro_steps(padded_run, local))
        for run in (packed_run, budget_run):
            steps = module.micro_steps(run, local)
            if run is budget_run:
                assert 2 <= len(steps) < len(local), len(steps)  # budgeted: neither one micro-batch nor one per example
            with packing.catching(getattr(run, "head", None)):
                assert_same_step(padded, step_of(run, steps))
    finally:
        for run in (padded_run, packed_run, budget_run):
            run.reporter.close()
            run.backend.close()


def ragged(generation: Generation) -> Generation:
    """The rollouts with responses of several lengths, as early eos leaves them (a random policy fills all
    max_new_tokens): row i keeps its first i % R + 1 response tokens, the rest is padding."""
    attention, response = generation.attention_mask.clone(), generation.response_mask.clone()
    width = response.shape[1]
    for i in range(response.shape[0]):
        keep = i % width + 1
        response[i, keep:] = False
        attention[i, generation.prompt_width + keep :] = 0
    return dataclasses.replace(generation, attention_mask=attention, response_mask=response)


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_a_padding_free_rl_update_equals_the_padded_one(algorithm: str, tmp_path: Path) -> None:
    """GRPO's and PPO's update over the same sampled rollouts (left-padded prompts, responses of several lengths):
    equal statistics and gradients; the reference's and the old policy's log-probabilities too."""
    module = {"grpo": grpo, "ppo": ppo}[algorithm]
    padded_run = module.setup(spec_of(algorithm, "builtin:tiny-llama", micro_batch_size=4), tmp_path / "padded", stdout=False)
    # GRPO's loss is a mean per response, so any split gives the same step: a token budget; PPO's policy loss is a
    # token mean over each micro-batch (as trlx's), so the padded run's split
    split = {"micro_batch_tokens": 48} if algorithm == "grpo" else {"micro_batch_size": 4}
    packed_run = module.setup(
        spec_of(algorithm, "builtin:tiny-llama", padding_free=True, **split), tmp_path / "packed", stdout=False
    )
    try:
        if algorithm == "grpo":
            drawn = grpo.sample(padded_run)
            drawn.generation = generation = ragged(drawn.generation)
            # an untrained policy earns no reward, so every advantage would be 0 and so would the policy gradient
            drawn.advantages = torch.linspace(-1.0, 1.0, drawn.advantages.shape[0])
            padded, packed = (step_of(run, grpo.micro_steps(run, drawn)) for run in (padded_run, packed_run))
            reference = [grpo._logprobs(padded_run.reference, generation, free)[0] for free in (False, True)]
        else:
            drawn = ppo.rollout(padded_run)
            drawn.generation = generation = ragged(drawn.generation)
            rows = torch.arange(generation.input_ids.shape[0])
            padded, packed = (step_of(run, ppo.micro_steps(run, drawn, rows)) for run in (padded_run, packed_run))
            reference = [
                packing.forward(padded_run.reference, generation.inputs(), free).logits[:, generation.prompt_width - 1 : -1]
                for free in (False, True)
            ]
        assert_same_step(padded, packed)
        mask = generation.response_mask
        assert float(((reference[0] - reference[1]).abs() * mask[..., *([None] * (reference[0].dim() - 2))]).max()) <= TOLERANCE
    finally:
        for run in (padded_run, packed_run):
            run.reporter.close()
            run.backend.close()


def test_token_budget_groups_cover_every_item_once_within_the_budget() -> None:
    sizes = [[n] for n in (30, 3, 17, 9, 9, 2, 25, 12, 40, 1)]
    for padding_free in (True, False):
        groups = packing.budget_groups(sizes, 32, padding_free)
        assert sorted(i for g in groups for i in g) == list(range(len(sizes)))
        for group in groups:
            assert len(group) == 1 or packing.cost([sizes[i] for i in group], padding_free) <= 32
        # as many micro-batches as a peer rank needs: the costliest split, every item still once
        more = packing.split_to(groups, len(groups) + 2, sizes, padding_free)
        assert len(more) == len(groups) + 2 and sorted(i for g in more for i in g) == list(range(len(sizes)))
    # padded, a micro-batch costs rows x its longest row: long rows travel with few others
    assert packing.cost([[10], [3], [2]], padding_free=False) == 30
    assert packing.cost([[10], [3], [2]], padding_free=True) == 15
    # a preference pair is one item of two sequences
    assert packing.cost([[5, 7], [4, 4]], padding_free=False) == 28


def test_pack_keeps_left_padded_rows_and_scatters_back() -> None:
    inputs = {
        "input_ids": torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 0, 0]]),
        "attention_mask": torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0]]),
    }
    packed = packing.pack(inputs)
    assert packed.inputs["input_ids"].tolist() == [[5, 6, 7, 8, 9, 10]]
    assert packed.inputs["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2]]
    assert packed.ends.tolist() == [2, 5]
    back = packed.unpack(packed.inputs["input_ids"][..., None].float())[..., 0]
    assert back.tolist() == [[0, 0, 5, 6, 7], [8, 9, 10, 0, 0]]


class MixesSequences(nn.Module):
    """A causal LM whose attention ignores where packed sequences start (it always passes a full attention mask, so
    the position ids are never read as boundaries): what train.padding_free must refuse."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = build_builtin("tiny-llama", seed=0)[0]

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        kwargs["attention_mask"] = torch.ones_like(input_ids)
        return self.inner(input_ids=input_ids, **kwargs)


def test_a_model_that_mixes_packed_sequences_is_refused() -> None:
    backend = make_backend(spec_of("sft", "builtin:tiny-llama").backend, spec_of("sft", "builtin:tiny-llama").train)
    try:
        packing.check_separates(copy.deepcopy(build_builtin("tiny-llama", seed=0)[0]), backend)  # keeps them apart
        with pytest.raises(ModelError, match="train.padding_free"):
            packing.check_separates(MixesSequences(), backend)
    finally:
        backend.close()


@pytest.mark.parametrize("algorithm", ["sft", "grpo"])
def test_a_padding_free_run_trains_to_its_end(algorithm: str, tmp_path: Path) -> None:
    """Through the trainer's CLI: a padding-free run with a token budget steps, evaluates and exports like any other."""
    spec = spec_of(algorithm, "builtin:tiny-llama", padding_free=True, micro_batch_tokens=64, steps=3)
    out = tmp_path / "out"
    run_spec(tmp_path / "spec.yaml", spec.model_dump(mode="json", exclude_unset=True), "--out", str(out))
    loss = metrics(out, "train/loss")
    assert sorted(loss) == [1, 2, 3] and all(math.isfinite(v) for v in loss.values())
    assert (out / "final" / "config.json").exists()
