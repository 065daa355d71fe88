"""Multi-turn rollouts with a policy (trainer_core/rollout/episodes.py) and GRPO runs with an environment.

The layout keeps the loss on the policy's tokens only: the environment's tokens are attended to but outside
response_mask, a multi-turn row's log-probs are the ones its tokens get alone, and the GRPO loss does not move when
the environment's positions do. Then GRPO from an SFT start on the builtin tool task learns to use the calculator:
held-out success rises well above the start's (measured here, printed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlplane.allowlist import ENV_VAR
from rlplane.spec.environments import BuiltinEnvironment
from rlplane.spec.generation import GenSpec
from rlplane.spec.sections import PythonReward, RewardTerm, SumReward
from tests.harness.baselines import one_torch_thread
from tests.harness.environments import served_calculator, served_openenv
from tests.harness.launch import launch
from tests.harness.scripted_episodes import TOOL, Scripted, play, tiny_policy
from tests.harness.training import assert_resume_is_exact, metrics, run_spec
from trainer_core.environments import EnvError, Episode, Reply, answer, end
from trainer_core.losses.policy import grpo_loss, response_logprobs
from trainer_core.recipes import online
from trainer_core.rewards import make_reward
from trainer_core.rollout import episodes, rollouts
from trainer_core.rollout.rollouts import EvalPlan

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def policy() -> tuple[torch.nn.Module, object, object]:
    return tiny_policy()


ROWS = [{"prompt": "12*34="}, {"prompt": "What is 5*6? Use the tool."}]


def test_environment_tokens_are_attended_to_but_never_trained_on(policy) -> None:
    _, tokenizer, _ = policy
    scored = play(policy, Scripted(turns=3), ROWS)
    g, tool = scored.generation, tokenizer(TOOL, add_special_tokens=False)["input_ids"]
    for i, row in enumerate(ROWS):
        real = g.attention_mask[i, g.prompt_width :].bool()
        ids, mine = g.response_ids[i][real].tolist(), g.response_mask[i][real].tolist()
        policy_turn = len(ids) - 2 * len(tool)  # three turns of up to 5 tokens around two tool answers
        spans = [(a, a + len(tool)) for a in range(len(ids)) if ids[a : a + len(tool)] == tool]
        assert len(spans) == 2 and policy_turn >= 3
        for start, stop in spans:
            assert mine[start:stop] == [False] * len(tool)  # the environment's answer: attended, no loss
        assert sum(mine) == len(ids) - 2 * len(tool)  # everything else is the policy's
        assert not g.response_mask[i][~real].any()  # padding is neither
        prompt = tokenizer(row["prompt"])["input_ids"]
        assert g.input_ids[i, g.prompt_width - len(prompt) : g.prompt_width].tolist() == prompt
        positions = g.position_ids[i][g.attention_mask[i].bool()]
        assert positions.tolist() == list(range(len(prompt) + len(ids)))  # counted over real tokens
    assert scored.scores.total == [3.0, 3.0] and scored.scores.components == {"turns": [3.0, 3.0]}
    assert [(r.turns, r.tool_calls, r.truncated) for r in scored.episodes] == [(3, 2, False)] * 2
    assert scored.responses[0].count(TOOL) == 2  # the sample shows the whole episode


def test_a_multi_turn_row_scores_as_its_tokens_do_alone(policy) -> None:
    """Log-probs of the policy's tokens in the padded batch equal those of each row's real tokens alone, and the
    GRPO loss is the same whatever the log-probs at the environment's positions are."""
    model, _, _ = policy
    scored = play(policy, Scripted(turns=2, opening=" Go:"), ROWS + [{"prompt": "1+1="}], greedy=False)
    g = scored.generation
    with torch.no_grad():
        batch = response_logprobs(model(**g.inputs()).logits, g.input_ids, g.prompt_width)
        for i in range(len(scored.prompts)):
            keep = g.attention_mask[i].bool()
            ids = g.input_ids[i][keep].unsqueeze(0)
            prompt = int(keep[: g.prompt_width].sum())
            alone = response_logprobs(model(input_ids=ids).logits, ids, prompt)[0]
            real = g.attention_mask[i, g.prompt_width :].bool()
            assert torch.allclose(batch[i][real], alone, atol=1e-5)
    # what the rollout engine reported while sampling each turn is what the whole row gives the policy's tokens
    assert g.logprobs is not None and not g.logprobs[~g.response_mask].any()
    assert torch.allclose(g.logprobs[g.response_mask], batch[g.response_mask], atol=1e-4)
    logprobs = batch.clone().requires_grad_(True)
    advantages = torch.tensor([1.0, -1.0, 0.5])
    loss = lambda lp: grpo_loss(lp, lp.detach(), None, advantages, g.response_mask, 0.2, 0.0, "k3").loss  # noqa: E731
    moved = batch.masked_fill(~g.response_mask, 7.0)  # the environment's positions (and padding) changed
    assert torch.allclose(loss(batch), loss(moved))
    loss(logprobs).backward()
    assert (logprobs.grad[~g.response_mask] == 0).all() and (logprobs.grad[g.response_mask] != 0).any()


