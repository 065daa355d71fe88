"""Real `rlplane api` processes for tests that need the whole HTTP stack or several API processes."""

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx


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
            cwd=Path(__file__).resolve().parent.parent,
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
