"""Reward sources of ppo/grpo (trainer_core.rewards): each kind, sums, normalisation, the allow-list, the API check."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch

from rlplane.allowlist import ENV_VAR
from rlplane.spec import SpecError, parse_spec
from rlplane.spec.sections import BuiltinReward, HttpReward, ModelReward, PythonReward, RewardTerm, SumReward
from tests.harness.factories import spec as base_spec
from trainer_core.data import DataError
from trainer_core.data.tasks import builtin_reward
from trainer_core.rewards import RewardError, RewardScores, make_reward
from trainer_core.rewards.normalize import EPS

CPU = torch.device("cpu")
PROMPTS = ["2+3=", "4*5=", "7+1=", "3*3="]
RESPONSES = ["5", "21", "8 and more", "nine"]
METADATA = [{"answer": "5"}, {"answer": "20"}, {"answer": "8"}, {"answer": "9"}]
ARITHMETIC = [1.0, 0.0, 1.0, 0.0]

REWARD_MODULE = """
import math

def length(prompts, responses, metadata):
    return [len(r) for r in responses]

def value(prompts, responses, metadata):
    return [m["value"] for m in metadata]

def one_short(prompts, responses, metadata):
    return [1.0] * (len(responses) - 1)

def not_a_number(prompts, responses, metadata):
    return ["high"] * len(responses)

def nan(prompts, responses, metadata):
    return [math.nan] * len(responses)
"""


@pytest.fixture
def reward_module(tmp_path, monkeypatch) -> str:
    """An importable module of reward functions, and the allow-list naming it (its name is unique per test)."""
    name = f"rewards_under_test_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(REWARD_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ENV_VAR, f"{name}:*")
    return name


def score(spec, prompts=PROMPTS, responses=RESPONSES, metadata=METADATA, **kwargs) -> RewardScores:
    reward = make_reward(spec, device=CPU, seed=0, **kwargs)
    try:
        return reward(prompts, responses, metadata)
    finally:
        reward.close()


class TestBuiltin:
    def test_scores_with_the_rows_answer_and_is_named_after_the_task(self):
        scores = score(BuiltinReward(name="arithmetic"))
        assert scores.total == ARITHMETIC
        assert scores.components == {"arithmetic": ARITHMETIC}

    def test_scale_then_clip(self):
        scores = score(BuiltinReward(name="arithmetic", scale=3.0, clip=2.0))
        assert scores.total == [2.0, 0.0, 2.0, 0.0]

    def test_unknown_name_is_bad_input(self):
        with pytest.raises(DataError, match="not a builtin reward"):
            make_reward(BuiltinReward(name="chess"), device=CPU, seed=0)


class TestPython:
    def test_allowed_entrypoint_runs_and_is_named_after_the_function(self, reward_module):
        scores = score(PythonReward(entrypoint=f"{reward_module}:length", scale=0.5))
        assert scores.total == [0.5, 1.0, 5.0, 2.0]
        assert list(scores.components) == ["length"]

    def test_entrypoint_outside_the_allow_list_is_refused_before_import(self, reward_module, monkeypatch):
        monkeypatch.setenv(ENV_VAR, "other_rewards.*:score")
        with pytest.raises(RewardError) as caught:
            make_reward(PythonReward(entrypoint=f"{reward_module}:length"), device=CPU, seed=0)
        message = str(caught.value)
        assert ENV_VAR in message and "reward.entrypoint" in message and "other_rewards.*:score" in message
        assert f"add '{reward_module}:length'" in message
        assert reward_module not in sys.modules

    def test_unset_allow_list_allows_nothing(self, reward_module, monkeypatch):
        monkeypatch.delenv(ENV_VAR)
        with pytest.raises(RewardError, match="it is unset, so no python reward may run"):
            make_reward(PythonReward(entrypoint=f"{reward_module}:length"), device=CPU, seed=0)

    def test_missing_function_names_the_field(self, reward_module):
        with pytest.raises(RewardError, match=f"reward.entrypoint: module '{reward_module}' has no function 'absent'"):
            make_reward(PythonReward(entrypoint=f"{reward_module}:absent"), device=CPU, seed=0)

    @pytest.mark.parametrize(
        ("function", "message"),
        [
            ("one_short", "returned 3 rewards for 4 responses"),
            ("not_a_number", r"returned 'high' \(str\) for response 0; rewards must be numbers"),
        ],
    )
    def test_wrong_returns_are_clear_errors(self, reward_module, function, message):
        with pytest.raises(RewardError, match=message):
            score(PythonReward(entrypoint=f"{reward_module}:{function}"))

    def test_a_nan_reward_is_passed_on(self, reward_module):
        """A NaN is a number: train.on_nonfinite decides what becomes of its step (tests/test_divergence.py)."""
        assert math.isnan(score(PythonReward(entrypoint=f"{reward_module}:nan")).total[0])


# --- http ---


@pytest.fixture(scope="module")
def reference_server() -> Iterator[str]:
    """python -m trainer_core.rewards.server, as a user would start it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer_core.rewards.server", "--task", "arithmetic", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


