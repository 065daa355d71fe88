"""Runs executed by real worker processes: an `rlplane api` process (dispatching to Redis), an
`rlplane worker` process (Celery, Redis broker), Postgres, and the trainer as the worker's child."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import create_postgres_database, drop_postgres_database
from tests.servers import ApiProcess

ROOT = Path(__file__).resolve().parents[1]
ADMIN = "worker-test-admin-token-0123456789"
REDIS_URL = os.environ.get("RLPLANE_TEST_REDIS", "redis://127.0.0.1:6379")

SPEC = {
    "name": "worker-sft",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": {"source": "builtin:arithmetic", "eval_fraction": 0.1},
    "train": {"steps": 30, "batch_size": 8, "lr": 3e-3, "eval_every": 10, "log_every": 5, "checkpoint_every": 10},
    "resources": {"queue": "cpu"},
}


class Stack:
    def __init__(self, tmp: Path, artifacts: str | None = None) -> None:
        """`artifacts`: the artifact root of the API and the workers (default: a directory under home)."""
        self.home = tmp / "home"
        self.artifacts = artifacts or str(self.home / "artifacts")
        self.database_url = create_postgres_database()
        self.broker = f"{REDIS_URL}/{1 + uuid.uuid4().int % 14}"
        redis.Redis.from_url(self.broker).flushdb()
        self.api_env = {"RLPLANE_BROKER_URL": self.broker, "RLPLANE_DISPATCH": "true", "RLPLANE_LOST_AFTER_S": "8"}
        self.api_env["RLPLANE_REDISPATCH_S"] = "3"
        self.api_env["RLPLANE_ARTIFACTS"] = self.artifacts
        self.api = ApiProcess(self.home, self.database_url, ADMIN, extra_env=self.api_env)
        self.api.wait_ready()
        self.http = httpx.Client(base_url=self.api.url + "/api/v1", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        assert self.http.post("/users", json={"name": "worker-bot"}).status_code == 201
        response = self.http.post("/tokens", json={"name": "w", "scopes": ["worker"], "user": "worker-bot"})
        self.worker_token = response.json()["token"]
        self.workers: list[subprocess.Popen] = []

    def start_worker(self, name: str, home: Path | None = None) -> subprocess.Popen:
        """`home`: the worker's own RLPLANE_HOME, as on another node (default: the stack's)."""
        env = {**os.environ, "RLPLANE_HOME": str(home or self.home), "RLPLANE_ARTIFACTS": self.artifacts}
        env.update({"RLPLANE_HEARTBEAT_S": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
        log = (self.home / f"{name}.log").open("w")
        command = [sys.executable, "-m", "cli.main", "worker", "--queues", "cpu", "--api", self.api.url]
        command += ["--token", self.worker_token, "--name", name, "--broker", self.broker]
        process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.workers.append(process)
        return process

    def restart_api(self, down_s: float) -> None:
        self.api.stop()
        time.sleep(down_s)
        self.api = ApiProcess(self.home, self.database_url, ADMIN, port=self.api.port, extra_env=self.api_env)
        self.api.wait_ready()

    def wait_step(self, run_id: int, step: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while (self.run(run_id)["last_step"] or 0) < step:
            assert time.monotonic() < deadline, f"run {run_id} did not reach step {step}: {self.run(run_id)}"
            time.sleep(0.2)

    def send_launch(self, run_id: int, copies: int) -> None:
        """Extra `runs.launch` messages for a run, as a redelivery or a second dispatcher would send."""
        from celery import Celery

        app = Celery("test", broker=self.broker)
        app.conf.update(task_serializer="json", accept_content=["json"])
        for _ in range(copies):
            app.send_task("runs.launch", args=[run_id], queue="cpu")

    def submit(self, spec: dict) -> int:
        response = self.http.post("/runs", json=spec)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def run(self, run_id: int) -> dict:
        return self.http.get(f"/runs/{run_id}").json()

    def wait_status(self, run_id: int, statuses: set[str], timeout: float = 180) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.run(run_id)
            if run["status"] in statuses:
                return run
            time.sleep(0.3)
        logs = "\n".join(p.read_text()[-3000:] for p in self.home.glob("*.log"))
        raise AssertionError(f"run {run_id} still {self.run(run_id)['status']}, not {statuses}\n{logs}")

    def close(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        subprocess.run(["pkill", "-KILL", "-f", f"{self.home}/.*/runs/"], check=False)  # belt and braces
        self.http.close()
        self.api.stop()
        drop_postgres_database(self.database_url)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    stack = Stack(tmp_path)
    try:
        yield stack
    finally:
        stack.close()


def test_a_submitted_run_trains_on_a_worker_and_reports(stack: Stack) -> None:
    stack.start_worker("w1")
    run_id = stack.submit(SPEC)
    run = stack.wait_status(run_id, {"succeeded", "failed"})
    assert run["status"] == "succeeded", run["status_reason"]
    assert run["last_step"] == 30
    [attempt] = run["attempts"]
    assert attempt["worker"] == "w1" and attempt["ended_at"] is not None and attempt["last_step"] == 30

    points = stack.http.get(f"/runs/{run_id}/metrics", params={"keys": "train/loss"}).json()
    loss = {p["step"]: p["value"] for series in points["series"] for p in series["points"]} if "series" in points else points
    assert loss, points
    logs = stack.http.get(f"/runs/{run_id}/logs").json()["data"]
    assert any("step 30" in line["text"] for line in logs), [line["text"] for line in logs][-5:]
    registered = stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"]
    checkpoints = [c for c in registered if c["kind"] == "checkpoint"]
    assert sorted(c["step"] for c in checkpoints) == [10, 20, 30]
    assert all(c["path"] == f"runs/{run_id}/checkpoints/step-{c['step']:06d}" for c in checkpoints)
    files = stack.http.get(f"/runs/{run_id}/checkpoints/30/files").json()["data"]
    assert "model/model.safetensors" in {f["name"] for f in files}
    # The final export is the run's output, downloadable like a checkpoint.
    assert run["output"]["path"] == f"runs/{run_id}/final" and run["output"]["step"] == 30
    exported = stack.http.get(f"/runs/{run_id}/checkpoints/30/files", params={"kind": "export"}).json()["data"]
    assert {"model.safetensors", "config.json", "tokenizer.json", "manifest.json"} <= {f["name"] for f in exported}


def test_an_uploaded_dataset_trains_on_a_worker(stack: Stack) -> None:
    """dataset:<id> in a spec: the worker points its trainer at the artifact root's datasets/."""
    rows = "".join(json.dumps({"prompt": f"{a}+{b}=", "completion": str(a + b)}) + "\n" for a in range(20) for b in range(20))
    created = stack.http.post("/datasets", data={"kind": "sft"}, files={"file": ("sums.jsonl", rows.encode())})
    assert created.status_code == 201, created.text
    stack.start_worker("w1")
    run_id = stack.submit({**SPEC, "data": {"source": created.json()["source"]}, "train": {**SPEC["train"], "steps": 10}})
    run = stack.wait_status(run_id, {"succeeded", "failed"})
    assert run["status"] == "succeeded" and run["last_step"] == 10, run["status_reason"]