def test_limits_cut_episodes_off_with_the_environments_verdict(policy) -> None:
    by_turns = play(policy, Scripted(turns=10), ROWS[:1], max_turns=2)
    (record,) = by_turns.episodes
    assert (record.turns, record.truncated, record.reason) == (2, True, "cut off by max_turns")
    assert by_turns.scores.total == [-1.0] and TOOL in by_turns.responses[0]  # the first answer was appended
    by_tokens = play(policy, Scripted(turns=10), ROWS[:1], max_tokens=20)
    (record,) = by_tokens.episodes
    assert record.truncated and record.reason == "cut off by max_tokens"
    assert by_tokens.generation.attention_mask[0, by_tokens.generation.prompt_width :].sum() <= 20
    stats = episodes.step_stats(by_tokens)
    assert stats["env/truncated"] == stats["gen/truncated"] == 1.0


class Sessions:
    """Each row's episode takes row["turns"] policy turns; every live episode holds one of `sessions` sessions."""

    stop: tuple[str, ...] = ()

    def __init__(self, sessions: int) -> None:
        self.sessions, self.open, self.most, self.started = sessions, 0, 0, []

    def reset(self, episode: Episode) -> str:
        self.open += 1
        self.most = max(self.most, self.open)
        self.started.append(episode.row["prompt"])
        return ""

    def step(self, episode: Episode, message: str) -> Reply:
        if episode.turns < episode.row["turns"]:
            return answer(TOOL, tool_call=True)
        self.open -= 1
        return end(float(episode.turns))

    def cut_off(self, episode: Episode, why: str) -> Reply:
        self.open -= 1
        return end(-1.0, reason=f"cut off by {why}")

    def close(self) -> None:
        pass


def test_an_episode_starts_as_soon_as_another_frees_its_session(policy, monkeypatch: pytest.MonkeyPatch) -> None:
    """With 2 sessions, episodes of 1, 3, 1 and 1 turns: the third starts when the first ends, the fourth when the
    third does, so the four take 3 generation calls (4 if each pair played to its end), never more than 2 live; the
    results keep the rows' order, and an episode the limits cut off frees its session too."""
    calls = []
    generate = rollouts.generate
    monkeypatch.setattr(
        rollouts, "generate", lambda policy, contexts, *a, **k: calls.append(len(contexts)) or generate(policy, contexts, *a, **k)
    )
    rows = [{"prompt": p, "turns": t} for p, t in (("1+1=", 1), ("2+2=", 3), ("3+3=", 1), ("4+4=", 1))]
    environment = Sessions(sessions=2)
    scored = play(policy, environment, rows)
    assert calls == [2, 2, 2] and environment.most == 2 and environment.open == 0
    assert environment.started == [row["prompt"] for row in rows]
    assert scored.scores.total == [1.0, 3.0, 1.0, 1.0] and [r.turns for r in scored.episodes] == [1, 3, 1, 1]
    calls.clear()
    cut = play(policy, Sessions(sessions=1), [{"prompt": "1+1=", "turns": 9}, {"prompt": "2+2=", "turns": 1}], max_turns=2)
    assert calls == [1, 1, 1] and cut.scores.total == [-1.0, 1.0]


