"""Virtual pipeline stages on the megatron backend (CPU, gloo, 3 processes): 3 pipeline stages of 2 model chunks
each over 6-layer models saved to directories (the builtin models have 2 layers). Training runs megatron-core's
interleaved schedule; evaluation, a reference model and generation walk the chunks forward-only. SFT gives the
torch backend's curve, its checkpoint resumes bit for bit and, resharded, without virtual stages; GRPO and PPO
on GPT-2 (a tied embedding: rank 0's first chunk and rank 2's last) sample the torch backend's rollouts, and the
reward model's score head follows the torch backend's curve."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.harness.launch import launch, max_diff
from tests.harness.specs import MEGATRON_REWARD as REWARD
from tests.harness.specs import MEGATRON_SFT as SFT
from tests.harness.specs import MEGATRON_TOLERANCE as TOLERANCE
from tests.harness.specs import TORCH, rl_spec
from tests.harness.training import metrics
from trainer_core.backends import BackendError
from trainer_core.backends.megatron.pipeline import Stage, _check_micro_batches, stage_weights, whole_model_names
from trainer_core.models.builtin import BUILTIN_MODELS, build_tokenizer, model_from_config

VIRTUAL = {"kind": "megatron", "precision": "fp32", "tensor_parallel": 1, "pipeline_parallel": 3, "virtual_pipeline_parallel": 2}
LAYERS = 6  # 3 stages x 2 chunks, one layer each
# 6 rows a step in micro-batches of 2: 3 micro-batches, one group of pipeline_parallel for the interleaved schedule.
VIRTUAL_SFT = {**SFT, "train": {**SFT["train"], "steps": 6, "batch_size": 6, "eval_every": 6, "checkpoint_every": 3}}


def six_layers(name: str, directory: Path) -> Path:
    """builtin:<name> with 6 layers (random weights, seed 0), saved as a Hugging Face model directory."""
    tokenizer = build_tokenizer()
    config = BUILTIN_MODELS[name](tokenizer)
    config.num_hidden_layers = LAYERS
    model_from_config(config, "causal", tokenizer.pad_token_id, 0).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("virtual")
    llama, gpt2 = six_layers("tiny-llama", tmp / "llama6"), six_layers("tiny-gpt2", tmp / "gpt2-6")
    sft = {**VIRTUAL_SFT, "model": {"path": str(llama), "max_seq_len": 32}}
    grpo = rl_spec(gpt2, "grpo", VIRTUAL)
    grpo["train"] |= {"steps": 4, "batch_size": 24, "micro_batch_size": 8, "eval_every": 4}  # 3 micro-batches of responses
    ppo = rl_spec(gpt2, "ppo", VIRTUAL)
    ppo["train"] |= {"steps": 3, "batch_size": 24, "micro_batch_size": 8, "eval_every": 3}
    ppo["ppo"] |= {"epochs": 2, "minibatch_size": 24}
    reward = {**REWARD, "model": {"path": str(llama), "max_seq_len": 32}}
    reward["train"] = {**REWARD["train"], "steps": 4, "batch_size": 12, "eval_every": 4, "checkpoint_every": None}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RLPLANE_MEGATRON_CHECKPOINT_DIR", str(tmp / "converted"))
        out = {
            "torch-sft": launch(tmp, sft, TORCH, "torch-sft", processes=1),
            "sft": launch(tmp, sft, VIRTUAL, "sft", processes=3),
            "torch-grpo": launch(tmp, grpo, TORCH, "torch-grpo", processes=1),
            "grpo": launch(tmp, grpo, VIRTUAL, "grpo", processes=3),
            "torch-ppo": launch(tmp, ppo, TORCH, "torch-ppo", processes=1),
            "ppo": launch(tmp, ppo, VIRTUAL, "ppo", processes=3),
            "torch-reward": launch(tmp, reward, TORCH, "torch-reward", processes=1),
            "reward": launch(tmp, reward, VIRTUAL, "reward", processes=3),
        }
        checkpoint = str(out["sft"] / "checkpoints" / "step-000003")
        out["resumed"] = launch(tmp, sft, VIRTUAL, "resumed", "--resume", checkpoint, processes=3)
        without = {**VIRTUAL, "virtual_pipeline_parallel": 1}
        out["resharded"] = launch(tmp, sft, without, "resharded", "--resume", checkpoint, processes=3)
    return out


def test_sft_on_virtual_stages_matches_the_torch_backend(runs: dict[str, Path]) -> None:
    run, torch_run = runs["sft"], runs["torch-sft"]
    for key in ("train/loss", "eval/loss"):
        assert max_diff(metrics(run, key), metrics(torch_run, key)) < TOLERANCE, key
    # The norm sums 6 layers' squares over 3 ranks in another order: measured 1.4e-5 apart on norms of 3.7 to 7.
    norm, torch_norm = metrics(run, "train/grad_norm"), metrics(torch_run, "train/grad_norm")
    assert max(abs(norm[step] - torch_norm[step]) / torch_norm[step] for step in torch_norm) < TOLERANCE
    loss = metrics(run, "train/loss")
    assert loss[6] < loss[1] - 0.5, loss  # it learns


def test_a_virtual_stage_checkpoint_resumes_exactly_and_reshards(runs: dict[str, Path]) -> None:
    """Each rank wrote both its chunks' layers under their global numbers: the same layout resumes bit for bit,
    3 stages without virtual ones read them resharded (the same curve within the TP tolerance)."""
    straight, resumed, resharded = runs["sft"], runs["resumed"], runs["resharded"]
    expected = {step: value for step, value in metrics(straight, "train/loss").items() if step > 3}
    assert metrics(resumed, "train/loss") == expected
    assert max_diff(metrics(resharded, "train/loss"), expected) < TOLERANCE


def test_grpo_on_virtual_stages_samples_as_the_torch_backend(runs: dict[str, Path]) -> None:
    """Rollouts decoded through the chunks (each chunk's layers caching their keys and values), log-probabilities
    from forward-only walks, the update from the interleaved schedule, GPT-2's tied embedding kept equal across
    rank 0's first chunk and rank 2's last: the torch backend's rollouts and curve."""
    run, torch_run = runs["grpo"], runs["torch-grpo"]
    assert metrics(run, "reward/mean") == metrics(torch_run, "reward/mean")
    for key in ("train/loss", "grpo/kl", "grpo/ratio_min", "grpo/ratio_max"):  # the ratios: from the last rank
        assert max_diff(metrics(run, key), metrics(torch_run, key)) < TOLERANCE, key
    assert "reference model: megatron TP 1 x PP 3 (virtual 2) x DP 1" in (run.parent / "grpo.log").read_text()


def test_ppo_and_the_reward_model_on_virtual_stages_match_the_torch_backend(runs: dict[str, Path]) -> None:
    """The heads sit beside the last rank's last chunk: PPO's value head on the policy's trunk (rollouts, losses
    and values as on the torch backend), the reward model's score head on its final hidden states."""
    assert metrics(runs["ppo"], "reward/mean") == metrics(runs["torch-ppo"], "reward/mean")
    for key in ("train/loss", "ppo/value_loss", "ppo/kl", "values/mean", "ppo/ratio_min", "ppo/ratio_max"):
        assert max_diff(metrics(runs["ppo"], key), metrics(runs["torch-ppo"], key)) < TOLERANCE, key
    for key in ("train/loss", "train/accuracy", "eval/loss", "eval/accuracy"):
        assert max_diff(metrics(runs["reward"], key), metrics(runs["torch-reward"], key)) < TOLERANCE, key


def test_chunk_names_map_to_whole_model_names_and_back() -> None:
    """Rank 1 of 3 stages x 2 chunks over 6 layers holds layers 1 (chunk 0) and 4 (chunk 1), each numbered 0 in its
    chunk; the last rank's last chunk holds the final norm and the tied embedding's copy."""
    arch = SimpleNamespace(num_layers=6, tie_word_embeddings=True)
    names = [f"decoder.layers.{layer}.mlp.weight" for layer in range(6)]
    names += ["embedding.word_embeddings.weight", "decoder.final_layernorm.weight"]
    weights = {name: torch.tensor(float(index)) for index, name in enumerate(names)}
    middle = Stage.of(arch, 1, 3, chunks=2)  # type: ignore[arg-type]
    assert sorted(stage_weights(weights, middle, arch)) == ["0.decoder.layers.0.mlp.weight", "1.decoder.layers.0.mlp.weight"]  # type: ignore[arg-type]
    last = Stage.of(arch, 2, 3, chunks=2)  # type: ignore[arg-type]
    local = stage_weights(weights, last, arch)  # type: ignore[arg-type]
    assert sorted(local) == [
        "0.decoder.layers.0.mlp.weight",
        "1.decoder.final_layernorm.weight",
        "1.decoder.layers.0.mlp.weight",
        "1.output_layer.weight",
    ]
    assert local["1.decoder.layers.0.mlp.weight"] == weights["decoder.layers.5.mlp.weight"]
    assert local["1.output_layer.weight"] == weights["embedding.word_embeddings.weight"]
    back = whole_model_names(local, last, arch)  # type: ignore[arg-type]
    assert sorted(back) == ["decoder.final_layernorm.weight", "decoder.layers.2.mlp.weight", "decoder.layers.5.mlp.weight"]
    with pytest.raises(Exception, match="pipeline_parallel 3 x virtual_pipeline_parallel 2 does not divide the model's 4"):
        Stage.of(SimpleNamespace(num_layers=4), 0, 3, chunks=2)  # type: ignore[arg-type]


def test_the_interleaved_schedule_needs_a_multiple_of_the_stages() -> None:
    """The spec refuses such a step at submit (tests/test_spec_rules.py); the backend checks each step again."""
    config = SimpleNamespace(pipeline_model_parallel_size=3)
    _check_micro_batches(config, 6)
    with pytest.raises(BackendError, match=r"this step has 4\. Pick train\.micro_batch_size"):
        _check_micro_batches(config, 4)
