"""`rlplane up` on the embedded default (SQLite database, SQLite broker, no services), driven the way
a CI job drives it: examples/ci.sh submits the shipped SFT example with `rlplane submit --wait`,
fetches the metrics as JSON and downloads the final model; then Ctrl-C stops everything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.servers import UpServer

ROOT = Path(__file__).resolve().parents[1]


def test_ci_script_against_rlplane_up_then_ctrl_c_stops_everything(tmp_path: Path) -> None:
    server = UpServer(tmp_path / "home", workers=1)
    try:
        server.wait_ready()
        # No token: the CLI uses the admin token `rlplane up` keeps in RLPLANE_HOME, as on a laptop.
        env = {**server.env, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "OUT": str(tmp_path / "ci")}
        env.update({"RLPLANE_URL": server.url, "MAX_EVAL_LOSS": "20", "XDG_CONFIG_HOME": str(tmp_path / "config")})
        job = subprocess.run(["examples/ci.sh", "examples/sft.yaml"], cwd=ROOT, env=env, capture_output=True, text=True)
        assert job.returncode == 0, job.stdout + job.stderr + server.log_path.read_text()[-3000:]
        assert "Traceback" not in job.stderr
        run_id = int(job.stdout.split()[1])  # "run <id> succeeded"

        http = httpx.Client(base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {server.token}"})
        run = http.get(f"/runs/{run_id}").json()
        assert run["status"] == "succeeded" and run["name"] == "ci-local"
        assert run["attempts"][0]["worker"] == "local-1"
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