def test_a_prompt_that_the_opening_pushes_past_its_room_loses_its_start_and_says_so(policy) -> None:
    """The prompt with the environment's opening keeps its last model.max_seq_len - max_tokens tokens (here 96 - 64);
    an episode whose opening pushed it past them counts in gen/prompt_cut, one that fits does not."""
    _, tokenizer, _ = policy
    long_opening = " Tools:" + " calculator" * 40
    scored = play(policy, Scripted(turns=1, opening=long_opening), ROWS[:1])
    whole = tokenizer(ROWS[0]["prompt"])["input_ids"] + tokenizer(long_opening, add_special_tokens=False)["input_ids"]
    g = scored.generation
    assert len(whole) > 32 and g.input_ids[0, g.prompt_width - 32 : g.prompt_width].tolist() == whole[-32:]
    assert int(g.attention_mask[0, : g.prompt_width].sum()) == 32
    fits = play(policy, Scripted(turns=1, opening=" Go:"), ROWS[:1])
    assert (scored.prompt_cut, fits.prompt_cut) == ([True], [False])
    both = rollouts.keep(fits, [0], 0, also=scored)
    assert online.rollout_stats(both, torch.tensor(both.scores.total), {})["gen/prompt_cut"] == 1.0


def transcript_length(prompts: list[str], responses: list[str], metadata: list[dict]) -> list[float]:
    """A python reward: the episode's text after the prompt, in hundreds of characters."""
    return [len(response) / 100 for response in responses]


def test_a_reward_section_adds_its_score_of_each_episode(policy, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's reward section scores each episode's text after the prompt (the policy's turns and the environment's
    answers) and adds it to the environment's reward, its component beside the environment's; `observe` leaves its
    normaliser as it was; a component named as one of the environment's is refused. In an evaluation, eval/reward is
    the sum and eval/success the environment's verdict alone."""
    monkeypatch.setenv(ENV_VAR, "tests.test_episodes:*")
    source = {"entrypoint": "tests.test_episodes:transcript_length"}
    played = play(policy, Scripted(turns=2, opening=" Go:"), ROWS)
    lengths = [len(response) / 100 for response in played.responses]
    assert all(TOOL in response for response in played.responses)  # the whole episode is what the reward reads
    reward = make_reward(PythonReward(**source), device=torch.device("cpu"), seed=0)
    scored = episodes.with_reward(played, reward, ROWS)
    assert scored.scores.total == [2.0 + length for length in lengths]
    assert scored.scores.components == {"turns": [2.0, 2.0], "transcript_length": lengths}
    normalized = make_reward(PythonReward(**source, normalize=True), device=torch.device("cpu"), seed=0)
    before = normalized.state_dict()
    episodes.with_reward(played, normalized, ROWS, observe=True)
    assert normalized.state_dict() == before
    episodes.with_reward(played, normalized, ROWS)
    assert normalized.state_dict() != before
    clashing = make_reward(
        SumReward(terms=[RewardTerm(name="turns", source=PythonReward(**source))]), device=torch.device("cpu"), seed=0
    )
    with pytest.raises(EnvError, match="reward: its component 'turns' has the name of one the environment reports"):
        episodes.with_reward(played, clashing, ROWS)
    model, tokenizer, backend = policy
    penalty = make_reward(PythonReward(**source, scale=-1.0), device=torch.device("cpu"), seed=0)
    run = SimpleNamespace(tokenizer=tokenizer, backend=backend, spec=SimpleNamespace(model=SimpleNamespace(max_seq_len=96)))
    run.reward = penalty
    limits = BuiltinEnvironment(name="calculator", max_turns=4, max_tokens=64)
    evaluated = episodes.evaluate(run, model, ROWS, GenSpec(max_new_tokens=5), Scripted(turns=2), limits, EvalPlan(k=(1,)))
    assert evaluated["eval/success"] == 1.0 and 0 < evaluated["eval/reward"] < 2.0
    assert evaluated["eval/reward/transcript_length"] == pytest.approx(evaluated["eval/reward"] - 2.0)


def test_evaluation_plays_episodes(policy) -> None:
    model, tokenizer, backend = policy
    spec = SimpleNamespace(model=SimpleNamespace(max_seq_len=96))
    run = SimpleNamespace(tokenizer=tokenizer, backend=backend, spec=spec, reward=None)
    limits = BuiltinEnvironment(name="calculator", max_turns=4, max_tokens=64)
    gen = GenSpec(max_new_tokens=5)
    greedy = episodes.evaluate(run, model, ROWS * 3, gen, Scripted(turns=2), limits, EvalPlan(k=(1,)))
    assert greedy["eval/turns"] == 2 and greedy["eval/tool_calls"] == 1 and greedy["eval/reward"] == 2.0
    assert greedy["eval/success"] == greedy["eval/pass@1"] == 1.0 and greedy["eval/truncated"] == 0
    assert greedy["eval/prompt_cut"] == 0
    crowded = Scripted(turns=2, opening=" Tools:" + " calculator" * 40)  # pushes every prompt past its 32 tokens
    assert episodes.evaluate(run, model, ROWS, gen, crowded, limits, EvalPlan(k=(1,)))["eval/prompt_cut"] == 1.0
    sampled = episodes.evaluate(run, model, ROWS, gen, Scripted(turns=9), limits, EvalPlan(4, False, 0.0, (1, 4)))
    assert sampled["eval/truncated"] == 1 and sampled["eval/success"] == 0 and sampled["eval/pass@4"] == 0


# --- GRPO runs ---

SFT = {
    "name": "sft-calculator",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 64},
    "data": {"source": "builtin:calculator", "eval_fraction": 0.1},
    "train": {"steps": 400, "batch_size": 32, "lr": 3e-3, "warmup_steps": 20, "log_every": 100},
    "sft": {"samples_to_log": 0},
}


