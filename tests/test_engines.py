"""Rollout engines (trainer_core/rollout/engines.py): each samples the tokens today's decoding samples for the same
seed and returns log-probabilities of them that match the trainer's forward; the mismatch metrics and truncated
importance sampling are what their formulas say; a GRPO run reports rollout/* and trains with grpo.tis_cap."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from rlplane.spec import RunSpec
from rlplane.spec.generation import GenSpec
from rlplane.spec.sections import MegatronBackend as MegatronBackendSpec
from rlplane.spec.sections import TrainSpec
from tests.harness.training import ARITHMETIC, metrics, run_spec, write_spec
from trainer_core.backends import BackendError, make_backend
from trainer_core.backends.dist import DistEnv
from trainer_core.cli import main
from trainer_core.losses.policy import grpo_loss, ppo_policy_loss, response_logprobs
from trainer_core.models import build_builtin
from trainer_core.recipes.common import make_optimizer
from trainer_core.rollout import engines, rollouts, vllm

pytestmark = pytest.mark.usefixtures("one_thread")

ROWS = [{"prompt": "12+7="}, {"prompt": "3*4="}, {"prompt": "40+41="}, {"prompt": "9*9="}]
GEN = {"max_new_tokens": 10, "top_k": 0, "top_p": 1.0, "temperature": 1.0}


@pytest.fixture(scope="module")
def torch_backend() -> Iterator:
    backend = make_backend(RunSpec.model_validate(sft_spec()).backend, TrainSpec(steps=1, batch_size=2))
    yield backend
    backend.close()


def sft_spec() -> dict:
    return {"name": "e", "algorithm": "sft", "model": {"path": "builtin:tiny-llama"}, "data": ARITHMETIC, "train": {"steps": 1}}


def trainer_logprobs(model: torch.nn.Module, generation: rollouts.Generation) -> torch.Tensor:
    with torch.no_grad():
        return response_logprobs(model(**generation.inputs()).logits, generation.input_ids, generation.prompt_width)


def assert_matches_trainer(model: torch.nn.Module, generation: rollouts.Generation, tolerance: float) -> None:
    mask = generation.response_mask
    assert generation.logprobs is not None and mask.sum() > 10
    worst = float(((trainer_logprobs(model, generation) - generation.logprobs).abs() * mask).max())
    assert worst <= tolerance, worst
    assert float((generation.logprobs * ~mask).abs().max()) == 0.0  # nothing past a row's end


@pytest.mark.parametrize("static_cache", [False, True], ids=["dynamic-cache", "static-cache"])
@pytest.mark.parametrize("greedy", [False, True], ids=["sampled", "greedy"])
def test_the_hf_engine_samples_todays_tokens_with_the_trainers_logprobs(torch_backend, static_cache: bool, greedy: bool) -> None:
    """The hf engine against transformers' generate() as the recipes called it before the engines (same seed, same
    settings): the same tokens; its log-probabilities equal the trainer's forward to 1e-5 (fp32, CPU)."""
    model, tokenizer = build_builtin("tiny-llama", seed=0)
    prompts = rollouts.encode_prompts(ROWS, tokenizer, 20)
    gen = GenSpec(**GEN, static_cache=static_cache)
    torch.manual_seed(3)
    generation = rollouts.generate(model, prompts, tokenizer, gen, torch_backend, greedy=greedy)
    torch.manual_seed(3)
    width = generation.prompt_width
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    with torch.no_grad():
        expected = model.generate(
            input_ids=ids,
            attention_mask=(torch.arange(width)[None] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long(),
            max_new_tokens=gen.max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **sampling,
        )
    assert torch.equal(generation.input_ids, expected)
    assert_matches_trainer(model, generation, 1e-5)


@pytest.mark.parametrize("greedy", [False, True], ids=["sampled", "greedy"])
def test_micro_batches_by_length_give_each_prompt_its_own_row(torch_backend, greedy: bool) -> None:
    """gen.micro_batch_size 3 over 7 prompts of 2 to 9 tokens: three calls of like-length prompts, whose rows come
    back in the prompts' order (each row holds its own prompt), with the engine's log-probabilities equal to the
    trainer's forward; greedy answers are those of one call over all seven, and sampled ones repeat for a seed."""
    model, tokenizer = build_builtin("tiny-llama", seed=0)
    rows = [{"prompt": p} for p in ("1=", "123+456=", "7*8=", "40+41=", "1234+5678=", "9=", "12*34=")]
    prompts = rollouts.encode_prompts(rows, tokenizer, 20)
    assert len({len(p) for p in prompts}) >= 5
    whole = GenSpec(**GEN)
    split = GenSpec(**GEN, micro_batch_size=3)
    torch.manual_seed(3)
    generation = rollouts.generate(model, prompts, tokenizer, split, torch_backend, greedy=greedy)
    width = generation.prompt_width
    assert width == max(len(p) for p in prompts)
    for row, prompt, keep in zip(generation.input_ids, prompts, generation.attention_mask, strict=True):
        assert row[:width][keep[:width].bool()].tolist() == prompt
    assert_matches_trainer(model, generation, 1e-5)
    torch.manual_seed(3)
    again = rollouts.generate(model, prompts, tokenizer, split if not greedy else whole, torch_backend, greedy=greedy)
    assert torch.equal(again.input_ids, generation.input_ids)
    assert torch.equal(again.response_mask, generation.response_mask)
    assert float((again.logprobs - generation.logprobs).abs().max()) <= 1e-5


@pytest.fixture(scope="module")
def megatron_backend() -> Iterator:
    backend = make_backend(MegatronBackendSpec(kind="megatron", precision="fp32"), TrainSpec(steps=1, batch_size=2), DistEnv())
    yield backend
    backend.close()


@pytest.mark.parametrize("greedy", [False, True], ids=["sampled", "greedy"])
def test_the_megatron_engine_samples_the_hf_engines_tokens_from_the_shards(torch_backend, megatron_backend, greedy: bool) -> None:
    """The megatron engine (the megatron backend's own, by gen.engine auto) decodes from the policy's shards: the hf
    engine's tokens for the same seed, with log-probabilities within float noise of the Hugging Face model's forward."""
    model, tokenizer = build_builtin("tiny-llama", seed=0)
    prompts = rollouts.encode_prompts(ROWS, tokenizer, 20)
    gen = GenSpec(**GEN)
    torch.manual_seed(5)
    expected = rollouts.generate(model, prompts, tokenizer, gen, torch_backend, greedy=greedy)
    megatron_backend.prepare(model, make_optimizer(model, TrainSpec(steps=1, batch_size=2)))
    assert isinstance(engines.make_engine(gen, megatron_backend, model, tokenizer), engines.MegatronEngine)
    torch.manual_seed(5)
    generation = rollouts.generate(model, prompts, tokenizer, gen, megatron_backend, greedy=greedy)
    assert torch.equal(generation.input_ids, expected.input_ids)
    assert_matches_trainer(model, generation, 1e-4)
    with pytest.raises(BackendError, match="gen.engine hf"):
        engines.make_engine(GenSpec(engine="hf"), megatron_backend, model, tokenizer)
    with pytest.raises(BackendError, match="gen.engine megatron"):
        engines.make_engine(GenSpec(engine="megatron"), torch_backend, model, tokenizer)


def test_mismatch_and_truncated_importance_weights_by_hand() -> None:
    trainer = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -3.0, 0.0]])
    engine = torch.tensor([[-1.5, -2.0, -0.5], [-0.1, -1.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    abs_sum, k3_sum, largest, tokens = engines.mismatch_sums(trainer, engine, mask).tolist()
    assert tokens == 4 and abs_sum == pytest.approx(0.5 + 2.0) and largest == pytest.approx(2.0)
    assert k3_sum == pytest.approx((math.exp(0.5) - 1.5) + (math.exp(-2.0) + 2.0 - 1))
    weights = engines.truncated_is_weights(trainer, engine, cap=1.5)
    assert weights[0, 0] == pytest.approx(1.5)  # exp(0.5) = 1.65, truncated
    assert weights[1, 1] == pytest.approx(math.exp(-2.0)) and weights[0, 1] == 1.0
    # the weights scale each token's surrogate (not the KL term): with ratio 1, -advantage x weight per token; PPO's
    # is a token mean over the batch
    ppo = ppo_policy_loss(trainer, trainer, torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]]), mask, 0.2, weights)
    assert float(ppo.loss) == pytest.approx((-1.5 - 1.0 + 2.0 + 2.0 * math.exp(-2.0)) / 4)
    logprobs = trainer.clone().requires_grad_()
    out = grpo_loss(logprobs, trainer, None, torch.tensor([1.0, -2.0]), mask, 0.2, 0.0, rollout_weights=weights)
    by_hand = ((-1.0 * (1.5 + 1.0)) / 2 + (2.0 * (1.0 + math.exp(-2.0))) / 2) / 2
    assert float(out.loss.detach()) == pytest.approx(by_hand)


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_an_rl_run_reports_the_engines_mismatch_and_trains_with_tis(algorithm: str, tmp_path: Path) -> None:
    """Two steps with <algorithm>.tis_cap through the trainer's CLI: rollout/logprob_diff is float noise on one CPU
    (the engine and the trainer are the same fp32 model), and the run ends."""
    options = {"tis_cap": 2.0, "gen": {"max_new_tokens": 6}} | ({"group_size": 2} if algorithm == "grpo" else {"epochs": 1})
    spec = {
        "name": "tis",
        "algorithm": algorithm,
        "model": {"path": "builtin:tiny-llama", "max_seq_len": 32},
        "data": ARITHMETIC,
        "reward": {"kind": "builtin", "name": "arithmetic"},
        algorithm: options,
        "train": {"steps": 2, "batch_size": 4, "lr": 1e-3},
    }
    out = tmp_path / "out"
    run_spec(tmp_path / "spec.yaml", spec, "--out", str(out))
    diff, kl = metrics(out, "rollout/logprob_diff"), metrics(out, "rollout/kl")
    assert sorted(diff) == [1, 2] and all(0 <= v < 1e-5 for v in diff.values()), diff
    assert all(abs(v) < 1e-8 for v in kl.values()), kl
    assert metrics(out, "rollout/logprob_diff_max")[2] < 1e-4