def test_a_two_process_deepspeed_run_through_the_worker(stack: Stack) -> None:
    """backend deepspeed with processes 2: the worker starts DeepSpeed's launcher; ZeRO-3 trains,
    checkpoints (gathered by rank zero) are registered and the run succeeds."""
    stack.start_worker("w1")
    backend = {"kind": "deepspeed", "zero_stage": 3, "precision": "fp32", "processes": 2}
    run_id = stack.submit({**SPEC, "backend": backend, "train": {**SPEC["train"], "steps": 20}})
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=240)
    assert run["status"] == "succeeded" and run["last_step"] == 20, run["status_reason"]
    registered = stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"]
    assert sorted(c["step"] for c in registered if c["kind"] == "checkpoint") == [10, 20]
    logs = [line["text"] for line in stack.http.get(f"/runs/{run_id}/logs", params={"limit": 1000}).json()["data"]]
    assert any("deepspeed" in text.lower() for text in logs) and any("step 20" in text for text in logs)


def test_cancel_ends_the_process_tree_within_10_s(stack: Stack) -> None:
    stack.start_worker("w1")
    run_id = stack.submit({**SPEC, "train": {**SPEC["train"], "steps": 100_000, "checkpoint_every": None}})
    stack.wait_status(run_id, {"running"})
    deadline = time.monotonic() + 120
    while not (stack.run(run_id)["last_step"] or 0) and time.monotonic() < deadline:
        time.sleep(0.3)
    trainers = _trainer_pids(stack.home, run_id)
    assert trainers, "no trainer process found"
    started = time.monotonic()
    assert stack.http.post(f"/runs/{run_id}/cancel").status_code == 200
    run = stack.wait_status(run_id, {"cancelled"}, timeout=10)
    while any(_alive(pid) for pid in trainers) and time.monotonic() - started < 10:
        time.sleep(0.1)
    survivors = {pid: _cmdline(pid) for pid in trainers if _alive(pid)}
    assert not survivors, f"trainer processes outlived the cancel: {survivors}"
    assert time.monotonic() - started < 10
    assert run["attempts"][0]["end_reason"].startswith("cancelled")
    assert stack.http.get(f"/runs/{run_id}/logs").json()["data"], "what was logged stays"