class FlakyHandler(BaseHTTPRequestHandler):
    """Answers 503 to the first request, then scores every response by its length."""

    requests = 0

    def do_POST(self) -> None:  # noqa: N802
        type(self).requests += 1
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if type(self).requests == 1 or self.headers.get("X-Check") != "yes":
            self.send_response(503 if type(self).requests == 1 else 401)
            self.end_headers()
            return
        data = json.dumps({"rewards": [len(r) for r in body["responses"]]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class TestHttp:
    def test_reference_server_scores_like_the_builtin_in_batches(self, reference_server):
        scores = score(HttpReward(url=reference_server, batch_size=3))
        assert scores.total == ARITHMETIC
        assert scores.components == {"http": ARITHMETIC}
        task = builtin_reward("arithmetic")
        assert scores.total == [task(p, r, m["answer"]) for p, r, m in zip(PROMPTS, RESPONSES, METADATA, strict=True)]

    def test_a_failed_request_is_retried_with_the_headers(self):
        FlakyHandler.requests = 0
        server = ThreadingHTTPServer(("127.0.0.1", 0), FlakyHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/score"
            spec = HttpReward(url=url, backoff_s=0.01, headers={"X-Check": "yes"})
            assert score(spec).total == [1.0, 2.0, 10.0, 4.0]
            assert FlakyHandler.requests == 2
        finally:
            server.shutdown()
            server.server_close()

    def test_a_refusal_is_not_retried(self):
        FlakyHandler.requests = 1  # past the 503
        server = ThreadingHTTPServer(("127.0.0.1", 0), FlakyHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/"
            with pytest.raises(RewardError, match="answered HTTP 401"):
                score(HttpReward(url=url, backoff_s=0.01))
            assert FlakyHandler.requests == 2
        finally:
            server.shutdown()
            server.server_close()

    def test_server_down_fails_after_its_attempts_naming_the_url(self):
        url = f"http://127.0.0.1:{free_port()}/score"
        started = time.monotonic()
        with pytest.raises(RewardError) as caught:
            score(HttpReward(url=url, attempts=3, backoff_s=0.05, timeout_s=2))
        assert time.monotonic() - started < 5
        message = str(caught.value)
        assert url in message and "failed 3 attempts" in message and "reward.attempts" in message

    def test_reference_server_rejects_a_bad_body(self, reference_server):
        import httpx

        reply = httpx.post(reference_server, json={"prompts": ["1+1="], "responses": []})
        assert reply.status_code == 400 and "same length" in reply.json()["error"]


# --- model ---


def test_model_reward_scores_like_the_reward_recipe_tokenized_it(tmp_path, one_thread):
    from trainer_core.data.pairs import collate_pairs, tokenize_pairs
    from trainer_core.data.tokenize import pad_id
    from trainer_core.models import build_builtin

    model, tokenizer = build_builtin("tiny-gpt2", "score", 3)
    model.save_pretrained(tmp_path / "rm")
    tokenizer.save_pretrained(tmp_path / "rm")
    rows = [{"prompt": p, "chosen": r, "rejected": r} for p, r in zip(PROMPTS, RESPONSES, strict=True)]
    batch = collate_pairs(tokenize_pairs(rows, tokenizer, 512), pad_id(tokenizer))
    with torch.no_grad():
        expected = model.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.squeeze(-1)
    expected = expected[: len(rows)].tolist()

    reward = make_reward(ModelReward(path=str(tmp_path / "rm"), batch_size=3, scale=2.0), device=CPU, seed=0)
    try:
        scores = reward(PROMPTS, RESPONSES, METADATA)
        assert list(scores.components) == ["model"]
        assert scores.components["model"] == pytest.approx([2 * e for e in expected], abs=1e-5)
        assert len(set(scores.total)) == len(PROMPTS)  # different responses, different scores
        inner = reward.scorer.model
        assert not inner.training and not any(p.requires_grad for p in inner.parameters())
    finally:
        reward.close()


def test_model_reward_loads_run_refs_through_the_resolver(tmp_path, monkeypatch, one_thread):
    from trainer_core.models import DirectoryResolver, ModelError, build_builtin

    monkeypatch.delenv("RLPLANE_RUNS_DIR", raising=False)
    with pytest.raises(ModelError, match="refers to an earlier run"):
        make_reward(ModelReward(path="run:7"), device=CPU, seed=0)
    model, tokenizer = build_builtin("tiny-gpt2", "score", 3)
    model.save_pretrained(tmp_path / "7" / "final")
    tokenizer.save_pretrained(tmp_path / "7" / "final")
    reward = make_reward(ModelReward(path="run:7"), device=CPU, seed=0, resolver=DirectoryResolver(tmp_path))
    try:
        assert len(reward(PROMPTS, RESPONSES, METADATA).total) == len(PROMPTS)
    finally:
        reward.close()


# --- sum ---


class TestSum:
    def test_weighted_sum_of_scaled_components(self, reward_module):
        spec = SumReward(
            terms=[
                RewardTerm(name="correct", weight=1.0, source=BuiltinReward(name="arithmetic", scale=2.0)),
                RewardTerm(name="long", weight=-0.1, source=PythonReward(entrypoint=f"{reward_module}:length", clip=3)),
            ]
        )
        scores = score(spec)
        assert scores.components == {"correct": [2.0, 0.0, 2.0, 0.0], "long": [1.0, 2.0, 3.0, 3.0]}
        assert scores.total == pytest.approx([1.9, -0.2, 1.7, -0.3])

    def test_the_sum_has_its_own_scale_and_clip(self):
        spec = SumReward(
            scale=10.0,
            clip=5.0,
            terms=[RewardTerm(name="a", weight=0.2, source=BuiltinReward(name="arithmetic"))],
        )
        assert score(spec).total == [2.0, 0.0, 2.0, 0.0]
        spec.terms[0].weight = 1.0
        assert score(spec).total == [5.0, 0.0, 5.0, 0.0]

    def test_refused_term_names_its_path(self, reward_module, monkeypatch):
        monkeypatch.setenv(ENV_VAR, "")
        spec = SumReward(
            terms=[
                RewardTerm(name="a", source=BuiltinReward(name="arithmetic")),
                RewardTerm(name="b", source=PythonReward(entrypoint=f"{reward_module}:length")),
            ]
        )
        with pytest.raises(RewardError, match=r"reward.terms\[1\].source.entrypoint"):
            make_reward(spec, device=CPU, seed=0)


# --- normalisation ---


def value_batches(seed: int, sizes: list[int]) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(rng.normal(50.0, 3.0, size)) for size in sizes]  # far from 0: the shifted sums must stay exact


def run_batches(reward, batches: list[list[float]]) -> list[list[float]]:
    return [reward(["p"] * len(b), ["r"] * len(b), [{"value": v} for v in b]).total for b in batches]


def expected_normalised(batches: list[list[float]]) -> list[list[float]]:
    seen: list[float] = []
    out = []
    for batch in batches:
        seen += batch
        out.append(list((np.array(batch) - np.mean(seen)) / (np.std(seen) + EPS)))
    return out


class TestNormalize:
    def test_running_mean_and_std_over_all_batches_so_far(self, reward_module):
        batches = value_batches(0, [5, 1, 8, 3])
        reward = make_reward(PythonReward(entrypoint=f"{reward_module}:value", normalize=True), device=CPU, seed=0)
        got = run_batches(reward, batches)
        for mine, numpy_says in zip(got, expected_normalised(batches), strict=True):
            assert mine == pytest.approx(numpy_says, abs=1e-9)
        assert reward.state_dict()["normalizer"]["count"] == 17

    def test_state_dict_round_trip_continues_identically(self, reward_module):
        spec = SumReward(
            normalize=True,
            terms=[
                RewardTerm(name="v", weight=2.0, source=PythonReward(entrypoint=f"{reward_module}:value", normalize=True)),
                RewardTerm(name="len", weight=0.5, source=PythonReward(entrypoint=f"{reward_module}:length")),
            ],
        )
        first, second, third = value_batches(1, [4, 6, 5])
        reward = make_reward(spec, device=CPU, seed=0)
        run_batches(reward, [first, second])
        state = json.loads(json.dumps(reward.state_dict()))  # plain JSON, as a checkpoint holds it
        resumed = make_reward(spec, device=CPU, seed=0)
        resumed.load_state_dict(state)
        assert run_batches(resumed, [third]) == run_batches(reward, [third])
        assert set(state) == {"normalizer", "terms"} and set(state["terms"]["v"]) == {"normalizer"}

    def test_ranks_normalise_with_the_global_batch(self, reward_module):
        """Two ranks in threads with a real all-reduce between them: both use the union's statistics."""
        rank_batches = [value_batches(2, [3, 4]), value_batches(3, [5, 2])]
        barrier, slots = threading.Barrier(2), [None, None]

        def reduce_sum_for(rank: int):
            def reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
                slots[rank] = tensor.clone()
                barrier.wait()
                total = slots[0] + slots[1]
                barrier.wait()
                return total

            return reduce_sum

        results: list = [None, None]

        def rank_main(rank: int) -> None:
            spec = PythonReward(entrypoint=f"{reward_module}:value", normalize=True)
            reward = make_reward(spec, device=CPU, seed=0, reduce_sum=reduce_sum_for(rank))
            results[rank] = run_batches(reward, rank_batches[rank])

        threads = [threading.Thread(target=rank_main, args=(rank,)) for rank in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        seen: list[float] = []
        for step in range(2):
            seen += rank_batches[0][step] + rank_batches[1][step]
            for rank in (0, 1):
                expected = (np.array(rank_batches[rank][step]) - np.mean(seen)) / (np.std(seen) + EPS)
                assert results[rank][step] == pytest.approx(list(expected), abs=1e-9)

    def test_a_constant_reward_normalises_to_zero(self):
        reward = make_reward(BuiltinReward(name="arithmetic", normalize=True), device=CPU, seed=0)
        total = reward(PROMPTS[:1], RESPONSES[:1], METADATA[:1]).total
        assert total == [0.0] and not math.isnan(total[0])


# --- spec ---


def grpo_spec(reward: dict, **overrides) -> dict:
    return base_spec(
        name="grpo-reward",
        algorithm="grpo",
        model={"path": "builtin:tiny-gpt2", "max_seq_len": 32},
        data={"source": "builtin:arithmetic"},
        reward=reward,
        train={"steps": 2, "batch_size": 8},
        grpo={"group_size": 4, "gen": {"max_new_tokens": 4}},
        **overrides,
    )


class TestSpec:
    def test_duplicate_term_names_name_the_field(self):
        term = {"name": "a", "source": {"kind": "builtin", "name": "arithmetic"}}
        with pytest.raises(SpecError) as caught:
            parse_spec(grpo_spec({"kind": "sum", "terms": [term, term]}))
        (error,) = caught.value.errors
        assert error["loc"] == ["reward", "terms"] and "a appears more than once" in error["msg"]

    def test_nested_sum_is_refused(self):
        inner = {"kind": "sum", "terms": [{"name": "x", "source": {"kind": "builtin", "name": "arithmetic"}}]}
        with pytest.raises(SpecError) as caught:
            parse_spec(grpo_spec({"kind": "sum", "terms": [{"name": "a", "source": inner}]}))
        (error,) = caught.value.errors
        assert error["loc"] == ["reward", "terms", 0, "source"] and "cannot be another sum" in error["msg"]

    def test_run_refs_inside_sum_terms_are_references(self):
        terms = [{"name": "rm", "source": {"kind": "model", "path": "run:4@10"}}]
        spec = parse_spec(grpo_spec({"kind": "sum", "terms": terms}))
        assert [(r.run_id, r.step, r.field) for r in spec.references()] == [(4, 10, "reward.terms.0.source.path")]


# --- the API's submit check ---


class TestSubmitAllowList:
    def test_disallowed_entrypoint_is_422_naming_the_field_and_the_fix(self, client, monkeypatch):
        monkeypatch.setattr(client.app.state.settings, "reward_entrypoints", ["lab_rewards.*:score"])
        response = client.post("/api/v1/runs", json=grpo_spec({"kind": "python", "entrypoint": "evil:run"}))
        assert response.status_code == 422, response.text
        (error,) = response.json()["detail"]
        assert error["loc"] == ["body", "reward", "entrypoint"]
        assert ENV_VAR in error["msg"] and "add 'evil:run'" in error["msg"]

    def test_disallowed_sum_term_names_its_path(self, client, monkeypatch):
        monkeypatch.setattr(client.app.state.settings, "reward_entrypoints", [])
        terms = [
            {"name": "ok", "source": {"kind": "builtin", "name": "arithmetic"}},
            {"name": "mine", "source": {"kind": "python", "entrypoint": "mine:score"}},
        ]
        response = client.post("/api/v1/runs/validate", json=grpo_spec({"kind": "sum", "terms": terms}))
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == ["body", "reward", "terms", 1, "source", "entrypoint"]

    def test_disallowed_environment_entrypoint_is_422_at_its_field(self, client, monkeypatch):
        monkeypatch.setattr(client.app.state.settings, "reward_entrypoints", ["lab_rewards.*:score"])
        spec = {k: v for k, v in grpo_spec({"kind": "builtin", "name": "arithmetic"}).items() if k != "reward"}
        environment = {"kind": "python", "entrypoint": "my_envs:make", "max_tokens": 16}
        spec["grpo"] = {"group_size": 4, "gen": {"max_new_tokens": 4}, "environment": environment}
        response = client.post("/api/v1/runs/validate", json=spec)
        assert response.status_code == 422, response.text
        errors = response.json()["detail"]
        assert [e["loc"] for e in errors] == [["body", "grpo", "environment", "entrypoint"]], errors
        assert "add 'my_envs:make'" in errors[0]["msg"]

    def test_allowed_entrypoint_is_201(self, client, monkeypatch):
        monkeypatch.setattr(client.app.state.settings, "reward_entrypoints", ["lab_rewards.*:score", "other:*"])
        response = client.post("/api/v1/runs", json=grpo_spec({"kind": "python", "entrypoint": "lab_rewards.math:score"}))
        assert response.status_code == 201, response.text
        assert response.json()["spec"]["reward"]["entrypoint"] == "lab_rewards.math:score"

    def test_the_server_reads_its_allow_list_from_the_environment(self, monkeypatch):
        from api.settings import Settings

        monkeypatch.setenv(ENV_VAR, "lab_rewards.*:score, other:*")
        assert Settings().reward_entrypoints == ["lab_rewards.*:score", "other:*"]