@pytest.mark.parametrize("greedy", [False, True], ids=["sampled", "greedy"])
def test_the_continuous_engine_samples_with_the_trainers_logprobs(torch_backend, greedy: bool) -> None:
    """gen.engine continuous (transformers' continuous batching, a paged KV cache) on 7 prompts of 2 to 9 tokens:
    greedy, the hf engine's tokens row for row; sampled, draws that repeat for a seed. Its log-probabilities equal the
    trainer's forward to 1e-5 (fp32, CPU), each row ends at its first eos, and every answer carries the policy version."""
    model, tokenizer = build_builtin("tiny-llama", seed=0)
    rows = [{"prompt": p} for p in ("1=", "123+456=", "7*8=", "40+41=", "1234+5678=", "9=", "12*34=")]
    prompts = rollouts.encode_prompts(rows, tokenizer, 20)
    gen = GenSpec(**GEN, engine="continuous")
    engine = engines.make_engine(gen, torch_backend, model, tokenizer)
    engine.update_weights(None, 3)
    torch.manual_seed(3)
    generation = rollouts.generate(model, prompts, tokenizer, gen, torch_backend, greedy=greedy, engine=engine)
    assert_matches_trainer(model, generation, 1e-5)
    assert generation.versions.tolist() == [3] * len(prompts)
    eos = tokenizer.eos_token_id
    for ids, keep in zip(generation.response_ids, generation.response_mask, strict=True):
        answer = ids[keep].tolist()
        assert eos not in answer[:-1] and len(answer) <= GEN["max_new_tokens"]
    if greedy:
        expected = rollouts.generate(model, prompts, tokenizer, GenSpec(**GEN), torch_backend, greedy=True)
        assert torch.equal(generation.input_ids, expected.input_ids)
        assert torch.equal(generation.response_mask, expected.response_mask)
    else:
        torch.manual_seed(3)
        again = rollouts.generate(model, prompts, tokenizer, gen, torch_backend, engine=engine)
        assert torch.equal(again.input_ids, generation.input_ids)


