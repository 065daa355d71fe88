"""The dashboard's own suites, run by `make test`: the generated API client is current, Vitest's
unit and component tests pass, and the end-to-end scripts drive Debian's Chromium against a real
`rlplane up` serving the built dashboard: with a run training while it looks, and on runs filled
through the ingest API to check what the charts show."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.harness.servers import UpServer

ROOT = Path(__file__).resolve().parents[1]
FRONTEND = ROOT / "frontend"


@pytest.fixture(scope="module")
def npm() -> str:
    path = shutil.which("npm")
    assert path, "the dashboard tests need Node.js 20+ and npm on PATH"
    assert (FRONTEND / "node_modules" / ".installed").exists(), "run `make test`: it installs the dashboard's npm packages"
    return path


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)


def test_the_generated_api_client_is_current(npm):
    document = _run([sys.executable, "scripts/gen_openapi.py", "--check"], cwd=ROOT)
    assert document.returncode == 0, document.stdout + document.stderr
    client = _run([npm, "run", "--silent", "check:client"], cwd=FRONTEND)
    assert client.returncode == 0, client.stdout + client.stderr


def test_vitest_suite(npm):
    result = _run([npm, "test", "--silent"], cwd=FRONTEND, env={**os.environ, "CI": "1"})
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert " passed" in result.stdout


def _browser_env(tmp_path: Path, name: str) -> dict[str, str]:
    """What an e2e script needs of this machine (Debian's Chromium, the built dashboard), and where its screenshots go."""
    chromium = shutil.which("chromium")
    assert chromium, "the end-to-end test needs Debian's chromium (.ci/run installs it: apt-get install -y chromium)"
    assert (FRONTEND / "dist" / "index.html").exists(), "run `make test`: it builds the dashboard"
    shots = tmp_path / "screenshots"
    print(f"\n{name} screenshots: {shots}")
    return {"SCREENSHOTS": str(shots), "CHROMIUM": chromium}


def _ppo_run(http: httpx.Client) -> int:
    """A real PPO run through the worker: reward and KL charts, and samples of the same prompts at every step
    (the 20 randomwalks prompts in file order, all of them in each batch)."""
    spec = {
        "name": "e2e-ppo",
        "algorithm": "ppo",
        "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
        "reward": {"kind": "builtin", "name": "randomwalks"},
        "data": {"source": "builtin:randomwalks", "eval_fraction": 0.0, "shuffle": False},
        "train": {"steps": 4, "batch_size": 20, "log_every": 1, "eval_every": None, "checkpoint_every": None},
        "ppo": {"epochs": 1, "minibatch_size": 20, "samples_to_log": 4, "samples_every": 1, "gen": {"max_new_tokens": 8}},
    }
    created = http.post("/runs", json=spec)
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    deadline = time.monotonic() + 180
    while (run := http.get(f"/runs/{run_id}").json())["status"] != "succeeded":
        assert time.monotonic() < deadline and run["status"] in ("queued", "starting", "running"), run
        time.sleep(0.5)
    samples = http.get(f"/runs/{run_id}/samples", params={"limit": 100}).json()["data"]
    assert sorted({s["step"] for s in samples}) == [1, 2, 3, 4] and all(s["kl"] is not None for s in samples), samples
    return run_id


LIVE_COMMENT = "# e2e: a long SFT run the script watches, then cancels"


def test_end_to_end_in_chromium_against_rlplane_up(npm, tmp_path):
    browser = _browser_env(tmp_path, "dashboard")
    server = UpServer(tmp_path / "home", workers=1)
    try:
        server.wait_ready()
        http = httpx.Client(base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {server.token}"})
        ppo_run = _ppo_run(http)  # first: the one worker is free
        # Sent as YAML with a comment: the Spec tab and Clone must show the spec as written.
        spec = f"""{LIVE_COMMENT}
name: e2e-live
algorithm: sft
model: {{path: builtin:tiny-gpt2, max_seq_len: 32}}
data: {{source: builtin:arithmetic}}
train: {{steps: 20000, batch_size: 4, log_every: 1, eval_every: null, checkpoint_every: null}}
"""
        created = http.post("/runs", content=spec, headers={"Content-Type": "application/yaml"})
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        deadline = time.monotonic() + 120
        while (run := http.get(f"/runs/{run_id}").json())["last_step"] is None:
            assert time.monotonic() < deadline and run["status"] in ("queued", "starting", "running"), run
            time.sleep(0.5)
        env = {**os.environ, "RLPLANE_URL": server.url, "RLPLANE_TOKEN": server.token, "RUN_ID": str(run_id)}
        env["SAMPLES_RUN_ID"] = str(ppo_run)
        env["SPEC_COMMENT"] = LIVE_COMMENT
        env.update(browser)
        result = _run(["node", "e2e/dashboard.e2e.mjs"], cwd=FRONTEND, env=env)
        assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
        assert http.get(f"/runs/{run_id}").json()["status"] in ("cancelling", "cancelled")
        submitted = http.get("/runs", params={"q": "e2e-from-new-run", "algorithm": "sft"}).json()["data"]
        assert len(submitted) == 1 and submitted[0]["last_step"] is not None, submitted
        # The evaluation submitted from its Checkpoints tab ran, and is listed with the checkpoint it names.
        [evaluation] = http.get("/runs", params={"algorithm": "eval"}).json()["data"]
        assert evaluation["status"] == "succeeded" and evaluation["name"] == "eval-e2e-from-new-run", evaluation
        checkpoints = http.get(f"/runs/{submitted[0]['id']}/checkpoints").json()["data"]
        [at_200] = [c for c in checkpoints if (c["kind"], c["step"]) == ("checkpoint", 200)]
        [listed] = at_200["evaluations"]
        assert listed["run_id"] == evaluation["id"] and listed["samples"] == 4 and "eval/pass@4" in listed["metrics"]
        shots = Path(browser["SCREENSHOTS"])
        assert sorted(p.suffix for p in shots.iterdir()) and all(p.stat().st_size > 1000 for p in shots.glob("*.png"))
    finally:
        assert server.stop() == 0


def test_charts_in_chromium_against_rlplane_up(npm, tmp_path):
    """frontend/e2e/charts.e2e.mjs: what the charts must show, on runs the script fills through the ingest API."""
    browser = _browser_env(tmp_path, "charts")
    server = UpServer(tmp_path / "home", workers=0)
    try:
        server.wait_ready()
        env = {**os.environ, "RLPLANE_URL": server.url, "RLPLANE_TOKEN": server.token}
        env.update(browser)
        result = _run(["node", "e2e/charts.e2e.mjs"], cwd=FRONTEND, env=env)
        assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    finally:
        assert server.stop() == 0
