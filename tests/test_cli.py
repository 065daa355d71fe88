"""`rlplane up` / `rlplane api` on the embedded default: migrate, bootstrap once, serve."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.harness.factories import auth
from tests.harness.launch import forked
from tests.harness.servers import api_processes


def rlplane(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, timeout=180)


def train(log: Path, *args: str) -> None:
    """`rlplane train ARGS`, one process forked from the harness's zygote (the training stack imported once, as
    the trainer tests' ranks are: tests/harness/forked_ranks.py); asserts exit 0."""
    forked(["-m", "cli.main", "train", *args], None, log, timeout=180)


def test_help_is_there():
    for command in ([], ["api"], ["up"]):
        result = rlplane(*command, "--help")
        assert result.returncode == 0 and "Usage" in result.stdout
    assert "RLPLANE_DATABASE_URL" in rlplane("api", "--help").stdout


def test_first_start_bootstraps_admin_then_restarts_quietly(tmp_path):
    home = tmp_path / "home"
    url = f"sqlite:///{home / 'rlplane.db'}"
    with api_processes(home, url, token=None) as (api,):
        token_file = home / "admin.token"
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
        token = token_file.read_text().strip()
        log = (home / f"api-{api.port}.log").read_text()
        assert token in log  # printed once, at creation
        me = httpx.get(api.url + "/api/v1/me", headers=auth(token))
        assert me.status_code == 200 and me.json()["user"]["is_site_admin"]
        assert httpx.get(api.url + "/api/v1/me").status_code == 401
    with api_processes(home, url, token=None) as (api,):
        assert token not in (home / f"api-{api.port}.log").read_text()
        assert token_file.read_text().strip() == token
        assert httpx.get(api.url + "/api/v1/users", headers=auth(token)).json()["count"] == 1