def test_the_continuous_engine_reports_raw_logprobs_under_temperature_and_cuts_at_stop_strings(torch_backend) -> None:
    """At temperature 0.7 with top-k, transformers reports the log-probabilities of the processed distribution; the
    engine's are still the raw log-softmax the trainer computes (to 1e-5). A stop string ends a greedy answer after
    the token that completes it (the same answer without the stop string, cut there)."""
    model, tokenizer = build_builtin("tiny-llama", seed=0)
    prompts = rollouts.encode_prompts(ROWS * 2, tokenizer, 20)
    gen = GenSpec(max_new_tokens=12, temperature=0.7, top_k=50, engine="continuous")
    torch.manual_seed(4)
    generation = rollouts.generate(model, prompts, tokenizer, gen, torch_backend)
    assert_matches_trainer(model, generation, 1e-5)
    whole = rollouts.decode(tokenizer, rollouts.generate(model, prompts, tokenizer, GenSpec(**GEN), torch_backend, greedy=True))
    stop = next(text[2:4] for text in whole if len(text) >= 5)  # a string a greedy answer writes, past its start
    stopped = GenSpec(**GEN, engine="continuous", stop=[stop])
    cut = rollouts.decode(tokenizer, rollouts.generate(model, prompts, tokenizer, stopped, torch_backend, greedy=True))
    assert cut != whole
    for short, long in zip(cut, whole, strict=True):
        if stop in long:
            # ended by the token that completes the first stop (its text may run a few characters past it)
            end = long.index(stop) + len(stop)
            assert long.startswith(short) and end <= len(short) < end + 8 and len(short) < len(long), (short, long)
        else:
            assert short == long


