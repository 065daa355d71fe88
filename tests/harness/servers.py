"""Real `rlplane api` processes for tests that need the whole HTTP stack or several API processes."""

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.harness.launch import ROOT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ApiProcess:
    def __init__(
        self, home: Path, database_url: str, token: str | None, port: int | None = None, extra_env: dict[str, str] | None = None
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "RLPLANE_HOME": str(home), "RLPLANE_DATABASE_URL": database_url, "RLPLANE_SSE_POLL_S": "0.1"}
        env["RLPLANE_DISPATCH"] = "false"  # no broker unless a test asks for one (extra_env)
        env.update(extra_env or {})
        env.pop("RLPLANE_BOOTSTRAP_TOKEN", None)
        if token:
            env["RLPLANE_BOOTSTRAP_TOKEN"] = token
        home.mkdir(parents=True, exist_ok=True)
        self.log = (home / f"api-{self.port}.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "api", "--port", str(self.port), "--log-level", "warning"],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rlplane api exited with {self.process.returncode}: {Path(self.log.name).read_text()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"rlplane api not ready: {Path(self.log.name).read_text()}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


@contextmanager
def api_processes(home: Path, database_url: str, token: str | None, count: int = 1):
    processes = [ApiProcess(home, database_url, token) for _ in range(count)]
    try:
        for process in processes:
            process.wait_ready()
        yield processes
    finally:
        for process in processes:
            process.stop()


class UpServer:
    """`rlplane up` as a user starts it: API and workers in one process group, stopped with Ctrl-C."""

    def __init__(self, home: Path, workers: int = 1, extra_env: dict[str, str] | None = None) -> None:
        self.home, self.port = home, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RLPLANE_")}
        self.env.update({"RLPLANE_HOME": str(home), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(extra_env or {})})
        home.mkdir(parents=True, exist_ok=True)
        self.log_path = home / "up.log"
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "up", "--port", str(self.port), "--workers", str(workers)],
            env=self.env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def token(self) -> str:
        return (self.home / "admin.token").read_text().strip()

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not (self.home / "admin.token").exists() or not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rlplane up did not start: {self.log_path.read_text()[-3000:]}")
            time.sleep(0.3)

    def _ready(self) -> bool:
        try:
            return httpx.get(self.url + "/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, sig: signal.Signals = signal.SIGINT) -> int:
        """Ctrl-C, as a terminal sends it to the foreground group; or `sig` to the `rlplane up` process alone, as
        docker and systemd's stop do. Returns the exit status."""
        if self.process.poll() is None:
            if sig == signal.SIGINT:
                os.killpg(self.process.pid, signal.SIGINT)
            else:
                os.kill(self.process.pid, sig)
        try:
            code = self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait(10)
        self.log.close()
        return code


@contextmanager
def up_server(home: Path, workers: int = 1, extra_env: dict[str, str] | None = None):
    server = UpServer(home, workers, extra_env)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
