"""GET /metrics on the API (Prometheus text, read scope) and on a worker's metrics port."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.factories import create_run, create_user, worker_token
from tests.harness.servers import free_port
from worker.prometheus import WorkerMetrics

ROOT = Path(__file__).resolve().parents[1]


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class TestApiMetrics:
    def test_needs_a_site_admins_token_with_the_read_scope(self, anon, client):
        assert anon.get("/metrics").status_code == 401
        member = create_user(client, "member", roles={"default": "admin"}, scopes=("read",))
        assert anon.get("/metrics", headers={"Authorization": f"Bearer {member}"}).status_code == 403
        scraper = create_user(client, "scraper", scopes=("read",), site_admin=True)
        response = anon.get("/metrics", headers={"Authorization": f"Bearer {scraper}"})
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        bot = worker_token(client)  # a worker token has no read scope
        assert anon.get("/metrics", headers={"Authorization": f"Bearer {bot}"}).status_code == 403

    def test_requests_latency_queues_runs_and_ingest(self, client):
        # The app (and so its counters) lives for the whole session: compare with a scrape before.
        before = _samples(client.get("/metrics").text)
        first = create_run(client)
        create_run(client, resources={"queue": "gpu"})
        create_run(client, resources={"queue": "gpu"})
        client.post(f"/api/v1/runs/{first['id']}/cancel")
        assert client.get(f"/api/v1/runs/{first['id']}").status_code == 200
        # A worker leases a run and reports three points and two log lines.
        bot = worker_token(client)
        headers = {"Authorization": f"Bearer {bot}"}
        [run] = [r for r in client.get("/api/v1/runs").json()["data"] if r["status"] == "queued"][:1]
        lease = client.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "w1"}, headers=headers)
        assert lease.status_code == 200, lease.text
        points = [{"step": s, "key": "train/loss", "value": 1.0 / s} for s in (1, 2, 3)]
        assert client.post(f"/api/v1/runs/{run['id']}/metrics", json=points, headers=headers).status_code == 200
        lines = [{"attempt": 1, "rank": 0, "seq": i, "text": f"line {i}"} for i in range(2)]
        assert client.post(f"/api/v1/runs/{run['id']}/logs", json=lines, headers=headers).status_code == 200

        text = client.get("/metrics").text
        after = _samples(text)
        samples = {
            key: value - before.get(key, 0) if key[0].endswith(("_total", "_count")) else value for key, value in after.items()
        }
        ok_reads = samples[
            ("rlplane_http_requests_total", (("method", "GET"), ("route", "/api/v1/runs/{run_id}"), ("status", "200")))
        ]
        assert ok_reads >= 1
        assert samples[("rlplane_http_requests_total", (("method", "POST"), ("route", "/api/v1/runs"), ("status", "201")))] == 3
        latency = ("rlplane_http_request_duration_seconds_count", (("method", "POST"), ("route", "/api/v1/runs")))
        assert samples[latency] == 3
        assert any(name == "rlplane_http_request_duration_seconds_bucket" for name, _ in samples)
        assert samples[("rlplane_runs", (("status", "cancelled"),))] == 1
        assert samples[("rlplane_runs", (("status", "starting"),))] == 1
        assert samples[("rlplane_runs", (("status", "queued"),))] == 1
        assert samples[("rlplane_queue_depth", (("queue", "gpu"),))] == 1
        assert samples[("rlplane_ingested_total", (("kind", "metrics"),))] == 3
        assert samples[("rlplane_ingested_total", (("kind", "logs"),))] == 2
        # The leased run's attempt costs its worker slot from its start on: the counter grew since the first scrape.
        used = ("rlplane_usage_seconds_total", (("project", "default"), ("queue", run["queue"]), ("unit", "cpu_slot")))
        assert samples[used] > 0
        # Raw paths never become labels (a label per run id would grow without bound).
        assert not re.search(r'route="/api/v1/runs/\d', text)

    def test_the_dashboard_fallback_does_not_swallow_metrics(self, anon):
        response = anon.get("/metrics")
        assert response.status_code == 401 and response.headers["content-type"].startswith("application/json")


class TestWorkerMetrics:
    def test_heartbeats_step_rate_and_gpus_on_their_own_port(self):
        metrics = WorkerMetrics(window_s=60)
        metrics.heartbeat(True, 7, 100, [])
        metrics.heartbeat(False, 7, None, [])
        metrics._steps.append((metrics._steps[-1][0] + 2.0, 110))  # ten steps two seconds later
        gpu = {"index": 0, "name": "NVIDIA H100", "memory_total_mb": 81559, "memory_used_mb": 1024, "utilization": 87.0}
        metrics._gpus = [gpu]
        metrics.attempts.labels("handed_back").inc()
        port = free_port()
        metrics.serve(port, host="127.0.0.1")
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        samples = _samples(text)
        assert samples[("rlplane_worker_heartbeats_total", (("result", "ok"),))] == 1
        assert samples[("rlplane_worker_heartbeats_total", (("result", "failed"),))] == 1
        assert samples[("rlplane_worker_current_run", ())] == 7
        assert samples[("rlplane_worker_current_step", ())] == 110
        assert samples[("rlplane_worker_step_rate", ())] == 5.0
        assert samples[("rlplane_worker_gpu_utilization_ratio", (("gpu", "0"), ("name", "NVIDIA H100")))] == 0.87
        assert samples[("rlplane_worker_gpu_memory_used_bytes", (("gpu", "0"), ("name", "NVIDIA H100")))] == 1024 * 1024**2
        assert samples[("rlplane_worker_attempts_total", (("result", "handed_back"),))] == 1

    def test_a_new_run_starts_a_new_rate_and_idle_has_no_gpu_series(self):
        metrics = WorkerMetrics()
        metrics.heartbeat(True, 1, 5, [])
        metrics.heartbeat(True, 2, 0, [])
        assert metrics.step_rate() == 0.0
        names = {family.name for family in metrics.collect()}
        assert "rlplane_worker_gpu_utilization_ratio" not in names


class TestRealProcesses:
    """`rlplane api` and `rlplane worker` as a deployment runs them: JSON logs, metrics port, SIGTERM."""

    @staticmethod
    def _start(args: list[str], home: Path, **env: str) -> subprocess.Popen:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("RLPLANE_")}
        full_env.update({"RLPLANE_HOME": str(home), "RLPLANE_LOG_FORMAT": "json", **env})
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            env=full_env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    @staticmethod
    def _json_lines(output: str) -> list[dict]:
        return [json.loads(line) for line in output.splitlines() if line.startswith("{")]

    def test_the_api_logs_json_and_drains_on_sigterm(self, tmp_path):
        port = free_port()
        api = self._start(["api", "--port", str(port), "--log-level", "info"], tmp_path, RLPLANE_DISPATCH="false")
        try:
            deadline = time.monotonic() + 60
            while True:
                assert api.poll() is None and time.monotonic() < deadline, "the API did not start"
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
        finally:
            api.send_signal(signal.SIGTERM)
            output, _ = api.communicate(timeout=30)
        # uvicorn finishes its graceful shutdown, then re-raises the signal it caught (exit status -15).
        assert api.returncode in (0, -signal.SIGTERM), output
        entries = self._json_lines(output)
        assert not [line for line in output.splitlines() if line.startswith("INFO:")], "uvicorn logged plain text"
        access = [e for e in entries if e["logger"] == "uvicorn.access" and "/readyz" in e["message"]]
        assert access and access[0]["level"] == "info" and access[0]["time"].endswith("Z")
        messages = [e["message"] for e in entries]
        assert "Application startup complete." in messages and "Application shutdown complete." in messages

    def test_a_worker_serves_metrics_logs_json_and_stops_on_sigterm(self, tmp_path):
        port = free_port()
        # No API at this address: the heartbeats fail, which the metrics and the logs show. RLPLANE_API_WAIT_S=0: the
        # worker starts after one try of its token check instead of retrying it for 30 s.
        command = ["worker", "--queues", "cpu", "--api", "http://127.0.0.1:9", "--token", "t", "--metrics-port", str(port)]
        worker = self._start(command, tmp_path, RLPLANE_HEARTBEAT_S="0.2", RLPLANE_API_WAIT_S="0")
        try:
            deadline, samples = time.monotonic() + 60, {}
            while samples.get(("rlplane_worker_heartbeats_total", (("result", "failed"),)), 0) < 2:
                assert worker.poll() is None and time.monotonic() < deadline, "no failed heartbeats on the metrics port"
                try:
                    samples = _samples(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text)
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
        finally:
            worker.send_signal(signal.SIGTERM)
            output, _ = worker.communicate(timeout=30)
        assert worker.returncode == 0, output
        assert samples[("rlplane_worker_current_run", ())] == 0
        entries = self._json_lines(output)
        assert any(e["logger"] == "rlplane.worker" and e["message"].startswith("heartbeat failed") for e in entries), output[
            -2000:
        ]
        assert any(e["logger"].startswith("celery") for e in entries), "Celery's own logs are not JSON"