def test_short_bootstrap_token_is_refused(tmp_path):
    env = {**os.environ, "RLPLANE_HOME": str(tmp_path), "RLPLANE_BOOTSTRAP_TOKEN": "short"}
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "api", "--port", "1"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 2 and "RLPLANE_BOOTSTRAP_TOKEN" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "command, variable, value, words",
    [
        (["api", "--port", "1"], "RLPLANE_DATABASE_URL", "s3cret@nowhere", "RLPLANE_DATABASE_URL: Value error, not a database"),
        (["worker", "--token", "x"], "RLPLANE_INPUT_CACHE_GB", "lots", "RLPLANE_INPUT_CACHE_GB: Input should be a valid number"),
        (["worker", "--token", "x"], "RLPLANE_HEARTBEAT_S", "-1", "RLPLANE_HEARTBEAT_S: Input should be greater than 0"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_named_with_its_variable(tmp_path, command, variable, value, words):
    """The API's and the worker's RLPLANE_* settings: a bad one ends the command with exit 2 and one line naming the
    variable, without its value (it may be a secret) and without a traceback."""
    from typer.testing import CliRunner

    from cli.main import app

    result = CliRunner().invoke(app, command, env={"RLPLANE_HOME": str(tmp_path), variable: value})
    assert result.exit_code == 2 and words in result.stderr, (result.exit_code, result.stderr, result.exception)
    assert value not in result.stderr and "Traceback" not in result.stderr


def test_unreachable_database_is_one_clear_message(tmp_path):
    env = {**os.environ, "RLPLANE_HOME": str(tmp_path), "RLPLANE_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "api", "--port", "1"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 2 and "cannot reach the database" in result.stderr and "Traceback" not in result.stderr
    assert "nobody" not in result.stderr  # credentials are redacted


@pytest.mark.parametrize("algorithm", ["sft", "reward"])  # dpo's runs whole in tests/test_dpo.py
def test_rlplane_train_runs_the_shipped_example(tmp_path, algorithm):
    out = tmp_path / "run"
    sets = ["train.steps=4", "train.eval_every=2", "train.checkpoint_every=2"]
    train(tmp_path / "train.log", f"examples/{algorithm}.yaml", *(a for s in sets for a in ("--set", s)), "--out", str(out))
    assert (out / "final" / "config.json").exists() and (out / "metrics.jsonl").read_text().count("train/loss") == 4
    train(tmp_path / "again.log", "--resume", str(out))  # a finished run resumes to nothing and exports again
    assert (out / "final" / "config.json").exists() and not list(out.glob(".final.*"))


@pytest.mark.parametrize(("algorithm", "start"), [("ppo", "sft-randomwalks"), ("grpo", "sft-arithmetic"), ("ilql", None)])
def test_rlplane_train_runs_the_shipped_rl_example(tmp_path, algorithm, start):
    """The RL examples, shortened: ppo and grpo from a few steps of the SFT example they chain from
    (their model.path points at that example's output), ilql on its own. Reward, KL (ppo, grpo)
    and samples are reported, and the policy is exported."""
    short = ["--set", "train.steps=4", "--set", "train.eval_every=2", "--set", "train.checkpoint_every=2"]
    sets = list(short)
    if start is not None:
        train(tmp_path / f"{start}.log", f"examples/{start}.yaml", *short, "--out", str(tmp_path / start))
        sets += ["--set", f"model.path={tmp_path / start / 'final'}"]
    out = tmp_path / "run"
    train(tmp_path / "train.log", f"examples/{algorithm}.yaml", *sets, "--out", str(out))
    keys = {json.loads(line)["key"] for line in (out / "metrics.jsonl").read_text().splitlines()}
    expected = {
        "ppo": {"reward/mean", "ppo/kl", "ppo/kl_coef", "eval/optimality"},
        "grpo": {"reward/mean", "grpo/kl", "eval/accuracy"},
        "ilql": {"train/loss", "eval/optimality"},
    }[algorithm]
    assert expected <= keys, expected - keys
    assert (out / "samples.jsonl").read_text().strip()
    assert (out / "final" / "config.json").exists()


def test_rlplane_eval_of_a_run_that_played_episodes_plays_its_environment() -> None:
    """`rlplane eval run:<id>` of a GRPO run with an environment: the eval spec takes the run's environment and
    turn length, needs no reward (the environment judges), and takes a --reward to add; it passes the spec's rules."""
    from cli.commands.evaluate import eval_spec
    from rlplane.spec import parse_spec

    environment = {"kind": "builtin", "name": "calculator", "max_turns": 3, "max_tokens": 56}
    written = {
        "name": "grpo-calculator",
        "algorithm": "grpo",
        "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 128},
        "data": {"source": "builtin:calculator"},
        "train": {"steps": 2},
        "grpo": {"gen": {"max_new_tokens": 20}, "environment": environment},
    }
    source = parse_spec(written)
    given = {"name": None, "project": None, "data": None, "eval": {"greedy": True, "gen": {}}}
    spec = eval_spec("run:7", source, reward=None, **given)
    assert spec["eval"] == {"greedy": True, "gen": {"max_new_tokens": 20}, "environment": environment} and spec["reward"] is None
    assert parse_spec(spec).eval.environment.name == "calculator"
    assert spec["model"] == {"path": "run:7", "max_seq_len": 128} and spec["data"] == {"source": "builtin:calculator"}
    # the API answers the spec with its defaults explicit (RunDetail.spec): the eval takes them as they are
    stored = eval_spec("run:7", parse_spec(source.model_dump(mode="json")), reward=None, **given)
    assert stored["eval"]["gen"]["max_new_tokens"] == 20 and stored["eval"]["gen"]["temperature"] == 1.0
    assert parse_spec(stored).eval.environment == source.grpo.environment
    added = eval_spec("run:7", source, reward="builtin:arithmetic", **given)
    assert added["reward"] == {"kind": "builtin", "name": "arithmetic"} and added["eval"]["environment"] == environment