# A run long enough to be interrupted (about 20 s on one core), checkpointing every 100 steps.
LONG = {**SPEC, "train": {**SPEC["train"], "steps": 1500, "eval_every": 500, "log_every": 10, "checkpoint_every": 100}}


def assert_metrics_once(stack: Stack, run_id: int) -> None:
    """Every train/loss step exists exactly once, from step 10 to the end."""
    [series] = stack.http.get(f"/runs/{run_id}/metrics", params={"keys": "train/loss", "max_points": 10_000}).json()["series"]
    steps = [point["step"] for point in series["points"]]
    assert steps == list(range(10, 1501, 10)) and series["total_points"] == 150, (series["total_points"], steps[:5])


def test_a_killed_worker_is_noticed_and_another_resumes_the_run(stack: Stack) -> None:
    first = stack.start_worker("w1")
    run_id = stack.submit(LONG)
    stack.wait_step(run_id, 250)
    os.killpg(first.pid, signal.SIGKILL)
    killed = time.monotonic()
    stack.start_worker("w2")
    run = stack.wait_status(run_id, {"starting", "running", "succeeded"}, timeout=40)
    while len(run["attempts"]) < 2:
        assert time.monotonic() - killed < 30, "the lost worker was not noticed within 30 s"
        time.sleep(0.2)
        run = stack.run(run_id)
    run = stack.wait_status(run_id, {"succeeded", "failed"})
    assert run["status"] == "succeeded", run["status_reason"]
    first_attempt, second = run["attempts"]
    assert (first_attempt["worker"], second["worker"]) == ("w1", "w2")
    assert first_attempt["end_reason"].startswith("lost: worker w1 sent no heartbeat")
    logs = [line["text"] for line in stack.http.get(f"/runs/{run_id}/logs", params={"limit": 1000}).json()["data"]]
    assert any("resumed from" in text for text in logs), "the second attempt did not resume from a checkpoint"
    assert_metrics_once(stack, run_id)