def failure_reason(out: Path) -> str:
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    return next(e["reason"] for e in events if e.get("status") == "failed")


def test_a_vllm_engine_that_cannot_start_fails_the_run_naming_the_setting(tmp_path: Path, monkeypatch) -> None:
    """gen.engine vllm with no interpreter set, then with one that has no vLLM (this venv's): each run fails at its
    first step with a reason that names the setting, and for the second, quotes the server's last lines; nothing of
    the server is left (the vLLM tier, tests/test_vllm.py, runs a real one)."""
    monkeypatch.delenv(vllm.PYTHON_SETTING, raising=False)
    spec = {
        "name": "no-vllm",
        "algorithm": "grpo",
        "model": {"path": "builtin:tiny-llama", "max_seq_len": 32},
        "data": ARITHMETIC,
        "reward": {"kind": "builtin", "name": "arithmetic"},
        "grpo": {"group_size": 2, "gen": {"max_new_tokens": 4, "engine": "vllm"}},
        "train": {"steps": 1, "batch_size": 4},
    }
    assert main(["run", str(write_spec(tmp_path / "a.yaml", spec)), "--out", str(tmp_path / "a")]) != 0
    reason = failure_reason(tmp_path / "a")
    assert "gen.vllm.python" in reason and vllm.PYTHON_SETTING in reason, reason
    spec["grpo"]["gen"]["vllm"] = {"python": sys.executable, "start_timeout_s": 60}
    assert main(["run", str(write_spec(tmp_path / "b.yaml", spec)), "--out", str(tmp_path / "b")]) != 0
    reason = failure_reason(tmp_path / "b")
    assert f"gen.vllm.python {sys.executable}: exited with status 1" in reason, reason
    assert "No module named 'vllm'" in reason, reason
    assert (tmp_path / "b" / "rollout" / "vllm-server.log").exists()
