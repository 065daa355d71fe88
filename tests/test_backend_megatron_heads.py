"""The megatron backend (CPU, gloo, tensor parallel 2, ranks forked with torchrun's environment) for the recipes
with a head on the trunk: the reward model (a score head on the GPTModel shard's final hidden states) follows
the torch backend's curve (also with sequence parallelism and on 2 pipeline stages) and resumes bit for bit,
and PPO (a value head on the policy's trunk, the reference TP-sharded too) samples what the torch backend
samples and learns, also with sequence parallelism and on 2 pipeline stages; in one process, the heads read
the hidden states the HF models compute."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlplane.spec.sections import MegatronBackend as MegatronBackendSpec
from rlplane.spec.sections import TrainSpec
from tests.harness.launch import launch, max_diff
from tests.harness.specs import MEGATRON, MEGATRON_REWARD, PIPELINE, TORCH, rl_spec
from tests.harness.specs import MEGATRON_TOLERANCE as TOLERANCE
from tests.harness.specs import SEQUENCE_PARALLEL as SP
from tests.harness.training import metrics
from trainer_core.backends import make_backend
from trainer_core.backends.dist import DistEnv
from trainer_core.models.builtin import build_builtin
from trainer_core.recipes.common import make_optimizer
from trainer_core.recipes.ppo import ActorCritic, ValueHead

# tiny-llama (grouped-query attention, untied embeddings: the classifier's trunk has no LM head at all).
REWARD = MEGATRON_REWARD
REWARD_KEYS = ("train/loss", "train/accuracy", "train/grad_norm", "eval/loss", "eval/accuracy", "eval/margin")


@pytest.fixture(scope="module")
def reward_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("reward")
    out = {
        "megatron": launch(tmp, REWARD, MEGATRON, "megatron-reward"),
        "torch": launch(tmp, REWARD, TORCH, "torch-reward", processes=1),
        "sequence-parallel": launch(tmp, {**REWARD, "train": {**REWARD["train"], "checkpoint_every": None}}, SP, "sp-reward"),
        "pipeline": launch(tmp, {**REWARD, "train": {**REWARD["train"], "checkpoint_every": None}}, PIPELINE, "pp2-reward"),
    }
    checkpoint = str(out["megatron"] / "checkpoints" / "step-000005")
    out["resumed"] = launch(tmp, REWARD, MEGATRON, "resumed-reward", "--resume", checkpoint)
    return out


def test_reward_on_tp2_matches_the_torch_backend(reward_runs: dict[str, Path]) -> None:
    megatron, torch_run = reward_runs["megatron"], reward_runs["torch"]
    assert sorted(metrics(megatron, "train/loss")) == list(range(1, 11))
    for key in REWARD_KEYS:
        limit = 1e-4 if key == "train/grad_norm" else TOLERANCE
        assert max_diff(metrics(megatron, key), metrics(torch_run, key)) < limit, key
    assert metrics(megatron, "train/lr") == metrics(torch_run, "train/lr")


def test_reward_with_sequence_parallel_matches_the_torch_backend(reward_runs: dict[str, Path]) -> None:
    """The score head reads the final hidden states gathered over the sequence from the TP pair."""
    sequence_parallel, torch_run = reward_runs["sequence-parallel"], reward_runs["torch"]
    for key in REWARD_KEYS:
        limit = 1e-4 if key == "train/grad_norm" else TOLERANCE
        assert max_diff(metrics(sequence_parallel, key), metrics(torch_run, key)) < limit, key


def test_reward_on_two_pipeline_stages_matches_the_torch_backend(reward_runs: dict[str, Path]) -> None:
    """The score head sits on the last stage, after the final norm; the first stage never holds it."""
    pipeline, torch_run = reward_runs["pipeline"], reward_runs["torch"]
    for key in REWARD_KEYS:
        limit = 1e-4 if key == "train/grad_norm" else TOLERANCE
        assert max_diff(metrics(pipeline, key), metrics(torch_run, key)) < limit, key
    exported = load_file(str(pipeline / "final" / "model.safetensors"))
    assert "score.weight" in exported and exported.keys() == load_file(str(torch_run / "final" / "model.safetensors")).keys()


def test_reward_resume_continues_the_same_curve(reward_runs: dict[str, Path]) -> None:
    """The step-5 checkpoint (trunk gathered over TP, score head, Adam state of both) resumed by a new pair of
    processes: steps 6-10 and the exported classifier are the straight run's, bit for bit."""
    straight, resumed = reward_runs["megatron"], reward_runs["resumed"]
    assert sorted(metrics(resumed, "train/loss")) == list(range(6, 11))
    for key in ("train/loss", "train/accuracy", "train/grad_norm", "eval/loss"):
        assert metrics(resumed, key) == {s: v for s, v in metrics(straight, key).items() if s > 5}, key
    a = load_file(str(straight / "final" / "model.safetensors"))
    b = load_file(str(resumed / "final" / "model.safetensors"))
    assert "score.weight" in a and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def ppo_runs(walker: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """PPO from the SFT'd walker (tiny-gpt2) on TP=2 and on the torch backend in 1 process."""
    tmp = tmp_path_factory.mktemp("ppo")
    megatron, torch_spec = rl_spec(walker, "ppo", MEGATRON), rl_spec(walker, "ppo", TORCH)
    megatron["train"] = {**megatron["train"], "checkpoint_every": 5}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RLPLANE_MEGATRON_CHECKPOINT_DIR", str(tmp / "converted"))
        out = {
            "megatron": launch(tmp, megatron, megatron["backend"], "megatron-ppo"),
            "torch": launch(tmp, torch_spec, TORCH, "torch-ppo", processes=1),
            "sequence-parallel": launch(tmp, rl_spec(walker, "ppo", SP), SP, "sp-ppo"),
            "pipeline": launch(tmp, rl_spec(walker, "ppo", PIPELINE), PIPELINE, "pp2-ppo"),
        }
        checkpoint = str(out["megatron"] / "checkpoints" / "step-000005")
        out["resumed"] = launch(tmp, megatron, megatron["backend"], "resumed-ppo", "--resume", checkpoint)
        return out


def test_ppo_on_tp2_learns_as_the_torch_backend(ppo_runs: dict[str, Path]) -> None:
    """The TP pair samples the torch backend's rollouts (the same seed, generation from the shards);
    its losses and KL follow torch's, and greedy optimality over all 20 start nodes rises as on the sharded
    backends (tests/test_sharded_recipes.py)."""
    megatron, torch_run = ppo_runs["megatron"], ppo_runs["torch"]
    assert metrics(megatron, "reward/mean") == metrics(torch_run, "reward/mean")
    for key in ("train/loss", "ppo/value_loss", "ppo/kl", "values/mean"):
        assert max_diff(metrics(megatron, key), metrics(torch_run, key)) < TOLERANCE, key
    assert max_diff(metrics(megatron, "train/grad_norm"), metrics(torch_run, "train/grad_norm")) < 1e-4
    optimality = metrics(megatron, "eval/optimality")
    assert sorted(optimality) == [0, 10]
    assert optimality[10] >= optimality[0] + 0.2 and optimality[10] >= 0.85, optimality
    log = (megatron.parent / "megatron-ppo.log").read_text()
    assert "reference model: megatron TP 2 x DP 1" in log  # the reference is TP-sharded like the policy
    assert (megatron / "final" / "model.safetensors").is_file()


def test_ppo_with_sequence_parallel_learns_as_the_torch_backend(ppo_runs: dict[str, Path]) -> None:
    """GPT-2 under sequence parallelism: row-parallel biases and norms summed over the pair, learned positions
    scattered, the value head on the gathered hidden states of left-padded rollouts."""
    sequence_parallel, torch_run = ppo_runs["sequence-parallel"], ppo_runs["torch"]
    assert metrics(sequence_parallel, "reward/mean") == metrics(torch_run, "reward/mean")
    for key in ("train/loss", "ppo/value_loss", "ppo/kl", "values/mean"):
        assert max_diff(metrics(sequence_parallel, key), metrics(torch_run, key)) < TOLERANCE, key
    assert max_diff(metrics(sequence_parallel, "train/grad_norm"), metrics(torch_run, "train/grad_norm")) < 1e-4


def test_ppo_on_two_pipeline_stages_learns_as_the_torch_backend(ppo_runs: dict[str, Path]) -> None:
    """The actor-critic on 2 stages: rollouts decoded through the pipeline, the value head on the last stage reading
    its final hidden states (logits and values reach the schedule as one tensor), GPT-2's tied embedding summed over
    the stages: the torch backend's rollouts, losses and values."""
    pipeline, torch_run = ppo_runs["pipeline"], ppo_runs["torch"]
    assert metrics(pipeline, "reward/mean") == metrics(torch_run, "reward/mean")
    for key in ("train/loss", "ppo/value_loss", "ppo/kl", "values/mean"):
        assert max_diff(metrics(pipeline, key), metrics(torch_run, key)) < TOLERANCE, key
    # ratio_min/_max are made where the loss is, the last stage; rank 0, the first, reports them. They are one token's
    # ratio each, not a mean over tokens, so they keep more of the float rounding: 1.4e-5 apart at step 4 on an Intel
    # Xeon VM (under 1e-5 on an AMD EPYC one), where a stage reporting the wrong ratios is off by far more.
    for key in ("ppo/ratio_min", "ppo/ratio_max"):
        assert max_diff(metrics(pipeline, key), metrics(torch_run, key)) < 1e-4, key
    assert metrics(pipeline, "eval/optimality") == metrics(torch_run, "eval/optimality")


def test_ppo_resume_continues_the_same_curve(ppo_runs: dict[str, Path]) -> None:
    """The step-5 checkpoint (policy gathered over TP, value head, Adam state, KL coefficient, RNG) resumed by a
    new pair of processes samples the same rollouts and trains to the straight run's final policy, bit for bit."""
    straight, resumed = ppo_runs["megatron"], ppo_runs["resumed"]
    assert sorted(metrics(resumed, "train/loss")) == list(range(6, 11))
    for key in ("reward/mean", "train/loss", "ppo/value_loss", "ppo/kl", "eval/optimality"):
        assert metrics(resumed, key) == {s: v for s, v in metrics(straight, key).items() if s > 5}, key
    a = load_file(str(straight / "final" / "model.safetensors"))
    b = load_file(str(resumed / "final" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2"])
def test_heads_read_the_hidden_states_the_hf_models_compute(name: str) -> None:
    """In this process (TP 1): the score model's pooled scores (a row padded at the right) and the actor-critic's
    logits and values are the HF models'; the gathered weights name every parameter as the HF model does."""
    train = TrainSpec(steps=1, batch_size=2, lr=1e-2)
    backend = make_backend(MegatronBackendSpec(kind="megatron", precision="fp32"), train, DistEnv())
    ids = torch.randint(1, 100, (3, 9), generator=torch.Generator().manual_seed(0))
    ids[0, 6:] = 0  # the pad id of the builtin tokenizer
    mask = (ids != 0).long()
    try:
        classifier = build_builtin(name, "score")[0]
        expected = classifier(input_ids=ids, attention_mask=mask).logits
        model, optimizer, _ = backend.prepare(classifier, make_optimizer(classifier, train))
        assert (model(input_ids=ids, attention_mask=mask).logits - expected).abs().max() < 1e-6
        weights, _ = backend.full_state(model, optimizer)
        assert weights is not None and sorted(weights) == sorted(classifier.state_dict())

        policy = build_builtin(name)[0]
        actor_critic = ActorCritic(policy, ValueHead(policy.config.hidden_size, 0))
        logits, values = actor_critic(input_ids=ids, attention_mask=mask)
        model, optimizer, _ = backend.prepare(actor_critic, make_optimizer(actor_critic, train))
        got_logits, got_values = model(input_ids=ids, attention_mask=mask)
        assert (got_logits - logits).abs().max() < 1e-5 and (got_values - values).abs().max() < 1e-5
        weights, state = backend.full_state(model, optimizer)
        assert weights is not None and sorted(weights) == sorted(actor_critic.state_dict())
        assert backend.unwrap(model) is actor_critic
    finally:
        backend.close()
