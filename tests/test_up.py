"""`rlplane up` on the embedded default (SQLite database, SQLite broker, no services): the shipped
SFT example submitted over HTTP trains on a worker `up` started, and Ctrl-C stops everything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[1]


def test_up_runs_the_sft_example_end_to_end_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPLANE_")}
    env.update({"RLPLANE_HOME": str(home), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    log = (tmp_path / "up.log").open("w")
    up = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "up", "--port", str(port), "--workers", "1"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        api = f"http://127.0.0.1:{port}/api/v1"
        deadline = time.monotonic() + 90
        while not (home / "admin.token").exists() or not _ready(port):
            assert up.poll() is None and time.monotonic() < deadline, (tmp_path / "up.log").read_text()
            time.sleep(0.3)
        http = httpx.Client(base_url=api, headers={"Authorization": f"Bearer {(home / 'admin.token').read_text().strip()}"})
        spec = yaml.safe_load((ROOT / "examples" / "sft.yaml").read_text())
        response = http.post("/runs", json=spec)
        assert response.status_code == 201, response.text
        run_id = response.json()["id"]
        deadline = time.monotonic() + 180
        while (run := http.get(f"/runs/{run_id}").json())["status"] not in ("succeeded", "failed"):
            assert time.monotonic() < deadline, (run, (home / "worker-1.log").read_text()[-3000:])
            time.sleep(0.5)
        assert run["status"] == "succeeded", run["status_reason"]
        assert run["attempts"][0]["worker"] == "local-1"
        assert http.get(f"/runs/{run_id}/metrics/keys").json()["count"] > 3
        assert http.get(f"/runs/{run_id}/logs").json()["data"]
        registered = http.get(f"/runs/{run_id}/checkpoints").json()["data"]
        assert [(c["step"], c["kind"]) for c in registered] == [(30, "checkpoint"), (60, "checkpoint"), (60, "export")]
        assert run["output"]["path"] == f"runs/{run_id}/final"
        workers = http.get("/workers").json()["data"]
        assert [w["name"] for w in workers] == ["local-1"] and workers[0]["seconds_since_heartbeat"] < 10
    finally:
        os.killpg(up.pid, signal.SIGINT)  # Ctrl-C in a terminal signals the foreground group
        code = up.wait(30)
        log.close()
    assert code == 0, (tmp_path / "up.log").read_text()[-3000:]
    left = subprocess.run(["pgrep", "-f", "--name local-1"], capture_output=True, text=True).stdout.split()
    assert not [pid for pid in left if Path(f"/proc/{pid}/environ").exists() and str(home) in _environ(pid)]


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _environ(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return ""
