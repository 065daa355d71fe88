"""A stack of real processes for the worker tests: an `rlplane api` process (dispatching to Redis), `rlplane
worker` processes (Celery, Redis broker), Postgres, and the trainers the workers start."""

from __future__ import annotations

import os
import re
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

from tests.harness.databases import create_postgres_database, drop_postgres_database
from tests.harness.launch import ROOT
from tests.harness.servers import ApiProcess

ADMIN = "worker-test-admin-token-0123456789"


SPEC = {
    "name": "worker-sft",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": {"source": "builtin:arithmetic", "eval_fraction": 0.1},
    "train": {"steps": 30, "batch_size": 8, "lr": 3e-3, "eval_every": 10, "log_every": 5, "checkpoint_every": 10},
    "resources": {"queue": "cpu"},
}


def broker_db() -> int:
    """A Redis database of its own: 1-7 for the first pytest-xdist worker's stacks, 8-14 for the second's (a
    worker runs one stack at a time, and each flushes its database first)."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    return 1 + 7 * (worker % 2) + uuid.uuid4().int % 7


class Stack:
    def __init__(
        self, tmp: Path, artifacts: str | None = None, api_env: dict[str, str] | None = None, port: int | None = None
    ) -> None:
        """`artifacts`: the artifact root of the API and the workers (default: a directory under home); `api_env`: more
        of the API's settings; `port`: the API's (default: a free one)."""
        self.home = tmp / "home"
        self.artifacts = artifacts or str(self.home / "artifacts")
        self.database_url = create_postgres_database()
        redis_url = os.environ.get("RLPLANE_TEST_REDIS", "redis://127.0.0.1:6379")  # read late: see databases.py
        self.broker = f"{redis_url}/{broker_db()}"
        redis.Redis.from_url(self.broker).flushdb()
        self.api_env = {"RLPLANE_BROKER_URL": self.broker, "RLPLANE_DISPATCH": "true", "RLPLANE_LOST_AFTER_S": "8"}
        self.api_env["RLPLANE_REDISPATCH_S"] = "3"
        self.api_env["RLPLANE_ARTIFACTS"] = self.artifacts
        self.api_env.update(api_env or {})
        self.api = ApiProcess(self.home, self.database_url, ADMIN, port=port, extra_env=self.api_env)
        self.api.wait_ready()
        self.http = httpx.Client(base_url=self.api.url + "/api/v1", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        assert self.http.post("/users", json={"name": "worker-bot"}).status_code == 201
        response = self.http.post("/tokens", json={"name": "w", "scopes": ["worker"], "user": "worker-bot"})
        self.worker_token = response.json()["token"]
        self.workers: list[subprocess.Popen] = []

    def start_worker(
        self, name: str, home: Path | None = None, address: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        """`home`: the worker's own RLPLANE_HOME, as on another node (default: the stack's); `address`: the
        loopback address it advertises to the other nodes of a gang (its ranks talk over lo); `env`: its settings."""
        env = {**os.environ, **(env or {}), "RLPLANE_HOME": str(home or self.home), "RLPLANE_ARTIFACTS": self.artifacts}
        env.update({"RLPLANE_HEARTBEAT_S": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "GLOO_SOCKET_IFNAME": "lo"})
        log = (self.home / f"{name}.log").open("w")
        command = [sys.executable, "-m", "cli.main", "worker", "--queues", "cpu", "--api", self.api.url]
        command += ["--name", name, "--broker", self.broker]
        env["RLPLANE_TOKEN"] = self.worker_token  # in the environment, never on the command line (`ps` shows that)
        command += ["--advertise-address", address or "127.0.0.1"]
        process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.workers.append(process)
        return process

    def restart_api(self, down_s: float) -> None:
        self.api.stop()
        time.sleep(down_s)
        self.start_api()

    def start_api(self) -> None:
        """A new API process on the stopped one's port and database."""
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

    def losses(self, run_id: int) -> dict[int, float]:
        """The run's train/loss by step, as the API serves it."""
        params = {"keys": "train/loss", "max_points": 10_000}
        [series] = self.http.get(f"/runs/{run_id}/metrics", params=params).json()["series"]
        return {p["step"]: p["value"] for p in series["points"]}

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


def trainer_pids(stack: Stack, run_id: int) -> list[int]:
    """The processes of a run's trainers (every process whose command line names the run's directory)."""
    return pgrep(f"{stack.artifacts}/runs/{run_id}(/| |$)")


def pgrep(pattern: str) -> list[int]:
    """The processes whose command line matches `pattern` (a regular expression)."""
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def children(pid: int) -> list[int]:
    """The processes `pid` started that are still there."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(child) for child in out.split()]


def parent(pid: int) -> int | None:
    """The process that started `pid` (its parent, where it is still there)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return None


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def logged_steps(stack: Stack, run_id: int, attempt: int) -> list[int]:
    """The steps rank 0 of one attempt logged lately (its `step N | ...` lines among the run's last 100 of rank 0).
    Not the run's last_step: the old attempt's trainer trains on while its node is silent, and what it trained
    may still reach the API after the new attempt began."""
    lines = stack.http.get(f"/runs/{run_id}/logs", params={"tail": 100, "rank": 0}).json()["data"]
    return [int(m[1]) for line in lines if line["attempt"] == attempt and (m := re.match(r"step (\d+) \|", line["text"]))]


def assert_gone_within(pids: list[int], since: float, limit_s: float, what: str) -> None:
    """Every process in `pids` has ended within `limit_s` of `since` (time.monotonic())."""
    while any(alive(pid) for pid in pids) and time.monotonic() - since < limit_s:
        time.sleep(0.1)
    survivors = {pid: cmdline(pid) for pid in pids if alive(pid)}
    assert not survivors and time.monotonic() - since < limit_s, f"processes outlived {what}: {survivors}"


# A run long enough to be interrupted at step 250 and resumed from its step-200 checkpoint (about 8 s on one core).
LONG = {**SPEC, "train": {**SPEC["train"], "steps": 600, "eval_every": 300, "log_every": 10, "checkpoint_every": 100}}


def assert_metrics_once(stack: Stack, run_id: int, steps: int = LONG["train"]["steps"]) -> None:
    """Every train/loss step exists exactly once, every 10 steps from step 10 to `steps`."""
    [series] = stack.http.get(f"/runs/{run_id}/metrics", params={"keys": "train/loss", "max_points": 10_000}).json()["series"]
    logged = [point["step"] for point in series["points"]]
    assert logged == list(range(10, steps + 1, 10)), logged[:5]
    assert series["total_points"] == steps // 10, series["total_points"]
