"""`rlplane up` on the embedded default (SQLite database, SQLite broker, no services), driven the way
a CI job drives it: examples/ci.sh submits the shipped SFT example with `rlplane submit --wait`,
fetches the metrics as JSON and downloads the final model; then Ctrl-C stops everything."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.harness.servers import UpServer

ROOT = Path(__file__).resolve().parents[1]


def test_ci_script_against_rlplane_up_then_ctrl_c_stops_everything(tmp_path: Path) -> None:
    server = UpServer(tmp_path / "home", workers=1)
    try:
        server.wait_ready()
        # No token: the CLI uses the admin token `rlplane up` keeps in RLPLANE_HOME, as on a laptop.
        env = {**server.env, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "OUT": str(tmp_path / "ci")}
        # No RLPLANE_URL either: the server runs on a port of its own, and the CLI finds it from RLPLANE_HOME.
        env.update({"MAX_EVAL_LOSS": "20", "XDG_CONFIG_HOME": str(tmp_path / "config")})
        job = subprocess.run(["examples/ci.sh", "examples/sft.yaml"], cwd=ROOT, env=env, capture_output=True, text=True)
        assert job.returncode == 0, job.stdout + job.stderr + server.log_path.read_text()[-3000:]
        assert "Traceback" not in job.stderr
        run_id = int(job.stdout.split()[1])  # "run <id> succeeded"

        http = httpx.Client(base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {server.token}"})
        run = http.get(f"/runs/{run_id}").json()
        assert run["status"] == "succeeded" and run["name"] == "ci-local"
        assert run["attempts"][0]["worker"] == "local-1"
        assert run["attempts"][0]["end_reason"] == "trainer exited 0 at step 60"  # the step the progress shows
        registered = http.get(f"/runs/{run_id}/checkpoints").json()["data"]
        assert [(c["step"], c["kind"]) for c in registered] == [(30, "checkpoint"), (60, "checkpoint"), (60, "export")]
        assert run["output"]["path"] == f"runs/{run_id}/final"
        assert http.get(f"/runs/{run_id}/logs").json()["data"]
        workers = http.get("/workers").json()["data"]
        assert [w["name"] for w in workers] == ["local-1"] and workers[0]["seconds_since_heartbeat"] < 10

        metrics = {s["key"]: s for s in json.loads((tmp_path / "ci" / "metrics.json").read_text())["series"]}
        assert metrics["train/loss"]["total_points"] == 60 and metrics["eval/loss"]["points"][-1]["step"] == 60
        model = tmp_path / "ci" / "model"
        exported = server.home / "artifacts" / run["output"]["path"]
        assert sorted(p.name for p in model.iterdir()) == sorted(p.name for p in exported.iterdir())
        assert (model / "model.safetensors").read_bytes() == (exported / "model.safetensors").read_bytes()
    finally:
        code = server.stop()
    assert code == 0, server.log_path.read_text()[-3000:]
    left = subprocess.run(["pgrep", "-f", "--name local-1"], capture_output=True, text=True).stdout.split()
    assert not [pid for pid in left if str(server.home) in _environ(pid)]


def _environ(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_the_ci_gate_says_a_nan_eval_loss_in_one_line(tmp_path: Path) -> None:
    """examples/ci.sh's gate (its embedded Python, run as the script runs it) on metrics whose last eval/loss is NaN."""
    script = (ROOT / "examples" / "ci.sh").read_text()
    gate = script[script.index("<<'PY'\n") + len("<<'PY'\n") : script.index("\nPY\n")]
    metrics = tmp_path / "metrics.json"
    cases = (("NaN", "eval/loss is NaN at step 60: the model is not usable"), (0.5, "eval/loss at the last evaluation: 0.5000"))
    for value, said in cases:
        points = [{"step": 30, "value": 1.2}, {"step": 60, "value": value}]
        metrics.write_text(json.dumps({"series": [{"key": "eval/loss", "points": points}]}))
        result = subprocess.run([sys.executable, "-", str(metrics), "20"], input=gate, capture_output=True, text=True)
        assert "Traceback" not in result.stderr and said in result.stdout + result.stderr
        assert result.returncode == (1 if value == "NaN" else 0)


def _worker_pids(home: Path) -> list[str]:
    found = subprocess.run(["pgrep", "-f", "cli.main worker"], capture_output=True, text=True).stdout.split()
    return [pid for pid in found if str(home) in _environ(pid)]


