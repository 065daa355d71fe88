"""The `rlplane` client commands for runs, against `rlplane up` on Postgres with a real worker:
submit/wait/follow and their exit codes, list/show/cancel/resume/clone/archive/lineage, logs,
metrics, samples, checkpoints and the verified, resumable download."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from cli import follow, output
from cli.main import app
from rlplane.client import Client
from tests.harness.databases import create_postgres_database, drop_postgres_database
from tests.harness.servers import UpServer

ROOT = Path(__file__).resolve().parents[1]
SHORT = ["--set", "train.steps=20", "--set", "train.checkpoint_every=10", "--set", "train.eval_every=10"]


class Stack:
    def __init__(self, server: UpServer, config: Path) -> None:
        self.server = server
        self.env = {"RLPLANE_URL": server.url, "RLPLANE_TOKEN": server.token, "XDG_CONFIG_HOME": str(config)}
        self.http = httpx.Client(base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {server.token}"}, timeout=30)

    def cli(self, *args: str, **env: str):
        result = CliRunner().invoke(app, list(args), env={**self.env, **env}, catch_exceptions=False)
        return result

    def run(self, run_id: int) -> dict:
        return self.http.get(f"/runs/{run_id}").json()

    def until(self, run_id: int, *statuses: str, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while (run := self.run(run_id))["status"] not in statuses:
            assert time.monotonic() < deadline, run
            time.sleep(0.3)
        return run


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("cli-runs")
    database_url = create_postgres_database()
    server = UpServer(home / "home", workers=1, extra_env={"RLPLANE_DATABASE_URL": database_url, "RLPLANE_ALERT_S": "1"})
    try:
        server.wait_ready()
        yield Stack(server, home / "config")
    finally:
        server.stop()
        drop_postgres_database(database_url)


@pytest.fixture(scope="module")
def finished(stack: Stack) -> dict:
    """One short SFT run submitted with --wait; the read-only tests below look at it."""
    result = stack.cli("submit", "examples/sft.yaml", *SHORT, "--name", "cli-sft", "--wait", "--json")
    assert result.exit_code == 0, result.stderr + stack.server.log_path.read_text()[-2000:]
    final = json.loads(result.stdout)
    assert final["status"] == "succeeded" and final["name"] == "cli-sft" and final["last_step"] == 20
    stored = stack.run(final["id"])
    assert stored["spec"]["train"]["steps"] == 20 and stored["spec"]["name"] == "cli-sft"
    # The spec as written, comments kept, --set and --name applied in place (not a 66-line expansion).
    text = stored["spec_text"]
    assert text.startswith("# Supervised fine-tuning (SFT)") and "name: cli-sft\n" in text and "dpo:" not in text
    assert "  steps: 20\n" in text and "  lr: 5.0e-4                # tiny models want a larger learning rate" in text
    assert "submitted run" in result.stderr and "succeeded" in result.stderr
    return stored


def test_submit_prints_only_the_run_id_on_stdout(stack, finished):
    result = stack.cli("submit", "examples/sft.yaml", "--set", "train.steps=2000", "--name", "queued-then-cancelled")
    assert result.exit_code == 0, result.stderr
    run_id = int(result.stdout)
    assert stack.run(run_id)["name"] == "queued-then-cancelled"
    assert stack.cli("runs", "cancel", str(run_id)).exit_code == 0
    assert stack.until(run_id, "cancelled")["status"] == "cancelled"


def test_an_invalid_spec_is_listed_field_by_field_and_nothing_is_submitted(stack, tmp_path):
    before = stack.http.get("/runs", params={"limit": 1}).json()["count"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nalgorithm: sft\nmodel: {path: builtin:tiny-gpt2}\ndata: {source: builtin:tiny-sft}\n"
        "train: {steps: -1, lr: fast}\n"
    )
    result = stack.cli("submit", str(bad), "--wait")
    assert result.exit_code == 3 and result.stdout == ""
    assert "invalid spec (2 problems)" in result.stderr and "train.steps:" in result.stderr and "train.lr:" in result.stderr
    typo = stack.cli("submit", "examples/sft.yaml", "--set", "train.stepz=5")
    assert typo.exit_code == 3 and "did you mean 'steps'" in typo.stderr
    missing = stack.cli("submit", "nowhere.yaml")
    assert missing.exit_code == 3 and "does not exist" in missing.stderr
    assert stack.http.get("/runs", params={"limit": 1}).json()["count"] == before


def test_wait_exits_1_when_the_run_fails(stack, tmp_path):
    result = stack.cli("submit", "examples/sft.yaml", *SHORT, "--set", f"model.path={tmp_path / 'no-model'}", "--wait")
    assert result.exit_code == 1, result.stderr
    run = stack.run(int(result.stdout))
    assert run["status"] == "failed" and f"run {run['id']} failed at step 0/20 (trainer exited with 2:" in result.stderr
    assert "error (bad model): model directory" in result.stderr
    # Its own configuration failed it: resuming would fail it again, so it is not offered (and refused).
    assert (run["failure"], run["resumable"], run["attempts"][-1]["failure"]) == ("config", False, "config")
    refused = stack.cli("runs", "resume", str(run["id"]))
    assert refused.exit_code == 4 and "failed on its own configuration" in refused.stderr and "clone it" in refused.stderr


def test_submit_uploads_a_local_data_file_and_names_it_dataset_id(stack, tmp_path):
    """A relative data.source is uploaded (prompt/response rows: the trainer's default columns) and the spec sent
    names dataset:<id>; the run trains on it. A file whose rows do not fit is refused at data.source, unsent."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"{a}+1=", "response": str(a + 1)}) + "\n" for a in range(40)))
    source = os.path.relpath(rows)
    result = stack.cli("submit", "examples/sft.yaml", *SHORT, "--set", f"data.source={source}", "--wait")
    assert result.exit_code == 0, result.stderr
    run = stack.run(int(result.stdout))
    assert run["status"] == "succeeded" and run["spec"]["data"]["source"].startswith("dataset:"), run["spec"]["data"]
    assert f"uploaded {source} (40 rows) as {run['spec']['data']['source']}" in result.stderr
    before = stack.http.get("/runs", params={"limit": 1}).json()["count"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "q"}\n{"prompt": "r"}\n')
    refused = stack.cli("submit", "examples/sft.yaml", "--set", f"data.source={os.path.relpath(bad)}")
    assert refused.exit_code == 3 and "data.source:" in refused.stderr and "column 'completion' in 2 of 2 rows" in refused.stderr
    assert stack.http.get("/runs", params={"limit": 1}).json()["count"] == before


def test_a_diverged_run_fails_with_where_it_went_nan(stack):
    """examples/sft.yaml at lr=1e30: the loss is NaN at step 2. The run is failed (not succeeded), --wait exits 1,
    the end reason says where, and no final model was registered."""
    result = stack.cli("submit", "examples/sft.yaml", *SHORT, "--set", "train.lr=1e30", "--wait")
    assert result.exit_code == 1, result.stderr
    run = stack.run(int(result.stdout))
    reason = "diverged: train/loss is NaN at step 2 (train.on_nonfinite: fail)"
    assert run["status"] == "failed" and run["attempts"][-1]["end_reason"] == reason, run
    assert (run["failure"], run["resumable"]) == ("diverged", False)
    assert reason in result.stderr
    assert "warning train.lr: train.lr 1e+30 is almost certainly a mistake" in result.stderr  # said at submit
    checkpoints = stack.http.get(f"/runs/{run['id']}/checkpoints").json()["data"]
    assert checkpoints == [], checkpoints


def test_wait_exits_2_when_the_run_is_cancelled_and_resume_requeues_it(stack, finished):
    env = {**os.environ, **stack.env}
    waiting = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "submit", "examples/sft.yaml", "--set", "train.steps=3000", "--set",
         "train.checkpoint_every=5", "--name", "to-cancel", "--wait"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    run_id = int(waiting.stdout.readline())
    run = stack.until(run_id, "running")
    deadline = time.monotonic() + 60
    while stack.run(run_id)["latest_checkpoint_step"] is None:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    cancel = stack.cli("runs", "cancel", str(run_id))
    assert cancel.exit_code == 0 and "cancelling" in cancel.stderr or "cancelled" in cancel.stderr
    assert waiting.wait(60) == 2
    assert "cancelled" in waiting.stderr.read() and stack.run(run_id)["status"] == "cancelled"

    resumed = stack.cli("runs", "resume", str(run_id), "--json")
    assert resumed.exit_code == 0 and json.loads(resumed.stdout)["status"] == "queued"
    run = stack.until(run_id, "running")
    assert stack.cli("runs", "cancel", str(run_id)).exit_code == 0
    run = stack.until(run_id, "cancelled")
    assert len(run["attempts"]) == 2 and run["attempts"][1]["number"] == 2
    again = stack.cli("runs", "cancel", str(run_id))
    assert again.exit_code == 4 and "409" in again.stderr and "cancelled" in again.stderr


def test_clone_with_follow_streams_the_logs(stack, finished):
    result = stack.cli("runs", "clone", str(finished["id"]), "--set", "train.steps=10", "--follow")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    clone = stack.run(int(lines[0]))
    assert clone["name"] == "cli-sft-clone" and clone["spec"]["train"]["steps"] == 10  # a name of its own
    assert clone["spec_text"].startswith("# Supervised fine-tuning (SFT)") and "  steps: 10\n" in clone["spec_text"]
    assert clone["spec"]["train"]["lr"] == finished["spec"]["train"]["lr"]
    stored = stack.http.get(f"/runs/{clone['id']}/logs", params={"limit": 10_000}).json()["data"]
    assert lines[1:] == [follow.log_text(line) for line in stored]  # with the time each was printed
    assert any("exported the final model" in line["text"] for line in stored)


def test_list_show_archive(stack, finished):
    listed = json.loads(stack.cli("runs", "list", "--status", "succeeded", "--json").stdout)
    assert finished["id"] in [r["id"] for r in listed["data"]] and {r["status"] for r in listed["data"]} == {"succeeded"}
    table = stack.cli("runs", "list", "--search", "cli-sft").stdout
    assert "cli-sft" in table and "20/20" in table and "STATUS" in table
    shown = stack.cli("runs", "show", str(finished["id"])).stdout
    assert "succeeded" in shown and "local-1" in shown and f"runs/{finished['id']}/final" in shown
    assert json.loads(stack.cli("runs", "show", str(finished["id"]), "--json").stdout)["id"] == finished["id"]

    assert stack.cli("runs", "archive", str(finished["id"])).exit_code == 0
    assert stack.run(finished["id"])["archived"] is True
    assert finished["id"] not in [r["id"] for r in json.loads(stack.cli("runs", "list", "--json").stdout)["data"]]
    assert finished["id"] in [r["id"] for r in json.loads(stack.cli("runs", "list", "--archived", "--json").stdout)["data"]]
    assert stack.cli("runs", "archive", str(finished["id"]), "--undo").exit_code == 0
    assert stack.run(finished["id"])["archived"] is False


def test_lineage_shows_the_parent_a_spec_names(stack, finished):
    child = stack.cli("submit", "examples/dpo.yaml", "--set", f"model.path=run:{finished['id']}", "--name", "cli-child")
    assert child.exit_code == 0, child.stderr
    child_id = int(child.stdout)
    stack.cli("runs", "cancel", str(child_id))
    links = json.loads(stack.cli("runs", "lineage", str(child_id), "--json").stdout)
    assert [(p["run_id"], p["field"]) for p in links["parents"]] == [(finished["id"], "model.path")]
    table = stack.cli("runs", "lineage", str(finished["id"])).stdout
    assert "child" in table and "cli-child" in table and "this" in table


def test_logs_metrics_and_samples(stack, finished):
    run_id = str(finished["id"])
    tail = stack.cli("logs", run_id, "--tail", "3")
    assert tail.exit_code == 0 and len(tail.stdout.splitlines()) == 3
    every = [json.loads(line) for line in stack.cli("logs", run_id, "--json").stdout.splitlines()]
    stamped = [f"{time.strftime('%H:%M:%S', time.localtime(line['time']))} {line['text']}" for line in every[-3:]]
    assert len(every) > 3 and tail.stdout.splitlines() == stamped  # each line with the time it was printed
    assert stack.cli("logs", run_id, "--rank", "1").stdout == ""
    assert [json.loads(line)["text"] for line in stack.cli("logs", run_id, "-q", "EXPORTED", "--json").stdout.splitlines()]

    table = stack.cli("metrics", run_id).stdout
    assert "train/loss" in table and "eval/loss" in table and any(bar in table for bar in "▁▂▃▄▅▆▇█")
    rows = stack.cli("metrics", run_id, "--key", "train/loss", "--csv").stdout.splitlines()
    assert rows[0] == "key,step,value,time" and len(rows) == 21 and rows[-1].startswith("train/loss,20,")
    series = json.loads(stack.cli("metrics", run_id, "--key", "eval/loss", "--json").stdout)["series"]
    assert [s["key"] for s in series] == ["eval/loss"] and [p["step"] for p in series[0]["points"]][-1] == 20

    # The SFT run's own samples: its answers to 4 held-out prompts at each evaluation (0, 10, 20), with the reference.
    own = json.loads(stack.cli("samples", run_id, "--json").stdout)["data"]
    assert [(s["step"], s["label"]) for s in own] == [(20, "generation")] * 4 and all(s["reference"] for s in own)
    assert "LABEL" in stack.cli("samples", run_id).stdout and "generation" in stack.cli("samples", run_id).stdout
    samples = [{"step": step, "index": i, "prompt": f"q{i}", "response": f"a{i}@{step}", "reward": float(i * step)}
               for step in (30, 40) for i in range(3)]  # fmt: skip
    assert stack.http.post(f"/runs/{run_id}/samples", json=samples).status_code == 200
    latest = stack.cli("samples", run_id).stdout
    assert "a2@40" in latest and "a2@30" not in latest and "LABEL" not in latest
    ranked = json.loads(stack.cli("samples", run_id, "--step", "30", "--by-reward", "--json").stdout)["data"]
    assert [s["response"] for s in ranked] == ["a2@30", "a1@30", "a0@30"]
    never = stack.cli("submit", "examples/sft.yaml", "--set", "resources.queue=nowhere")  # stays queued: no samples
    assert "no samples yet" in stack.cli("samples", never.stdout.strip()).stderr
    assert stack.cli("runs", "cancel", never.stdout.strip()).exit_code == 0


def test_download_verifies_every_file_and_resumes(stack, finished, tmp_path):
    run_id = str(finished["id"])
    listed = json.loads(stack.cli("checkpoints", run_id, "--json").stdout)["data"]
    assert [(c["step"], c["kind"]) for c in listed] == [(10, "checkpoint"), (20, "checkpoint"), (20, "export")]
    assert "export" in stack.cli("checkpoints", run_id).stdout

    exported = stack.server.home / "artifacts" / finished["output"]["path"]
    out = tmp_path / "model"
    result = stack.cli("download", run_id, "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["kind"], summary["step"], summary["verified"]) == ("export", 20, True)
    assert _tree(out) == _tree(exported)

    weights = out / "model.safetensors"
    data = weights.read_bytes()
    half = out / f"model.safetensors.{finished['output']['sha256'][:12]}.part"
    half.write_bytes(data[: len(data) // 2])  # an interrupted download
    weights.unlink()
    (out / "config.json").write_bytes(b" " * (out / "config.json").stat().st_size)  # damaged, same size
    assert stack.cli("download", run_id, "-o", str(out)).exit_code == 0
    assert _tree(out) == _tree(exported) and not half.exists()

    checkpoint = tmp_path / "ckpt"
    assert stack.cli("download", run_id, "--step", "10", "--kind", "checkpoint", "-o", str(checkpoint)).exit_code == 0
    assert _tree(checkpoint) == _tree(stack.server.home / "artifacts" / listed[0]["path"])
    nothing = stack.cli("download", run_id, "--step", "7", "-o", str(tmp_path / "x"))
    assert nothing.exit_code == 4 and "no checkpoint at step 7" in nothing.stderr and "export@20" in nothing.stderr


def test_request_errors_are_one_line_with_the_fix(stack, finished):
    unknown = stack.cli("runs", "show", "999999")
    assert unknown.exit_code == 4 and unknown.stderr.strip() == "rlplane: 404 not found - run 999999 not found"
    # a checkpoint the run does not have: refused at submit, not failed later on a worker
    missing = stack.cli("eval", f"run:{finished['id']}@77", "--reward", "builtin:arithmetic", "--data", "builtin:arithmetic")
    assert missing.exit_code == 3 and missing.stdout == "", missing.stderr
    assert "model.path:" in missing.stderr and f"run {finished['id']} (succeeded) has no checkpoint at step 77" in missing.stderr
    assert f"(run:{finished['id']}@20 is the latest), and run:{finished['id']} is its final model" in missing.stderr
    conflict = stack.cli("runs", "cancel", str(finished["id"]))
    assert conflict.exit_code == 4 and "409 conflict" in conflict.stderr and len(conflict.stderr.splitlines()) == 1
    down = subprocess.run([sys.executable, "-m", "cli.main", "--url", "http://127.0.0.1:9", "runs", "list"],
                          cwd=ROOT, env={**os.environ, **stack.env}, capture_output=True, text=True)  # fmt: skip
    assert down.returncode == 4 and "cannot reach the rlplane server at http://127.0.0.1:9" in down.stderr
    assert "rlplane up" in down.stderr and "Traceback" not in down.stderr and len(down.stderr.splitlines()) == 1
    debug = subprocess.run([sys.executable, "-m", "cli.main", "--debug", "runs", "show", "999999"],
                           cwd=ROOT, env={**os.environ, **stack.env}, capture_output=True, text=True)  # fmt: skip
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "ApiError" in debug.stderr


def test_the_python_client(stack, finished):
    with Client(stack.server.url, stack.server.token) as client:
        assert client.wait(finished["id"])["status"] == "succeeded"
        assert finished["id"] in [r["id"] for r in client.runs(status=["succeeded"])["data"]]
        keys = {k["key"] for k in client.metric_keys(finished["id"])["data"]}
        assert {"train/loss", "eval/loss"} <= keys


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_wait_draws_a_progress_bar_on_a_terminal(stack, finished, monkeypatch):
    screen = io.StringIO()
    monkeypatch.setattr(output, "stderr", Console(file=screen, force_terminal=True, width=120))
    with Client(stack.server.url, stack.server.token) as client:
        final = follow.wait_for(client, client.run(finished["id"]), logs=False)
    assert final["status"] == "succeeded"
    bar = screen.getvalue()
    assert "━" in bar and "20/20" in bar and "train/loss" in bar and f"run {finished['id']} succeeded" in bar


def test_wait_says_what_a_running_run_does_before_its_first_step():
    """`--wait`'s progress names a running run's phase (a cold DeepSpeed node sat at "running step 0/60" for minutes
    with nothing said); other statuses and a run without a reason read as before."""
    running = {"status": "running", "status_reason": "starting the deepspeed backend (DeepSpeed builds its C++ ops)"}
    assert follow._doing(running) == "running (starting the deepspeed backend (DeepSpeed builds its C++ ops))"
    assert follow._doing({"status": "running", "status_reason": "x" * 200}).endswith("...)")
    assert follow._doing({"status": "queued", "status_reason": "waiting for a worker"}) == "queued"
    assert follow._doing({"status": "running", "status_reason": ""}) == "running"


@pytest.mark.parametrize("example", ["sft-deepspeed", "sft-fsdp2", "sft-megatron", "sft-megatron-pipeline"])
def test_multi_process_examples_run_through_the_worker(stack, example):
    """The shipped 2-process examples, shortened, through `rlplane submit --wait`: the worker starts
    DeepSpeed's launcher or torchrun, both ranks train, the sharded checkpoints are gathered and
    registered, and the run succeeds. (DeepSpeed's: what tests/test_worker_runs.py's two-process run held.)"""
    sets = ["--set", "train.steps=6", "--set", "train.eval_every=3", "--set", "train.checkpoint_every=3"]
    result = stack.cli("submit", f"examples/{example}.yaml", *sets, "--wait", "--json")
    assert result.exit_code == 0, result.stderr + stack.server.log_path.read_text()[-3000:]
    run = json.loads(result.stdout)
    assert run["status"] == "succeeded" and run["last_step"] == 6, run
    assert run["spec"]["backend"]["processes"] == 2
    checkpoints = json.loads(stack.cli("checkpoints", str(run["id"]), "--json").stdout)["data"]
    assert {c["step"] for c in checkpoints if c["kind"] == "checkpoint"} == {3, 6}
    if example == "sft-deepspeed":  # started by DeepSpeed's own launcher, whose lines reach the run's log
        logs = [line["text"] for line in stack.http.get(f"/runs/{run['id']}/logs", params={"limit": 1000}).json()["data"]]
        assert any("deepspeed" in text.lower() for text in logs) and any("step 6" in text for text in logs)


def test_rl_examples_run_through_the_worker(stack):
    """The shipped RL examples, shortened, through `rlplane submit --wait` and the worker: PPO and
    GRPO from an SFT run named by run:<id> (recorded as lineage), ILQL on its own. Reward, KL and
    samples with their reward and KL reach the API, where the dashboard draws them."""
    short = ["--set", "train.steps=6", "--set", "train.eval_every=3", "--set", "train.checkpoint_every=3", "--wait", "--json"]
    walker = stack.cli("submit", "examples/sft-randomwalks.yaml", "--set", "train.steps=20", "--wait", "--json")
    assert walker.exit_code == 0, walker.stderr + stack.server.log_path.read_text()[-2000:]
    start = f"model.path=run:{json.loads(walker.stdout)['id']}"
    grpo_on_walks = [
        "--set",
        "data.source=builtin:randomwalks",
        "--set",
        "reward.name=randomwalks",
        "--set",
        "grpo.gen.max_new_tokens=8",
    ]
    runs = {
        "ppo": stack.cli("submit", "examples/ppo.yaml", "--set", start, *short),
        "grpo": stack.cli("submit", "examples/grpo.yaml", "--set", start, *grpo_on_walks, *short),
        "ilql": stack.cli("submit", "examples/ilql.yaml", *short),
    }
    expected = {
        "ppo": {"reward/mean", "reward/std", "ppo/kl", "ppo/kl_coef", "ppo/policy_loss", "ppo/value_loss", "eval/optimality"},
        "grpo": {"reward/mean", "grpo/kl", "grpo/policy_loss", "eval/optimality"},
        "ilql": {"train/loss", "eval/optimality"},
    }
    for algorithm, result in runs.items():
        assert result.exit_code == 0, algorithm + result.stderr + stack.server.log_path.read_text()[-3000:]
        run = json.loads(result.stdout)
        assert run["status"] == "succeeded" and run["last_step"] == 6, run
        series = {s["key"]: s["points"] for s in json.loads(stack.cli("metrics", str(run["id"]), "--json").stdout)["series"]}
        assert expected[algorithm] <= set(series), (algorithm, expected[algorithm] - set(series))
        samples = json.loads(stack.cli("samples", str(run["id"]), "--json").stdout)["data"]
        assert samples and all(s["reward"] is not None for s in samples), algorithm
        if algorithm != "ilql":
            assert [p["step"] for p in series["reward/mean"]] == list(range(1, 7))
            assert all(s["kl"] is not None for s in samples)
            parents = json.loads(stack.cli("runs", "lineage", str(run["id"]), "--json").stdout)["parents"]
            assert [p["field"] for p in parents] == ["model.path"]


def test_a_pipeline_submitted_with_wait_runs_its_stages_in_order_through_the_worker(stack, tmp_path):
    """examples/pipelines/sft-grpo.yaml, shortened: the API's reconciler starts GRPO once SFT has succeeded, from
    SFT's best checkpoint by eval/loss, then the eval stage on GRPO's final model; all are ordinary runs (the worker
    ran them; lineage links them). `rlplane eval` evaluates GRPO's step-2 checkpoint; each result is listed beside
    what it evaluated."""
    import yaml

    doc = yaml.safe_load((ROOT / "examples" / "pipelines" / "sft-grpo.yaml").read_text())
    doc["stages"]["sft"]["spec"]["train"] |= {"steps": 20, "checkpoint_every": 10, "eval_every": 10, "warmup_steps": 0}
    doc["stages"]["grpo"]["spec"]["train"] |= {"steps": 2, "batch_size": 16, "eval_every": 2, "checkpoint_every": None}
    doc["stages"]["grpo"]["when"] = 'stages.sft.metrics["eval/loss"] < 100'
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = stack.cli("submit", str(path), "--wait", "--json")
    assert result.exit_code == 0, result.stderr + stack.server.log_path.read_text()[-3000:]
    pipeline = json.loads(result.stdout)
    sft, grpo, evaluation = pipeline["stages"]
    assert pipeline["status"] == "succeeded", pipeline
    assert (sft["status"], grpo["status"], evaluation["status"]) == ("succeeded", "succeeded", "succeeded")
    assert "stage sft running" in result.stderr and "stage grpo running" in result.stderr
    metrics = stack.http.get(f"/runs/{sft['run_id']}/metrics", params={"keys": "eval/loss"}).json()
    evals = {p["step"]: p["value"] for p in metrics["series"][0]["points"]} if metrics["series"] else {}
    assert set(evals) >= {10, 20}, metrics
    best = min((10, 20), key=lambda step: evals[step])
    lineage = stack.http.get(f"/runs/{grpo['run_id']}/lineage").json()
    assert [(p["run_id"], p["field"], p["step"]) for p in lineage["parents"]] == [(sft["run_id"], "model.path", best)]
    shown = stack.cli("pipelines", "show", str(pipeline["id"]))
    assert shown.exit_code == 0 and "grpo" in shown.stdout and "succeeded" in shown.stdout

    # The eval stage scored GRPO's final model (stage:grpo@last is run:<id>, its export); `rlplane eval` scores its
    # step-2 checkpoint with the run's own data and reward (greedy). Each shows beside what it evaluated.
    lineage = stack.http.get(f"/runs/{evaluation['run_id']}/lineage").json()
    assert [(p["run_id"], p["field"], p["step"]) for p in lineage["parents"]] == [(grpo["run_id"], "model.path", None)]
    again = stack.cli("eval", f"run:{grpo['run_id']}@2", "--greedy", "--max-prompts", "20", "--wait")
    assert again.exit_code == 0, again.stderr + stack.server.log_path.read_text()[-3000:]
    again_id = int(again.stdout.split()[0])
    assert "eval/accuracy" in again.stdout and "eval/pass@1" in again.stdout and "eval/length" in again.stdout
    assert "decoding" in again.stdout and "greedy" in again.stdout  # which accuracy this is
    checkpoints = stack.http.get(f"/runs/{grpo['run_id']}/checkpoints").json()["data"]
    by_row = {(c["kind"], c["step"]): c["evaluations"] for c in checkpoints}
    [staged] = by_row[("export", 2)]
    [greedy] = by_row[("checkpoint", 2)]
    assert staged["run_id"] == evaluation["run_id"] and greedy["run_id"] == again_id, by_row
    assert staged["samples"] == 4 and set(staged["metrics"]) >= {"eval/accuracy", "eval/pass@1", "eval/pass@4"}
    assert 0 <= staged["metrics"]["eval/pass@1"] <= staged["metrics"]["eval/pass@4"] <= 1
    assert greedy["samples"] == 1 and greedy["data"] == "builtin:arithmetic" and greedy["reward"] == "builtin:arithmetic"
    assert greedy["metrics"]["eval/accuracy"] == greedy["metrics"]["eval/pass@1"]
    assert (staged["decoding"], greedy["decoding"]) == ("sampled at T=1, 4 per prompt", "greedy")
    shown = stack.cli("checkpoints", str(grpo["run_id"]))
    assert shown.exit_code == 0 and "pass@4" in shown.stdout, shown.stdout
    assert "(greedy)" in shown.stdout and "(sampled at" in shown.stdout, shown.stdout  # the table wraps long cells


def test_an_alert_rule_added_from_the_cli_fires_in_the_server_and_reaches_its_webhook(stack, finished, tmp_path):
    """The API's reconciler watches runs on its own (every RLPLANE_ALERT_S): a status rule on the finished run's
    project fires for it and posts to the webhook; `rlplane alerts list` shows it delivered."""
    from tests.harness.receiver import Receiver

    receiver = Receiver()
    try:
        rule = tmp_path / "rule.yaml"
        rule.write_text(
            "name: run-succeeded\ncondition: {kind: status, statuses: [succeeded]}\n"
            f"actions: {{webhook: '{receiver.url}/hook/s3cr3t-token'}}\n"
        )
        added = stack.cli("alerts", "add", str(rule))
        assert added.exit_code == 0, added.stderr
        deadline = time.monotonic() + 60
        while not any(
            a["delivery"] == "delivered" for a in stack.http.get("/alerts", params={"run_id": finished["id"]}).json()["items"]
        ):
            assert time.monotonic() < deadline, stack.http.get("/alerts").json()
            time.sleep(0.5)
        [(path, body)] = [p for p in receiver.posts if p[1]["alert"]["run_id"] == finished["id"]]
        assert path == "/hook/s3cr3t-token" and body["text"].startswith(f"[rlplane] run-succeeded on run {finished['id']}")
        listed = stack.cli("alerts", "list", "--run", str(finished["id"]))
        assert listed.exit_code == 0 and "run-succeeded" in listed.stdout and "delivered" in listed.stdout
        rules = stack.cli("alerts", "rules")
        assert "s3cr3t" not in rules.stdout and "run-succeeded" in rules.stdout
        assert "s3cr3t" not in stack.server.log_path.read_text()
    finally:
        receiver.close()


def test_a_sweep_started_from_the_cli_runs_its_trials_through_the_worker_and_names_the_best(stack, tmp_path):
    """Two grid trials of a 10-step SFT, one at a time: each an ordinary run the worker trains, scored on its last
    eval/loss; `rlplane sweep --wait` exits 0 naming the best, `rlplane sweeps show` lists both."""
    doc = tmp_path / "sweep.yaml"
    doc.write_text(
        "name: cli-sweep\n"
        "spec: {algorithm: sft, model: {path: 'builtin:tiny-gpt2', max_seq_len: 32},\n"
        "       data: {source: 'builtin:arithmetic', eval_fraction: 0.1},\n"
        "       train: {steps: 10, batch_size: 8, eval_every: 5, checkpoint_every: null}}\n"
        "space: {train.lr: {type: categorical, choices: [1.0e-5, 3.0e-3]}}\n"
        "method: grid\nmetric: eval/loss\ngoal: min\ntrials: 2\nparallel: 1\n"
    )
    result = stack.cli("sweep", str(doc), "--wait", "--json")
    assert result.exit_code == 0, result.stderr + stack.server.log_path.read_text()[-3000:]
    final = json.loads(result.stdout)
    assert final["status"] == "succeeded" and [t["state"] for t in final["trial_list"]] == ["complete", "complete"]
    for trial in final["trial_list"]:
        run = stack.run(trial["run_id"])
        assert run["status"] == "succeeded" and run["spec"]["train"]["lr"] == trial["params"]["train.lr"]
    assert final["best"]["params"] == {"train.lr": 3e-3}  # 10 steps at 1e-5 barely move the loss
    shown = stack.cli("sweeps", "show", str(final["id"]))
    assert shown.exit_code == 0 and "complete" in shown.stdout and "train.lr=0.003" in shown.stdout


def test_the_base_install_submits_a_local_data_file_and_reads_the_run(stack, tmp_path):
    """`pip install rlplane` with no extras (what docs/layout.md gives a CI job) in a venv of its own, against the live
    API: submit uploads a local data file and waits, then runs list, metrics, logs, runs show, checkpoints and a
    download of the model. Its CLI once imported trainer_core (pyarrow) to upload a file. A server command there, and
    `rlplane train`, names the extra it needs."""
    venv, source = tmp_path / "base", tmp_path / "source"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # a copy of what the package holds: pip builds in the tree it is given, and the checkout stays as it was
    for part in ("api", "cli", "migrations", "rlplane", "trainer_core", "worker"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(source)], capture_output=True, text=True
    )
    assert install.returncode == 0, install.stderr[-3000:]
    python = str(venv / "bin" / "python")
    probe = "import importlib.util as u; print([m for m in ('pyarrow', 'torch', 'fastapi', 'celery') if u.find_spec(m)])"
    lacks = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    assert lacks.stdout.strip() == "[]", lacks.stdout + lacks.stderr
    rows = [{"prompt": f"{a}+{a}=", "response": str(2 * a)} for a in range(40)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = (ROOT / "examples" / "sft.yaml").read_text().replace("source: builtin:tiny-sft", "source: rows.jsonl")
    (tmp_path / "spec.yaml").write_text(spec)
    env = {**os.environ, **stack.env}

    def rlplane(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([str(venv / "bin" / "rlplane"), *args], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    submitted = rlplane("submit", "spec.yaml", *SHORT, "--set", "train.steps=10", "--name", "base-install", "--wait")
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.split()[0]
    assert "uploaded rows.jsonl (40 rows) as dataset:" in submitted.stderr
    assert stack.run(int(run_id))["spec"]["data"]["source"].startswith("dataset:")
    listed = rlplane("runs", "list", "--json")
    assert listed.returncode == 0 and any(r["name"] == "base-install" for r in json.loads(listed.stdout)["data"])
    metrics = rlplane("metrics", run_id, "--key", "train/loss", "--json")
    assert metrics.returncode == 0 and len(json.loads(metrics.stdout)["series"][0]["points"]) == 10
    logs = rlplane("logs", run_id)
    assert logs.returncode == 0 and "step 10" in logs.stdout
    shown = rlplane("runs", "show", run_id)
    assert shown.returncode == 0 and "base-install" in shown.stdout and "succeeded" in shown.stdout, shown.stdout
    listed = rlplane("checkpoints", run_id)
    assert listed.returncode == 0 and "export" in listed.stdout, listed.stdout
    downloaded = rlplane("download", run_id, "-o", "model")
    assert downloaded.returncode == 0 and (tmp_path / "model" / "config.json").is_file(), downloaded.stderr
    train = rlplane("train", "spec.yaml")
    assert train.returncode == 2 and "rlplane train: needs the train extra" in train.stderr, train.stderr
    up = rlplane("up", "--port", "9")
    assert (
        up.returncode == 2
        and "rlplane up: needs the api,train extra" in up.stderr
        and "pip install 'rlplane[api,train]'" in up.stderr
    )