def grpo_spec(model: Path, environment: dict, **train: object) -> dict:
    return {
        "name": "grpo-environment",
        "algorithm": "grpo",
        "model": {"path": str(model), "max_seq_len": 64},
        "data": {"source": "builtin:calculator", "eval_fraction": 0.1},
        "train": {"steps": 30, "batch_size": 64, "lr": 2e-4, "schedule": "constant", "eval_every": 15, **train},
        "grpo": {
            "group_size": 8,
            "gen": {"max_new_tokens": 20},
            "environment": {"max_turns": 3, "max_tokens": 56, **environment},
            "samples_to_log": 2,
            "samples_every": 15,
        },
    }


@pytest.fixture(scope="module")
def sft_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 SFT steps on builtin:calculator (10 s): its rows call the tool on a fifth of the problems, so the model
    answers straight away, and wrongly, almost every time."""
    out = tmp_path_factory.mktemp("sft-calculator") / "out"
    with one_torch_thread():  # a module fixture starts before the tests' one_thread does
        run_spec(out.parent / "sft.yaml", SFT, "--out", str(out))
    return out / "final"


def test_grpo_learns_to_call_the_calculator(sft_start: Path, tmp_path: Path) -> None:
    """30 GRPO steps (8 prompts x 8 episodes) with the calculator environment: greedy success on the 810 held-out
    problems goes from the SFT start's (measured 0.005: it never calls the tool) to at least 0.3 above it (measured
    0.74 after 20 steps, 0.81 after 60), and tool calls from none to almost every episode."""
    out = tmp_path / "out"
    run_spec(tmp_path / "grpo.yaml", grpo_spec(sft_start, {"kind": "builtin", "name": "calculator"}), "--out", str(out))
    success, calls = metrics(out, "eval/success"), metrics(out, "eval/tool_calls")
    print(f"held-out success {success}, tool calls per episode {calls}")
    assert sorted(success) == [0, 15, 30]
    assert success[30] >= success[0] + 0.3 and calls[30] >= calls[0] + 0.5, (success, calls)
    for key in ("env/turns", "env/tool_calls", "env/errors", "env/truncated", "gen/truncated", "reward/correct"):
        assert sorted(metrics(out, key)) == list(range(1, 31)), key
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    last = [s for s in samples if s["step"] == 30]
    assert len(last) == 16 and all({"turns", "tool_calls", "errors", "truncated", "advantage"} <= set(s["scores"]) for s in last)
    called = [s for s in last if s["scores"]["tool_calls"]]
    assert called and all("<result>" in s["response"] for s in called)  # the whole episode, the tool's answer too
    for s in last:  # and turn by turn: the policy's first, then in turn, the tool's answers as the environment's
        roles = [t["role"] for t in s["turns"]]
        assert roles == ["policy", "environment"] * (len(roles) // 2) + ["policy"] * (len(roles) % 2), roles
        assert "".join(t["text"] for t in s["turns"]) == s["response"]
        assert roles.count("environment") == s["scores"]["tool_calls"] and all(
            t["text"].startswith("<result>") for t in s["turns"] if t["role"] == "environment"
        )
    # An eval run of the final model on the environment (algorithm: eval) finds what the run's own last evaluation did:
    # the same held-out problems, greedy, in the same batches.
    spec = grpo_spec(out / "final", {"kind": "builtin", "name": "calculator"})
    evaluation = {"name": "eval-calculator", "algorithm": "eval", "model": spec["model"], "data": spec["data"]}
    evaluation["eval"] = {"greedy": True, "gen": spec["grpo"]["gen"], "environment": spec["grpo"]["environment"]}
    run_spec(tmp_path / "eval.yaml", evaluation, "--out", str(tmp_path / "eval"))
    for key in ("eval/success", "eval/tool_calls", "eval/turns", "eval/reward/correct"):
        assert metrics(tmp_path / "eval", key) == {1: metrics(out, key)[30]}, key


def test_ppo_learns_to_call_the_calculator(sft_start: Path, tmp_path: Path) -> None:
    """PPO with ppo.environment from the same SFT start: 20 steps of 32 episodes, the reward at each episode's last
    policy token and GAE across the tool's answers, the advantages raw (ppo.whiten_advantages false; every other PPO
    test runs the default, whitened). Greedy held-out success rises by at least 0.3 (measured 0.005 -> 0.68, 0.77
    whitened; tool calls 0 -> 0.83 per episode), tool calls by at least 0.5 per episode, and the health signals PPO
    reports for every run are there."""
    spec = {
        "name": "ppo-environment",
        "algorithm": "ppo",
        "model": {"path": str(sft_start), "max_seq_len": 64},
        "data": {"source": "builtin:calculator", "eval_fraction": 0.1},
        "train": {"steps": 20, "batch_size": 32, "lr": 3e-5, "schedule": "constant", "eval_every": 20},
        "ppo": {
            "kl_coef": 0.01,
            "epochs": 4,
            "minibatch_size": 16,
            "whiten_advantages": False,
            "gen": {"max_new_tokens": 20},
            "environment": {"kind": "builtin", "name": "calculator", "max_turns": 3, "max_tokens": 56},
            "samples_to_log": 2,
            "samples_every": 20,
        },
    }
    out = tmp_path / "out"
    run_spec(tmp_path / "ppo.yaml", spec, "--out", str(out))
    success, calls = metrics(out, "eval/success"), metrics(out, "eval/tool_calls")
    print(f"held-out success {success}, tool calls per episode {calls}")
    assert success[20] >= success[0] + 0.3 and calls[20] >= calls[0] + 0.5, (success, calls)
    keys = ("env/tool_calls", "gen/truncated", "ppo/clipfrac_low", "ppo/clipfrac_high", "ppo/ratio_max")
    for key in (*keys, "ppo/ratio_mean", "ppo/ratio_min", "gen/response_length_min", "gen/response_length_max"):
        assert sorted(metrics(out, key)) == list(range(1, 21)), key
    ratio_min, ratio_max = metrics(out, "ppo/ratio_min"), metrics(out, "ppo/ratio_max")
    assert all(0 < ratio_min[s] <= 1.0 <= ratio_max[s] for s in ratio_min)  # the first update's ratios are 1
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    last = [s for s in samples if s["step"] == 20]
    assert len(last) == 2 and all({"turns", "tool_calls", "errors", "truncated"} <= set(s["scores"]) for s in last)


def test_a_run_with_an_environment_resumes_exactly(sft_start: Path, tmp_path: Path) -> None:
    """3 steps straight vs 1, then --resume (its stored spec, every default stated, parses again): the same policy
    bit for bit, the same episodes' metrics."""
    spec = grpo_spec(sft_start, {"kind": "builtin", "name": "calculator"}, steps=3, eval_every=3, checkpoint_every=1)
    spec["data"]["eval_fraction"] = 0.01
    assert_resume_is_exact(tmp_path, spec, 1, ("reward/mean", "env/tool_calls", "env/turns", "grpo/kl", "eval/success"))