def test_duplicate_deliveries_run_one_trainer(stack: Stack) -> None:
    run_id = stack.submit(SPEC)
    time.sleep(1.0)  # the API has sent its message
    stack.send_launch(run_id, copies=2)
    stack.start_worker("w1")
    stack.start_worker("w2")
    run = stack.wait_status(run_id, {"succeeded", "failed"})
    assert run["status"] == "succeeded" and len(run["attempts"]) == 1
    assert [p.name for p in (stack.home / "artifacts" / f"runs/{run_id}").glob("spec-attempt-*")] == ["spec-attempt-1.json"]


def test_a_trainer_error_fails_the_run_without_retrying(stack: Stack) -> None:
    stack.start_worker("w1")
    run_id = stack.submit({**SPEC, "data": {"source": "/nonexistent/rows.jsonl"}})
    run = stack.wait_status(run_id, {"succeeded", "failed"})
    assert run["status"] == "failed" and len(run["attempts"]) == 1
    assert "trainer exited with 2" in run["status_reason"] and "rows.jsonl" in run["status_reason"], run["status_reason"]
    time.sleep(4)  # longer than a redispatch: nothing retries it
    assert stack.run(run_id)["status"] == "failed" and len(stack.run(run_id)["attempts"]) == 1


def test_a_hung_trainer_is_killed_and_retried_as_a_hang(stack: Stack) -> None:
    stack.start_worker("w1")
    run_id = stack.submit({**LONG, "resources": {"queue": "cpu", "hang_timeout_s": 10}})
    stack.wait_step(run_id, 150)
    [trainer] = _trainer_pids(stack.home, run_id)
    os.kill(trainer, signal.SIGSTOP)  # alive, but no step will ever finish
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=240)
    assert run["status"] == "succeeded", run["status_reason"]
    assert len(run["attempts"]) == 2 and run["attempts"][0]["end_reason"].startswith("hang: no step finished for 10 s")
    assert not _alive(trainer)
    assert_metrics_once(stack, run_id)


def test_queued_runs_survive_a_flushed_broker(stack: Stack) -> None:
    run_id = stack.submit(SPEC)
    time.sleep(1.0)  # sent to Redis...
    redis.Redis.from_url(stack.broker).flushdb()  # ...and gone
    stack.start_worker("w1")
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=120)
    assert run["status"] == "succeeded" and len(run["attempts"]) == 1


def test_the_run_goes_on_while_the_api_restarts(stack: Stack) -> None:
    stack.start_worker("w1")
    run_id = stack.submit(LONG)
    stack.wait_step(run_id, 100)
    stack.restart_api(down_s=10)  # longer than lost_after_s (8): the API's own downtime is not the worker's silence
    run = stack.wait_status(run_id, {"succeeded", "failed"})
    assert run["status"] == "succeeded" and len(run["attempts"]) == 1, run
    assert_metrics_once(stack, run_id)


def _trainer_pids(home: Path, run_id: int) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"{home}/artifacts/runs/{run_id}/spec-attempt"], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_trainer_commands_and_rank_prefixes(tmp_path: Path) -> None:
    from rlplane.spec import parse_spec
    from worker.launcher import split_rank, trainer_command

    one = trainer_command("py", parse_spec(SPEC), tmp_path / "s.json", tmp_path, resume=False)
    assert one == ["py", "-m", "trainer_core", "run", str(tmp_path / "s.json"), "--out", str(tmp_path)]
    gpus = parse_spec({**SPEC, "resources": {"queue": "gpu", "gpus": 4}})
    four = trainer_command("py", gpus, tmp_path / "s.json", tmp_path, resume=True)
    assert four[:6] == ["py", "-m", "torch.distributed.run", "--nproc_per_node", "4", "--tee"]
    assert four[-5:] == ["-m", "trainer_core", "run", "--resume", str(tmp_path)]
    assert split_rank("[default3]:step 5 | train/loss 1.0") == (3, "step 5 | train/loss 1.0")
    assert split_rank("[rank1]: Traceback (most recent call last):") == (1, "Traceback (most recent call last):")
    assert split_rank("plain line") == (0, "plain line")
