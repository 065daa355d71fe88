"""The vllm engine (trainer_core/rollout/vllm.py) against a real vLLM server on CPU: the opt-in tier.

Marked `vllm`: `make test` (and CI) deselects them, as vLLM needs its own 3.5 GB environment; `make test-vllm` builds
it (scripts/vllm-env.sh, kept outside the checkout) and runs them with RLPLANE_VLLM_PYTHON set. They fail, rather
than skip, without it. vLLM's CPU attention runs heads of width 32 and more, not the builtin models' 16: the model
here is a local Llama directory with two heads of 32.

What they show: the server's tokens and log-probabilities are the trainer's on the same weights; after a weight
update its greedy answers are Hugging Face's on the new weights, tagged with the new version; a GRPO run with it
learns, reports the weight sync and leaves no server behind; a run on a server that is up (gen.vllm.url) loads its
own weights and leaves the server running; PPO on FSDP2 over two ranks samples from one server on the gathered
policy; the eval recipe scores as on the hf engine; a server that dies mid-run ends the run with its last lines, one
that stops answering after gen.vllm.request_timeout_s; SIGTERM or SIGKILL to the trainer stops the server too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from rlplane.spec import RunSpec
from rlplane.spec.generation import GenSpec
from rlplane.spec.sections import TrainSpec
from rlplane.status import EXIT_ENGINE_LOST
from tests.harness.launch import launch
from tests.harness.specs import RANDOMWALKS, rl_spec
from tests.harness.training import local_model, metrics, run_spec, write_spec
from trainer_core.backends import make_backend
from trainer_core.losses.policy import response_logprobs
from trainer_core.models.tokenizer import build_tokenizer
from trainer_core.rollout import engines, rollouts
from trainer_core.rollout.vllm import PYTHON_SETTING, VllmEngine

pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("one_thread")]

ROOT = Path(__file__).resolve().parents[1]
GEN = {"max_new_tokens": 10, "top_k": 0, "top_p": 1.0, "temperature": 1.0}


@pytest.fixture(scope="module", autouse=True)
def vllm_python() -> str:
    python = os.environ.get(PYTHON_SETTING)
    assert python and Path(python).is_file(), f"the vllm tier needs {PYTHON_SETTING} (make test-vllm sets it)"
    return python


def wide_llama(directory: Path) -> Path:
    """A local tiny Llama whose two heads are 32 wide (vLLM's CPU attention takes no narrower), with the builtin
    tokenizer."""
    shape = {"num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 128}
    return local_model(directory, LlamaConfig, num_hidden_layers=2, hidden_size=64, max_position_embeddings=256, **shape)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wide_llama(tmp_path_factory.mktemp("wide-llama"))


@pytest.fixture(scope="module")
def backend() -> Iterator:
    spec = RunSpec.model_validate(
        {"name": "v", "algorithm": "sft", "model": {"path": "builtin:tiny-llama"}, "data": RANDOMWALKS, "train": {"steps": 1}}
    )
    backend = make_backend(spec.backend, TrainSpec(steps=1, batch_size=2))
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def served(model_dir: Path, backend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """One server for the module's engine tests: (engine, model, tokenizer)."""
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    tokenizer = build_tokenizer()
    engine = VllmEngine.start(None, backend, model, tokenizer, tmp_path_factory.mktemp("vllm-run"), None)
    yield engine, model, tokenizer
    engine.close()
    assert engine.server.process.poll() is not None


def trainer_logprobs(model: torch.nn.Module, generation: rollouts.Generation) -> torch.Tensor:
    with torch.no_grad():
        return response_logprobs(model(**generation.inputs()).logits, generation.input_ids, generation.prompt_width)


PROMPTS = [{"prompt": p} for p in ("1=", "123+456=", "7*8=", "40+41=", "1234+5678=", "9=", "12*34=")]


@pytest.mark.parametrize("greedy", [False, True], ids=["sampled", "greedy"])
def test_the_servers_tokens_and_logprobs_are_the_trainers(served, backend, greedy: bool) -> None:
    """7 prompts of 2 to 9 tokens: greedy, the hf engine's tokens row for row; sampled, draws that repeat for a seed.
    Every answer's log-probabilities equal the trainer's forward on the same weights to 1e-5 (fp32)."""
    engine, model, tokenizer = served
    prompts = rollouts.encode_prompts(PROMPTS, tokenizer, 20)
    gen = GenSpec(**GEN)
    torch.manual_seed(3)
    generation = rollouts.generate(model, prompts, tokenizer, gen, backend, greedy=greedy, engine=engine)
    mask = generation.response_mask
    assert mask.sum() > 20
    worst = float(((trainer_logprobs(model, generation) - generation.logprobs).abs() * mask).max())
    assert worst <= 1e-5, worst
    if greedy:
        expected = rollouts.generate(model, prompts, tokenizer, gen, backend, greedy=True)
        assert torch.equal(generation.input_ids, expected.input_ids)
    else:
        torch.manual_seed(3)
        again = rollouts.generate(model, prompts, tokenizer, gen, backend, engine=engine)
        assert torch.equal(again.input_ids, generation.input_ids)


def test_a_weight_update_gives_hfs_answers_on_the_new_weights(served, backend) -> None:
    """The policy's weights moved (as a step would), pushed as version 7: the server's greedy answers are then Hugging
    Face's on the new weights, each tagged with version 7, and the push paused and resumed the server."""
    engine, model, tokenizer = served
    prompts = rollouts.encode_prompts(PROMPTS, tokenizer, 20)
    gen = GenSpec(**GEN)
    before = rollouts.generate(model, prompts, tokenizer, gen, backend, greedy=True, engine=engine)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    took = engines.push_weights(engine, backend, model, 7)
    assert took > 0 and engine.version == 7
    after = rollouts.generate(model, prompts, tokenizer, gen, backend, greedy=True, engine=engine)
    expected = rollouts.generate(model, prompts, tokenizer, gen, backend, greedy=True)
    assert torch.equal(after.input_ids, expected.input_ids) and not torch.equal(after.input_ids, before.input_ids)
    assert after.versions.tolist() == [7] * len(prompts)
    assert engines.push_weights(engine, backend, model, 7) == 0.0  # already there: nothing sent


def sft_walker(tmp: Path) -> Path:
    """The wide Llama fine-tuned on the random walks (as tests.harness.specs.WALKER_SPEC does the builtin GPT-2)."""
    spec = {
        "name": "sft-walker-wide",
        "algorithm": "sft",
        "model": {"path": str(wide_llama(tmp / "init")), "max_seq_len": 32},
        "data": RANDOMWALKS,
        "train": {"steps": 300, "batch_size": 32, "lr": 3e-3, "warmup_steps": 10, "log_every": 50},
    }
    run_spec(tmp / "sft.yaml", spec, "--out", str(tmp / "sft"))
    return tmp / "sft" / "final"


def grpo_spec(model: Path, steps: int, vllm: dict | None = None) -> dict:
    return {
        "name": "grpo-vllm",
        "algorithm": "grpo",
        "model": {"path": str(model), "max_seq_len": 32},
        "reward": {"kind": "builtin", "name": "randomwalks"},
        "data": RANDOMWALKS,
        "train": {"steps": steps, "batch_size": 32, "lr": 3e-4, "eval_every": steps, "log_every": 1},
        "grpo": {"group_size": 4, "beta": 0.04, "gen": {"max_new_tokens": 10, "engine": "vllm", "vllm": vllm}},
    }


@pytest.fixture(scope="module")
def walker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sft_walker(tmp_path_factory.mktemp("walker"))


def servers_of(out: Path) -> list[int]:
    """The pids of vLLM servers serving this run's weights (the command line names the directory)."""
    found = subprocess.run(["pgrep", "-f", str(out / "rollout" / "weights")], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def test_grpo_with_vllm_learns_and_leaves_no_server(walker: Path, tmp_path: Path) -> None:
    """30 GRPO steps whose answers the vLLM server samples: held-out optimality rises, the weights reach the server
    at every step (perf/weight_sync_s), its log-probabilities stay the trainer's, and no server outlives the run."""
    out = tmp_path / "out"
    run_spec(tmp_path / "grpo.yaml", grpo_spec(walker, 30), "--out", str(out))
    optimality = metrics(out, "eval/optimality")
    assert optimality[30] >= optimality[0] + 0.1, optimality
    assert sorted(metrics(out, "perf/weight_sync_s")) == list(range(1, 31))
    assert max(metrics(out, "rollout/logprob_diff").values()) < 1e-4
    assert (out / "rollout" / "vllm-server.log").stat().st_size > 0
    assert servers_of(out) == []


def test_async_grpo_with_the_vllm_generator_learns_within_its_bound(walker: Path, tmp_path: Path) -> None:
    """grpo.max_staleness 1 with the vllm engine: the server samples the next step's groups while the trainer trains
    (evaluation on the live policy, through the hf engine). Held-out optimality rises, every step's groups were
    sampled by weights at most one step older than the trained policy, the weights reach the server, and no server
    outlives the run."""
    spec = grpo_spec(walker, 30)
    spec["grpo"]["max_staleness"] = 1
    out = tmp_path / "out"
    run_spec(tmp_path / "grpo.yaml", spec, "--out", str(out))
    optimality = metrics(out, "eval/optimality")
    assert optimality[30] >= optimality[0] + 0.1, optimality
    staleness = metrics(out, "async/staleness_max")
    assert sorted(staleness) == list(range(1, 31)) and max(staleness.values()) <= 1
    assert sum(metrics(out, "perf/weight_sync_s").values()) > 0
    assert servers_of(out) == []


def test_a_run_on_a_server_that_is_up_loads_its_own_weights_and_leaves_it_running(served, walker: Path, tmp_path: Path) -> None:
    """gen.vllm.url: 3 GRPO steps from the walker on the module's server (which serves other weights): the run loads
    its own first (its first step's log-probabilities are the trainer's), and the server still answers after it."""
    engine, _, tokenizer = served
    out = tmp_path / "out"
    run_spec(tmp_path / "grpo.yaml", grpo_spec(walker, 3, {"url": engine.url}), "--out", str(out))
    assert max(metrics(out, "rollout/logprob_diff").values()) < 1e-4
    assert engine.server.process.poll() is None
    prompts = rollouts.encode_prompts(PROMPTS[:2], tokenizer, 20)
    assert len(engine.generate(prompts, engines.Sampling(max_new_tokens=4, greedy=True))) == 2


def test_ppo_on_fsdp2_over_two_ranks_samples_from_one_server(walker: Path, tmp_path: Path) -> None:
    """PPO (whose actor-critic holds the policy beside its value head) on FSDP2 in 2 processes: rank 0 starts the one
    server on the policy's gathered weights, both ranks sample from it, and after every step the gathered policy
    reaches it: its log-probabilities stay the trainer's. The run ends with the server stopped."""
    spec = rl_spec(walker, "ppo", {"kind": "fsdp2", "precision": "fp32"})
    spec["train"] |= {"steps": 4, "eval_every": 4}
    spec["ppo"]["gen"] |= {"engine": "vllm"}
    out = launch(tmp_path, spec, spec["backend"], "ppo")
    assert sorted(metrics(out, "perf/weight_sync_s")) == [1, 2, 3, 4]
    assert max(metrics(out, "rollout/logprob_diff").values()) < 1e-4
    assert "vllm engine: server" in (tmp_path / "ppo.log").read_text()
    assert servers_of(out) == []


def test_the_eval_recipe_on_vllm_scores_as_on_the_hf_engine(walker: Path, tmp_path: Path) -> None:
    """`algorithm: eval` of the walker with the vllm engine, greedy: the same held-out optimality and answer lengths
    as the hf engine's evaluation, and the run ends with its server stopped."""
    results = {}
    for engine in ("hf", "vllm"):
        spec = {
            "name": f"eval-{engine}",
            "algorithm": "eval",
            "model": {"path": str(walker), "max_seq_len": 32},
            "reward": {"kind": "builtin", "name": "randomwalks"},
            "data": RANDOMWALKS,
            "eval": {"greedy": True, "gen": {"max_new_tokens": 10, "engine": engine}},
        }
        run_spec(tmp_path / f"{engine}.yaml", spec, "--out", str(tmp_path / engine))
        results[engine] = {key: metrics(tmp_path / engine, key)[1] for key in ("eval/optimality", "eval/length")}
    assert results["vllm"] == results["hf"], results
    assert servers_of(tmp_path / "vllm") == []


def trainer(walker: Path, tmp_path: Path, vllm: dict | None = None) -> tuple[subprocess.Popen, Path]:
    """A long GRPO run with the vllm engine (`vllm`: its gen.vllm) in a trainer process of its own, and its output
    directory."""
    out = tmp_path / "out"
    spec_path = write_spec(tmp_path / "grpo.yaml", grpo_spec(walker, 200, vllm))
    command = [sys.executable, "-m", "trainer_core", "run", str(spec_path), "--out", str(out)]
    with open(tmp_path / "trainer.log", "wb") as log:
        return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), out


def wait_for(condition, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def step_reached(out: Path, step: int) -> bool:
    path = out / "metrics.jsonl"
    return path.exists() and any(json.loads(line)["step"] >= step for line in path.read_text().splitlines())


def loss_after_signalling_the_server(walker: Path, tmp_path: Path, sig: signal.Signals, vllm: dict | None = None) -> str:
    """A long run whose server gets `sig` after step 1: the trainer ends its attempt lost (exit 5: the worker retries
    it from the last checkpoint), reporting no failure of the run; its reason, once no server of it is left."""
    process, out = trainer(walker, tmp_path, vllm)
    try:
        wait_for(lambda: step_reached(out, 1))
        for pid in servers_of(out):
            os.kill(pid, sig)
        assert process.wait(120) == EXIT_ENGINE_LOST
    finally:
        process.kill()
    wait_for(lambda: servers_of(out) == [], 60)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e.get("status") == "failed"]
    said = (tmp_path / "trainer.log").read_text(errors="replace")
    return said[said.index("error (rollout engine lost)") :]


def test_a_server_that_dies_mid_run_loses_the_attempt_with_its_last_lines(walker: Path, tmp_path: Path) -> None:
    """The server killed (SIGKILL) after step 1: the attempt is lost, its reason names the server and quotes its log."""
    reason = loss_after_signalling_the_server(walker, tmp_path, signal.SIGKILL)
    assert "vllm engine's server" in reason and "its last lines" in reason, reason


def test_a_server_that_stops_answering_loses_the_attempt_after_the_request_timeout(walker: Path, tmp_path: Path) -> None:
    """The server stopped (SIGSTOP: alive, silent) after step 1, with gen.vllm.request_timeout_s 10: the attempt is
    lost, its reason naming the setting, and the stopped server is killed with the run."""
    reason = loss_after_signalling_the_server(walker, tmp_path, signal.SIGSTOP, {"request_timeout_s": 10})
    assert "within gen.vllm.request_timeout_s 10 s" in reason, reason


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_the_trainers_end_stops_the_server(walker: Path, tmp_path: Path, sig: signal.Signals) -> None:
    """SIGTERM to the trainer mid-run (a hand-back: it closes its engine), or SIGKILL (nothing of it runs: the kernel
    sends the server SIGTERM, PR_SET_PDEATHSIG): the server stops too."""
    process, out = trainer(walker, tmp_path)
    try:
        wait_for(lambda: step_reached(out, 1))
        assert servers_of(out)
        process.send_signal(sig)
        process.wait(120)
    finally:
        process.kill()
    wait_for(lambda: servers_of(out) == [], 30)
