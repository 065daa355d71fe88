"""Users' own scripts as runs (docs/sdk.md), through real processes: an `rlplane api`, a Celery worker, TRL's
SFTTrainer and GRPOTrainer under our Hugging Face callback, a plain loop on the SDK alone, and the CLI's --code.

One stack (API, Postgres, Redis, one worker) serves the module; each test launches only the processes its claim
needs."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import pytest

from cli.code import pack
from tests.harness.launch import ROOT
from tests.harness.worker_stack import ADMIN, Stack, alive, trainer_pids
from worker.command import CommandError, unpack

LOOP = str(ROOT / "tests" / "sdk_loop.py")
TRL_RUNS: dict[str, int] = {}  # the TRL runs' ids, for the dashboard's check of them (last in this module)


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Stack:
    stack = Stack(tmp_path_factory.mktemp("command-runs"))
    stack.start_worker("cmd-w1")
    try:
        yield stack
    finally:
        stack.close()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny Llama (seed 0) saved as a Hugging Face directory: what the TRL scripts load by path."""
    from trainer_core.models import build_builtin

    model, tokenizer = build_builtin("tiny-llama", "causal", seed=0)
    out = tmp_path_factory.mktemp("model") / "tiny-llama"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def user_env(stack: Stack, home: Path) -> dict[str, str]:
    """A user's shell: the API's URL and a token in the environment, their own config directory."""
    return {**os.environ, "RLPLANE_URL": stack.api.url, "RLPLANE_TOKEN": ADMIN, "XDG_CONFIG_HOME": str(home / "cfg")}


def series(stack: Stack, run_id: int, key: str) -> list[tuple[int, float]]:
    body = stack.http.get(f"/runs/{run_id}/metrics", params={"keys": key, "max_points": 10_000}).json()
    return [(p["step"], p["value"]) for s in body["series"] for p in s["points"]]