def test_two_ranks_share_a_server_with_different_counts_of_episodes(sft_start: Path, tmp_path: Path) -> None:
    """GRPO on two forked ranks (gloo) against one OpenEnv server of 10 sessions, divided: 5 a rank. Each rank plays
    its 8 episodes of a step 5 at a time, and the 11 held-out problems split 6 and 5: the rank with 6 plays on after
    the other has none left, which generates on a stand-in meanwhile (generation is a collective). The run ends
    with every step and evaluation logged, instead of hanging where a rank runs out of episodes."""
    with served_openenv(sessions=10) as url:
        environment = {"kind": "openenv", "url": url, "sessions": 5, "stop": ["\n"], "max_turns": 2}
        spec = grpo_spec(sft_start, environment, steps=2, batch_size=16, eval_every=2)
        spec["data"]["eval_fraction"] = 0.00135  # 11 held-out problems
        out = launch(tmp_path, spec, {"kind": "torch", "precision": "fp32"}, "two-ranks")
    for key in ("env/turns", "reward/openenv", "grpo/policy_loss"):
        assert sorted(metrics(out, key)) == [1, 2], key
    assert sorted(metrics(out, "eval/success")) == [0, 2]


@pytest.fixture
def service() -> Iterator[str]:
    with served_calculator() as url:
        yield url