def test_sigterm_stops_rlplane_up_and_its_workers_and_the_token_stays_out_of_ps(tmp_path: Path) -> None:
    """What systemd and docker send: SIGTERM to `rlplane up` alone ends it (exit 0) and the workers it started.
    The worker's token is in its environment, not on its command line; heartbeats are not logged at INFO, and
    every line of the server's log has a time. A worker started with a token without the worker scope says which
    token it needs and exits at once (it heartbeat 403 forever before)."""
    server = UpServer(tmp_path / "home", workers=1)
    try:
        server.wait_ready()
        [pid] = _worker_pids(server.home)
        assert server.token not in Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        http = httpx.Client(base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {server.token}"})
        deadline = time.monotonic() + 30
        while not (workers := http.get("/workers").json()["data"]) or workers[0]["seconds_since_heartbeat"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        heartbeating = time.monotonic()
        env = {**server.env, "RLPLANE_TOKEN": server.token}  # the admin's: read, write, admin, but not worker
        wrong = subprocess.run(
            [sys.executable, "-m", "cli.main", "worker", "--api", server.url, "--name", "wrong"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert wrong.returncode == 2 and "a worker needs a token with the scope worker" in wrong.stderr, wrong.stderr
        assert "rlplane tokens create --name <node> --scope worker" in wrong.stderr
        time.sleep(max(0.0, heartbeating + 7 - time.monotonic()))  # a few heartbeats (every 3 s) for the log checks
    finally:
        code = server.stop(signal.SIGTERM)
    assert code == 0, server.log_path.read_text()[-3000:]
    deadline = time.monotonic() + 15
    while _worker_pids(server.home):
        assert time.monotonic() < deadline, "the worker outlived rlplane up"
        time.sleep(0.5)
    log = server.log_path.read_text()
    assert "rlplane: SIGTERM: stopping" in log and "/workers/heartbeat" not in log
    assert "/workers/heartbeat" not in (server.home / "worker-1.log").read_text()
    served = [line for line in log.splitlines() if "INFO" in line]
    assert served and all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", line) for line in served), served[:5]
    assert not (server.home / "server.json").exists()


def test_a_port_in_use_is_said_before_anything_is_created(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        home = tmp_path / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLPLANE_")} | {"RLPLANE_HOME": str(home)}
        result = subprocess.run(
            [sys.executable, "-m", "cli.main", "up", "--port", str(port)], env=env, cwd=ROOT, capture_output=True, text=True
        )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "--port" in result.stderr, result.stderr
    assert not (home / "admin.token").exists() and not (home / "rlplane.db").exists()


def test_make_up_installs_what_running_needs_on_the_port_given() -> None:
    """make up installs the trainer, not the test tools (the dev extra), and passes PORT on."""
    planned = subprocess.run(["make", "-n", "-B", "up", "PORT=8123"], cwd=ROOT, capture_output=True, text=True).stdout
    assert '-e ".[api,train]"' in planned and ".[dev]" not in planned and "rlplane up --port 8123" in planned


def test_ctrl_c_mid_run_hands_it_back_and_the_next_up_resumes_it(tmp_path: Path) -> None:
    """Ctrl-C of `rlplane up` while a run trains: the worker hands it back before the API stops (its trainer
    checkpoints after the current step; the attempt ends "handed back", not counted against max_attempts, and the
    run is queued), `rlplane up` exits 0, and the next `rlplane up` on the same home resumes it from that checkpoint
    to the end, every step trained once. Before, `up` stopped its workers cold: Celery's solo pool crashed in the
    hand-back, the run stayed "running", and the next worker, named local-1 again, never let it be found lost."""
    from tests.harness.worker_stack import LONG

    home = tmp_path / "home"
    spec = {**LONG, "name": "interrupted", "resources": {"queue": "cpu", "max_attempts": 1}}
    server = UpServer(home, workers=1)
    try:
        server.wait_ready()
        http = httpx.Client(base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {server.token}"})
        run_id = http.post("/runs", json=spec).json()["id"]
        deadline = time.monotonic() + 120
        while (http.get(f"/runs/{run_id}").json()["last_step"] or 0) < 120:
            assert time.monotonic() < deadline, server.log_path.read_text()[-3000:]
            time.sleep(0.3)
    finally:
        code = server.stop()
    assert code == 0, server.log_path.read_text()[-3000:]
    log = server.log_path.read_text()
    assert "rlplane: SIGINT: stopping (the workers hand their runs back first" in log
    assert "kill_job" not in (home / "worker-1.log").read_text()

    again = UpServer(home, workers=1)
    try:
        again.wait_ready()
        http = httpx.Client(base_url=again.url + "/api/v1", headers={"Authorization": f"Bearer {again.token}"})
        run = http.get(f"/runs/{run_id}").json()
        first = run["attempts"][0]
        assert first["handed_back"] and first["end_reason"].startswith("handed back: worker local-1 received"), first
        checkpointed = int(re.search(r"checkpointed at step (\d+)", first["end_reason"])[1])
        assert checkpointed >= 120
        deadline = time.monotonic() + 180
        while (run := http.get(f"/runs/{run_id}").json())["status"] not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, again.log_path.read_text()[-3000:]
            time.sleep(0.5)
        assert run["status"] == "succeeded", run["status_reason"]
        assert [a["worker"] for a in run["attempts"]] == ["local-1", "local-1"], [a["end_reason"] for a in run["attempts"]]
        logs = [line["text"] for line in http.get(f"/runs/{run_id}/logs", params={"limit": 1000}).json()["data"]]
        assert any("resumed from" in text and f"step {checkpointed}" in text for text in logs), logs[-20:]
        [series] = http.get(f"/runs/{run_id}/metrics", params={"keys": "train/loss", "max_points": 10_000}).json()["series"]
        assert [p["step"] for p in series["points"]] == list(range(10, 601, 10))
    finally:
        assert again.stop() == 0, again.log_path.read_text()[-3000:]