def test_trl_sft_script_runs_on_a_worker_with_its_code_uploaded(stack, tmp_path):
    """`rlplane submit examples/trl/sft.yaml --code examples/trl --wait`, as docs/sdk.md writes it (its model the
    shipped default, builtin:tiny-llama: no hub): the CLI packs and uploads the code with its git commit, the worker
    runs TRL's SFTTrainer in it, and the callback's loss (falling), learning rate and checkpoints reach the API with
    the script's packages."""
    command = [sys.executable, "-m", "cli.main", "submit", "examples/trl/sft.yaml", "--code", "examples/trl", "--wait"]
    command += ["--set", "train.steps=16", "--set", "train.lr=3e-3"]
    command += ["--set", "train.checkpoint_every=8", "--name", "trl-sft-test"]
    done = subprocess.run(command, cwd=ROOT, env=user_env(stack, tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "uploaded" in done.stderr and "files of" in done.stderr and "as code snapshot" in done.stderr
    run = stack.run(int(done.stdout.split()[0]))
    assert run["status"] == "succeeded", run["status_reason"]
    TRL_RUNS["sft"] = run["id"]
    code = run["spec"]["command"]["code"]
    assert len(code["snapshot"]) == 64 and code["files"] >= 4 and len(code["git_commit"]) == 40
    loss = series(stack, run["id"], "train/loss")
    assert [s for s, _ in loss] == list(range(1, 17))
    assert sum(v for _, v in loss[-4:]) < 0.7 * sum(v for _, v in loss[:4]), loss  # it learned
    assert series(stack, run["id"], "train/lr") and series(stack, run["id"], "train/grad_norm")
    steps = [c["step"] for c in stack.http.get(f"/runs/{run['id']}/checkpoints").json()["data"]]
    assert steps == [8, 16]
    files = stack.http.get(f"/runs/{run['id']}/checkpoints/16/files").json()["data"]
    assert {"model.safetensors", "trainer_state.json", "manifest.json"} <= {f["name"] for f in files}
    environment = run["environment"]
    assert environment["packages"]["trl"] == "1.16.0" and environment["config"]["max_steps"] == 16
    snapshot = stack.http.get(f"/code/{code['snapshot']}")
    assert snapshot.status_code == 200
    names = tarfile.open(fileobj=io.BytesIO(snapshot.content), mode="r:gz").getnames()
    assert {"sft.py", "tasks.py", "sft.yaml"} <= set(names)


@pytest.mark.parametrize(("script", "model"), [("grpo", "builtin"), ("rloo", "directory")])
def test_trl_rl_scripts_report_their_completion_groups(stack, tiny_model, script, model):
    """TRL's GRPOTrainer (the callback in callbacks=[...], reading its completion tables) and RLOOTrainer (the
    callback attached, reading the trainer's rollouts) from a shared code directory (command.code.path): reward/mean,
    reward/std and each step's completions as groups of `group` answers to one prompt, with their reward component
    and advantage. One loads the shipped default model (builtin:tiny-llama), the other the same weights from a local
    Hugging Face directory, as a hub id loads."""
    argv = ["python", f"{script}.py", "--model", "{command.config.model}", "--max-steps", "{train.steps}", "--lr", "{train.lr}"]
    argv += ["--group", "4", "--prompts-per-step", "2", "--max-new-tokens", "4", "--save-steps", "100"]
    argv += ["--output-dir", "{run.dir}/hf"]
    spec = {
        "name": f"trl-{script}-test",
        "algorithm": "command",
        "train": {"steps": 3, "lr": 1e-4},
        "command": {
            "argv": argv,
            "config": {"model": "builtin:tiny-llama" if model == "builtin" else str(tiny_model)},
            "code": {"path": str(ROOT / "examples" / "trl")},
        },
    }
    run = stack.wait_status(stack.submit(spec), {"succeeded", "failed"}, timeout=300)
    assert run["status"] == "succeeded", run["status_reason"]
    TRL_RUNS[script] = run["id"]
    assert [s for s, _ in series(stack, run["id"], "reward/mean")] == [1, 2, 3]
    assert series(stack, run["id"], "reward/std") and series(stack, run["id"], "gen/response_length")
    samples = stack.http.get(f"/runs/{run['id']}/samples", params={"limit": 500}).json()["data"]
    assert {s["step"] for s in samples} == {1, 2, 3}
    groups = Counter((s["step"], s["prompt"]) for s in samples)
    assert set(groups.values()) == {4} and len(groups) == 6  # 2 prompts a step, 4 answers each
    for sample in samples:
        assert set(sample["scores"]) == {"correct", "advantage"}
        assert sample["reward"] == sample["scores"]["correct"]


def test_a_plain_loop_outside_any_worker_loses_and_duplicates_nothing_while_the_api_is_down(stack, tmp_path):
    """A script using the SDK alone creates its run; the API is down for 12 s while it logs; afterwards every step's
    loss is there once, its checkpoints were uploaded, what it printed is its logs, and the run ended succeeded with
    the script's git commit."""
    # About 10 s of steps: the script logs its last ones, checkpoints and says it finished while the API is down.
    command = [sys.executable, LOOP, "--steps", "200", "--step-s", "0.05", "--checkpoint-every", "100", "--out", str(tmp_path)]
    script = subprocess.Popen(command, cwd=ROOT, env=user_env(stack, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        started = script.stdout.readline().decode()
        assert started.startswith("run "), started + script.stdout.read().decode()
        run_id = int(started.split()[1])
        stack.wait_step(run_id, 20)
        stack.restart_api(down_s=12)
        assert script.wait(timeout=120) == 0, script.stdout.read().decode()
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
    run = stack.run(run_id)
    assert run["status"] == "succeeded", run["status_reason"]
    assert run["status_reason"] == "the script finished at step 200" and run["last_step"] == 200
    body = stack.http.get(f"/runs/{run_id}/metrics", params={"keys": "train/loss", "max_points": 10_000}).json()
    [loss] = body["series"]
    assert [p["step"] for p in loss["points"]] == list(range(1, 201)) and loss["total_points"] == 200
    assert [c["step"] for c in stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"]] == [100, 200]
    weights = stack.http.get(f"/runs/{run_id}/checkpoints/200/files/weight.json").json()
    assert weights["step"] == 200 and abs(weights["weight"] - 2.0) < 1e-3  # it learned y = 2x
    assert run["attempts"][0]["worker"] == "(script)" and run["spec"]["command"]["external"] is True
    assert len(run["environment"]["git"]["commit"]) == 40 and run["environment"]["argv"][0] == LOOP
    assert stack.http.post(f"/runs/{run_id}/resume").status_code == 409  # no worker could run it again
    printed = [line["text"] for line in stack.http.get(f"/runs/{run_id}/logs", params={"limit": 1000}).json()["data"]]
    assert printed[0] == f"run {run_id} started"  # what it printed is its logs, and so are the SDK's words on the outage
    outage = printed[1:]
    assert outage and all("unreachable" in line or "not uploaded yet" in line for line in outage), outage


def test_what_a_script_could_not_send_before_it_ended_is_sent_later(stack, tmp_path):
    """The API goes down while a plain loop runs. The script finishes and, after RLPLANE_FINISH_WAIT_S (3 s) of no
    answer, exits 0 with its last steps, its checkpoint and its end on disk. `rlplane sync` while the API is down
    sends nothing, says so and exits 4. Once the API is back, the next script on the machine sends them as it starts
    (rlplane.init): every step once, the checkpoint, the run succeeded; the spool is gone, and `rlplane sync` has
    nothing left to send (it shares the sending with init: rlplane/sdk/leftovers.py)."""
    env = {**user_env(stack, tmp_path), "RLPLANE_FINISH_WAIT_S": "3"}
    command = [sys.executable, LOOP, "--steps", "60", "--step-s", "0.1", "--checkpoint-every", "60", "--out", str(tmp_path)]
    script = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sync = [sys.executable, "-m", "cli.main", "sync"]
    stopped = False
    try:
        started = script.stdout.readline().decode()
        assert started.startswith("run "), started + script.stdout.read().decode()
        run_id = int(started.split()[1])
        spool = tmp_path / "cfg" / "rlplane" / "spool" / f"run-{run_id}"
        stack.wait_step(run_id, 10)
        stack.api.stop()
        stopped = True
        assert script.wait(timeout=120) == 0, script.stdout.read().decode()
        assert list(spool.glob("*.status.json")) and (spool / "checkpoints" / "step-000060" / "weight.json").is_file()
        down = subprocess.run(sync, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert down.returncode == 4 and f"run {run_id}: 0 request(s)" in down.stderr, down.stderr
        assert "left (the API is unreachable)" in down.stderr and list(spool.glob("*.status.json"))
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
        if stopped:
            stack.start_api()
    # the next script on the machine sends them, beside its own run, before it exits
    short = [sys.executable, LOOP, "--steps", "3", "--step-s", "0.01", "--out", str(tmp_path / "next"), "--name", "next"]
    after = subprocess.run(short, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert after.returncode == 0, after.stdout + after.stderr
    run = stack.run(run_id)
    assert run["status"] == "succeeded" and run["last_step"] == 60, run["status_reason"]
    body = stack.http.get(f"/runs/{run_id}/metrics", params={"keys": "train/loss", "max_points": 10_000}).json()
    [loss] = body["series"]
    assert [p["step"] for p in loss["points"]] == list(range(1, 61)) and loss["total_points"] == 60
    assert [c["step"] for c in stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"]] == [60]
    assert not spool.exists()
    again = subprocess.run(sync, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "nothing to send" in again.stderr, again.stderr


def test_cancel_lets_a_command_run_save_before_it_stops(stack):
    """A cancel asks the script to stop (should_stop() turns true): it saves a checkpoint of its step and exits, and
    the run is cancelled with that checkpoint registered."""
    argv = ["python", LOOP, "--steps", "100000", "--step-s", "0.05", "--out", "{run.dir}/out"]
    run_id = stack.submit({"name": "cancel-me", "algorithm": "command", "train": {"steps": 100000}, "command": {"argv": argv}})
    stack.wait_step(run_id, 10)
    assert stack.http.post(f"/runs/{run_id}/cancel").status_code == 200
    run = stack.wait_status(run_id, {"cancelled", "failed", "succeeded"}, timeout=60)
    assert run["status"] == "cancelled", run["status_reason"]
    assert "the script stopped when asked (exit 0)" in run["status_reason"]
    saved = run["status_reason"].rsplit("step ", 1)[1]
    [checkpoint] = stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"]
    assert str(checkpoint["step"]) == saved and checkpoint["step"] >= 10
    logs = stack.http.get(f"/runs/{run_id}/logs", params={"limit": 1000}).json()["data"]
    assert any(f"asked to stop at step {saved}: saved" in line["text"] for line in logs)


def test_a_handed_back_command_run_saves_and_the_next_attempt_resumes_from_it(stack):
    """SIGTERM to the worker (a node drains): should_stop() turns true, the script saves and exits, the attempt ends
    handed back and the run is requeued; another worker's attempt resumes from that checkpoint (run.resume_from), and
    every step is logged once across the two attempts. The module's later tests use the new worker."""
    argv = ["python", LOOP, "--steps", "120", "--step-s", "0.05", "--out", "{run.dir}/out"]
    run_id = stack.submit({"name": "hand-back", "algorithm": "command", "train": {"steps": 120}, "command": {"argv": argv}})
    stack.wait_step(run_id, 20)
    first = stack.workers[0]
    first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 0, "the worker did not exit cleanly after SIGTERM"
    [attempt] = stack.run(run_id)["attempts"]
    assert attempt["handed_back"] and "checkpointed at step" in attempt["end_reason"], attempt["end_reason"]
    saved = int(attempt["end_reason"].rsplit("checkpointed at step ", 1)[1].split(",")[0])
    assert saved >= 20
    stack.start_worker("cmd-w2")
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=120)
    assert run["status"] == "succeeded" and len(run["attempts"]) == 2, run["status_reason"]
    assert [s for s, _ in series(stack, run_id, "train/loss")] == list(range(1, 121))
    logs = stack.http.get(f"/runs/{run_id}/logs", params={"limit": 1000}).json()["data"]
    assert any(line["text"] == f"resumed at step {saved}" for line in logs), [line["text"] for line in logs][-10:]


def test_a_command_of_two_processes_runs_under_torchrun_and_rank_zero_reports(stack):
    """backend.processes 2: the script runs under torchrun, both ranks attach to the run, only rank 0 reports."""
    argv = ["python", LOOP, "--steps", "20", "--step-s", "0.01", "--out", "{run.dir}/out"]
    spec = {"name": "two-ranks", "algorithm": "command", "train": {"steps": 20}, "command": {"argv": argv}}
    run_id = stack.submit({**spec, "backend": {"kind": "torch", "processes": 2}})
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=120)
    assert run["status"] == "succeeded", run["status_reason"]
    assert [s for s, _ in series(stack, run_id, "train/loss")] == list(range(1, 21))  # once each: rank 1 sent nothing
    logs = stack.http.get(f"/runs/{run_id}/logs", params={"limit": 1000}).json()["data"]
    assert {line["rank"] for line in logs if line["text"] == f"run {run_id} started"} == {0, 1}


def test_a_failing_script_fails_its_run_with_its_last_lines(stack, tmp_path):
    """A script that exits non-zero fails its run (crashed) with the lines it printed last; it never sees the
    worker's own token."""
    code = "import os, sys; print('worker token visible:', 'RLPLANE_TOKEN' in os.environ); sys.exit('no such file: data.jsonl')"
    run_id = stack.submit(
        {"name": "fails", "algorithm": "command", "train": {"steps": 1}, "command": {"argv": ["python", "-c", code]}}
    )
    run = stack.wait_status(run_id, {"failed", "succeeded"}, timeout=60)
    assert run["status"] == "failed" and run["failure"] == "crashed"
    assert "exited with 1" in run["status_reason"] and "no such file: data.jsonl" in run["status_reason"]
    assert "worker token visible: False" in run["status_reason"]
    # and the runs list still answers, as a user reads it next (it answered 500 once a command run had failed)
    listed = subprocess.run(
        [sys.executable, "-m", "cli.main", "runs", "list", "--json"], cwd=ROOT, env=user_env(stack, tmp_path),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert any(r["id"] == run_id and r["resumable"] for r in json.loads(listed.stdout)["data"])


def test_a_hung_script_is_killed_and_its_run_resumes_from_its_checkpoint(stack):
    """A script that stops making steps (SIGSTOP: alive, but no step will ever finish) is killed after
    resources.hang_timeout_s as a trainer is, the attempt lost as a hang; the next attempt resumes from its checkpoint
    and every step is logged once across the two."""
    argv = ["python", LOOP, "--steps", "40", "--step-s", "0.05", "--checkpoint-every", "10", "--out", "{run.dir}/out"]
    spec = {"name": "hangs", "algorithm": "command", "train": {"steps": 40}, "command": {"argv": argv}}
    run_id = stack.submit({**spec, "resources": {"hang_timeout_s": 10}})
    stack.wait_step(run_id, 12)
    [script] = trainer_pids(stack, run_id)
    os.kill(script, signal.SIGSTOP)
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=120)
    assert run["status"] == "succeeded" and len(run["attempts"]) == 2, run["status_reason"]
    assert run["attempts"][0]["end_reason"].startswith("hang: no step finished for 10 s"), run["attempts"][0]
    assert not alive(script)
    assert [s for s, _ in series(stack, run_id, "train/loss")] == list(range(1, 41))
    logs = stack.http.get(f"/runs/{run_id}/logs", params={"limit": 1000}).json()["data"]
    assert any(line["text"].startswith("resumed at step ") for line in logs)


def test_the_trl_runs_on_their_run_pages_in_chromium(stack, tmp_path):
    """frontend/e2e/command.e2e.mjs: the SFT run's loss chart, the GRPO run's reward chart and completion groups, and
    the SFT run's code and packages, as the dashboard (served by the stack's API) shows them."""
    assert {"sft", "grpo"} <= set(TRL_RUNS), "the TRL tests above run first and must have passed"
    chromium = shutil.which("chromium")
    assert chromium, "the end-to-end test needs Debian's chromium (.ci/run installs it)"
    assert (ROOT / "frontend" / "dist" / "index.html").exists(), "run `make test`: it builds the dashboard"
    env = {**os.environ, "RLPLANE_URL": stack.api.url, "RLPLANE_TOKEN": ADMIN, "CHROMIUM": chromium}
    env |= {"SCREENSHOTS": str(tmp_path / "shots"), "SFT_RUN_ID": str(TRL_RUNS["sft"]), "GRPO_RUN_ID": str(TRL_RUNS["grpo"])}
    command = ["node", "e2e/command.e2e.mjs"]
    done = subprocess.run(command, cwd=ROOT / "frontend", env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    assert done.stdout.count("ok  ") == 4


# --- packing and unpacking the code (real git, no stack) ---


def test_code_snapshot_is_what_git_would_commit_and_the_same_code_packs_the_same(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "train.py").write_text("print('hi')\n")
    (repo / "pkg" / "model.py").write_text("X = 1\n")
    (repo / ".gitignore").write_text("data/\n*.ckpt\n")
    (repo / "data").mkdir()
    (repo / "data" / "big.jsonl").write_text("{}\n" * 1000)
    (repo / "weights.ckpt").write_bytes(b"0" * 100)
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "first"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    (repo / "notes.txt").write_text("untracked, not ignored\n")
    first = pack(repo)
    try:
        names = tarfile.open(first.archive, "r:gz").getnames()
        assert names == [".gitignore", "notes.txt", "pkg/model.py", "train.py"]
        assert first.git["dirty"] is True and first.git["untracked"] == ["notes.txt"]
        time.sleep(1.1)  # a newer mtime must not change the archive
        (repo / "train.py").touch()
        second = pack(repo)
        assert second.archive.read_bytes() == first.archive.read_bytes()
        second.archive.unlink()
    finally:
        first.archive.unlink()


def test_the_worker_unpacks_plain_files_only(tmp_path):
    good = tmp_path / "good.tar.gz"
    with tarfile.open(good, "w:gz") as tar:
        data = b"print(1)\n"
        info = tarfile.TarInfo("src/train.py")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    unpack(good, tmp_path / "out")
    assert (tmp_path / "out" / "src" / "train.py").read_bytes() == b"print(1)\n"
    assert os.access(tmp_path / "out" / "src" / "train.py", os.X_OK)
    for name, kind in (("../evil.py", tarfile.REGTYPE), ("link", tarfile.SYMTYPE)):
        bad = tmp_path / f"bad-{kind!r}.tar.gz"
        with tarfile.open(bad, "w:gz") as tar:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
            tar.addfile(info, io.BytesIO(b""))
        with pytest.raises(CommandError, match="is not a plain file inside it"):
            unpack(bad, tmp_path / "out2")
    assert not (tmp_path / "evil.py").exists()