def test_grpo_plays_a_remote_environment_and_the_sandbox(sft_start: Path, tmp_path: Path, service: str) -> None:
    """Two steps each with the calculator served over HTTP (the same episodes as in-process: the reference server
    plays the builtin; a reward section adds its score of each episode to the environment's), with an OpenEnv
    environment server (openenv-core's own, in its own process: the guessing game, whose rewards come back summed per
    episode; it allows 4 sessions, so 4 episodes are played at a time) and with the python verifier, whose sandbox
    answers the policy's non-code with reasons; the runs log them and go on."""
    short = {"steps": 2, "batch_size": 16, "eval_every": None}
    remote = grpo_spec(sft_start, {"kind": "http", "url": service, "stop": ["</calc>"]}, **short)
    remote["data"]["eval_fraction"] = 0.002  # 16 held-out problems: the evaluation's episodes go through the server too
    remote["reward"] = {"kind": "builtin", "name": "arithmetic", "scale": 0.5}  # added to the environment's reward
    run_spec(tmp_path / "http.yaml", remote, "--out", str(tmp_path / "http"))
    assert len(metrics(tmp_path / "http", "env/tool_calls")) == 2 and len(metrics(tmp_path / "http", "eval/success")) == 2
    correct, arithmetic, mean = (metrics(tmp_path / "http", k) for k in ("reward/correct", "reward/arithmetic", "reward/mean"))
    assert sorted(arithmetic) == [1, 2] and all(mean[s] == pytest.approx(correct[s] + arithmetic[s]) for s in (1, 2))
    assert len(metrics(tmp_path / "http", "eval/reward/arithmetic")) == 2
    with served_openenv(sessions=4) as url:  # 16 episodes a step, 4 at a time
        environment = {"kind": "openenv", "url": url, "sessions": 4, "stop": ["\n"], "max_turns": 2}
        guessing = grpo_spec(sft_start, environment, **short)
        guessing["data"]["eval_fraction"] = 0.002  # 16 held-out problems: the protocol, not the success, is checked
        run_spec(tmp_path / "openenv.yaml", guessing, "--out", str(tmp_path / "openenv"))
    rewards, turns = metrics(tmp_path / "openenv", "reward/openenv"), metrics(tmp_path / "openenv", "env/turns")
    assert sorted(rewards) == sorted(turns) == [1, 2] and all(-0.2 <= r <= 0.9 for r in rewards.values()), rewards
    sandboxed = grpo_spec(sft_start, {"kind": "builtin", "name": "python", "max_turns": 1}, **short)
    sandboxed["grpo"]["environment"]["sandbox"] = {"wall_s": 5}
    sandboxed["data"]["eval_fraction"] = 0.002  # 16 held-out problems, each a sandboxed program
    run_spec(tmp_path / "python.yaml", sandboxed, "--out", str(tmp_path / "python"))
    # calculator rows have no tests: an answer like "1776" is a program that runs (1), "<calc>..." is not (0)
    assert len(metrics(tmp_path / "python", "reward/passed")) == 2
    errors = metrics(tmp_path / "python", "env/errors")
    assert len(errors) == 2 and min(errors.values()) > 0
    logs = (tmp_path / "python" / "logs.jsonl").read_text()
    assert "environment builtin python" in logs and "sandbox:" in logs and "env errors=" in logs
