"""Runs executed by real worker processes: an `rlplane api` process (dispatching to Redis), an
`rlplane worker` process (Celery, Redis broker), Postgres, and the trainer as the worker's child."""

from __future__ import annotations

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
    def __init__(self, tmp: Path) -> None:
        self.home = tmp / "home"
        self.database_url = create_postgres_database()
        self.broker = f"{REDIS_URL}/{1 + uuid.uuid4().int % 14}"
        redis.Redis.from_url(self.broker).flushdb()
        self.api_env = {"RLPLANE_BROKER_URL": self.broker, "RLPLANE_DISPATCH": "true", "RLPLANE_LOST_AFTER_S": "8"}
        self.api_env["RLPLANE_ARTIFACTS"] = str(self.home / "artifacts")
        self.api = ApiProcess(self.home, self.database_url, ADMIN, extra_env=self.api_env)
        self.api.wait_ready()
        self.http = httpx.Client(base_url=self.api.url + "/api/v1", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        assert self.http.post("/users", json={"name": "worker-bot"}).status_code == 201
        response = self.http.post("/tokens", json={"name": "w", "scopes": ["worker"], "user": "worker-bot"})
        self.worker_token = response.json()["token"]
        self.workers: list[subprocess.Popen] = []

    def start_worker(self, name: str) -> subprocess.Popen:
        env = {**os.environ, "RLPLANE_HOME": str(self.home), "RLPLANE_ARTIFACTS": str(self.home / "artifacts")}
        env.update({"RLPLANE_HEARTBEAT_S": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
        log = (self.home / f"{name}.log").open("w")
        command = [sys.executable, "-m", "cli.main", "worker", "--queues", "cpu", "--api", self.api.url]
        command += ["--token", self.worker_token, "--name", name, "--broker", self.broker]
        process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.workers.append(process)
        return process

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
        subprocess.run(["pkill", "-KILL", "-f", f"{self.home}/artifacts/runs/"], check=False)  # belt and braces
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
    checkpoints = stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"]
    assert sorted(c["step"] for c in checkpoints) == [10, 20, 30]
    assert all(c["path"] == f"runs/{run_id}/checkpoints/step-{c['step']:06d}" for c in checkpoints)
    files = stack.http.get(f"/runs/{run_id}/checkpoints/30/files").json()["data"]
    assert "model/model.safetensors" in {f["name"] for f in files}
    assert (stack.home / "artifacts" / f"runs/{run_id}/final/model.safetensors").is_file()


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
