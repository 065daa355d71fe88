"""How fast a submitted run starts, and what forwarding its reports costs. A benchmark, not a test.

Each broker gets its own `rlplane up --workers 1` (embedded SQLite database, a fresh RLPLANE_HOME):
the embedded SQLite broker, and Redis at 127.0.0.1:6379 (db 15, flushed first). Beside them, Slurm (--slurm): an
`rlplane up --workers 0` on Redis whose queue is bound to a one-node Slurm cluster on loopback
(scripts/slurm-local.sh), where each run is a job whose node starts a worker for it (docs/slurm.md). For each of
--runs tiny SFT runs, submitted one after another over HTTP:

    dispatch     POST /runs -> the worker has leased it and starts the trainer (spec file written)
    startup      trainer start -> its first step reported (python, torch, model and data load)
    end to end   POST /runs -> first step reported (the two above)

Target: dispatch p95 <= 2 s (the control plane's part; model load excluded).

Reporting overhead: the same run (--overhead-steps steps) straight through `rlplane train`, and
through the worker (whose forwarder reads the trainer's files and posts them to the API), in
alternating order, --repeats times; steps/s is 1 / the mean of perf/step_s over the run (stalls count).
Target: < 1% slower through the worker. Run-to-run spread on a shared 2-core machine is a few
percent, so two finer measures come with it: the trainer's time spent runnable but waiting for a CPU
(/proc/PID/task/*/schedstat, sampled while it runs: the way the API and worker processes can slow
it), and the control plane's CPU seconds per trainer CPU second.

    .venv/bin/python bench/dispatch.py                # about 4 minutes on 2 cores
    .venv/bin/python bench/dispatch.py --runs 5 --repeats 1 --json bench/results/dispatch.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
TINY = {
    "name": "dispatch-bench",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2", "max_seq_len": 32},
    "data": {"source": "builtin:arithmetic", "eval_fraction": 0.1},
    "train": {"steps": 5, "batch_size": 8, "lr": 3e-3, "eval_every": 5, "log_every": 1},
    "resources": {"queue": "cpu"},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Up:
    """`rlplane up --workers N` (default 1) in a fresh home, with an admin client."""

    def __init__(
        self,
        home: Path,
        broker: str | None,
        database: str | None = None,
        workers: int = 1,
        port: int | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.home, self.port = home, port or free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLPLANE_")}
        env.update({"RLPLANE_HOME": str(home), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(settings or {})})
        if broker:
            env["RLPLANE_BROKER_URL"] = broker
        if database:
            env["RLPLANE_DATABASE_URL"] = database
        home.mkdir(parents=True, exist_ok=True)  # bench/dashboard.py --fleet-home starts on a kept home
        self.log = (home / "up.log").open("w")
        command = [sys.executable, "-m", "cli.main", "up", "--port", str(self.port), "--workers", str(workers)]
        output = {"stdout": self.log, "stderr": subprocess.STDOUT}
        self.process = subprocess.Popen(command, env=env, cwd=ROOT, start_new_session=True, **output)
        deadline = time.monotonic() + 120
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((home / "up.log").read_text())
            time.sleep(0.3)
        token = (home / "admin.token").read_text().strip()
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}/api/v1", headers={"Authorization": f"Bearer {token}"})
        while len(self.http.get("/workers").json()["data"]) < workers:  # every worker has said hello
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            return (self.home / "admin.token").exists() and httpx.get(f"http://127.0.0.1:{self.port}/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def run_to_end(self, spec: dict, poll_s: float = 0.05) -> tuple[int, float]:
        posted = time.time()
        run_id = self.submit(spec)
        self.wait(run_id, poll_s)
        return run_id, posted

    def submit(self, spec: dict) -> int:
        response = self.http.post("/runs", json=spec)
        response.raise_for_status()
        return response.json()["id"]

    def wait(self, run_id: int, poll_s: float) -> None:
        while (run := self.http.get(f"/runs/{run_id}").json())["status"] not in ("succeeded", "failed", "cancelled"):
            time.sleep(poll_s)
        if run["status"] != "succeeded":
            raise RuntimeError(f"run {run_id}: {run['status']} {run['status_reason']}")

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGINT)
        self.process.wait(60)
        self.log.close()


def first_step_time(run_dir: Path) -> float:
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["key"] == "train/loss":
            return row["time"]
    raise RuntimeError(f"no train/loss in {run_dir}")


def dispatch_latencies(up: Up, runs: int, spec: dict = TINY) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"dispatch": [], "startup": [], "end to end": []}
    for _ in range(runs):
        run_id, posted = up.run_to_end(spec)
        run_dir = up.home / "artifacts" / "runs" / str(run_id)
        started = (run_dir / "spec-attempt-1.json").stat().st_mtime
        first = first_step_time(run_dir)
        out["dispatch"].append(started - posted)
        out["startup"].append(first - started)
        out["end to end"].append(first - posted)
    return out


def slurm_latencies(tmp: Path, runs: int, broker: str) -> dict[str, list[float]]:
    """The dispatch latencies of runs on a queue bound to a one-node Slurm cluster on loopback: the API submits a job
    per run, whose node starts `rlplane worker --once` (a fresh Python each time: in `dispatch`)."""
    import uuid

    cluster = f"/tmp/rlsb-{uuid.uuid4().hex[:8]}"
    started = subprocess.run(
        ["bash", str(ROOT / "scripts" / "slurm-local.sh"), "start", "1", cluster], capture_output=True, text=True
    )
    if started.returncode:
        raise RuntimeError(started.stderr[-2000:])
    exports = dict(line.removeprefix("export ").split("=", 1) for line in started.stdout.splitlines() if "=" in line)
    try:
        port = free_port()
        queue = {
            "partition": exports["RLPLANE_SLURM_PARTITION"],
            "job_dir": str(tmp / "slurm-jobs"),
            "api_url": f"http://127.0.0.1:{port}",
            "worker": f"{sys.executable} -m cli.main",
            "slurm_conf": exports["SLURM_CONF"],
            "scratch": "$RLPLANE_NODE_SCRATCH/$SLURM_JOB_ID",
            "environment": {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
        }
        settings = {"RLPLANE_SLURM_QUEUES": json.dumps({"slurm": queue})}
        up = Up(tmp / "slurm", broker, workers=0, port=port, settings=settings)
        try:
            return dispatch_latencies(up, runs, {**TINY, "resources": {"queue": "slurm"}})
        finally:
            up.stop()
    finally:
        subprocess.run(["bash", str(ROOT / "scripts" / "slurm-local.sh"), "stop", cluster], capture_output=True)


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(CPU seconds of the process itself, of its children it has waited for) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


class SchedWatch:
    """Samples a process's threads' run time and run-queue wait (ns) from /proc until it exits."""

    def __init__(self, pid: int, every_s: float = 0.25) -> None:
        self.pid, self.every_s = pid, every_s
        self.threads: dict[str, tuple[int, int]] = {}  # tid -> (on a CPU, waiting for one): a thread's last reading
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self._sample():
            time.sleep(self.every_s)

    def _sample(self) -> bool:
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return False
        for tid in tids:
            try:
                on_cpu, waiting = Path(f"/proc/{self.pid}/task/{tid}/schedstat").read_text().split()[:2]
            except (OSError, ValueError):
                continue
            self.threads[tid] = (int(on_cpu), int(waiting))
        return Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"

    def finished(self) -> None:
        """Wait for the process to exit."""
        self._thread.join()

    def wait_share(self) -> float:
        """Run-queue wait as a share of (run + wait) time, in percent, once the process has exited."""
        self._thread.join()
        on_cpu = sum(t[0] for t in self.threads.values())
        waiting = sum(t[1] for t in self.threads.values())
        return 100 * waiting / (on_cpu + waiting)


def trainer_of(worker: int, timeout_s: float = 60) -> int:
    """The trainer the worker starts next (its only child process)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        children = [
            c for t in os.listdir(f"/proc/{worker}/task") for c in Path(f"/proc/{worker}/task/{t}/children").read_text().split()
        ]
        if children:
            return int(children[0])
        time.sleep(0.01)
    raise RuntimeError(f"worker {worker} started no trainer within {timeout_s} s")


def worker_pid(up: Up) -> int:
    children = Path(f"/proc/{up.process.pid}/task/{up.process.pid}/children").read_text().split()
    if len(children) != 1:
        raise RuntimeError(f"expected one worker process under rlplane up, found {children}")
    return int(children[0])


def mean_step_s(metrics: Path) -> float:
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    return statistics.fmean(r["value"] for r in rows if r["key"] == "perf/step_s")  # mean: periodic stalls count


def overhead(up: Up, steps: int, repeats: int, tmp: Path) -> dict[str, list[float]]:
    """steps/s both ways, and the control plane's CPU per trainer CPU second through the worker.

    The CPU share is the steadier measure: the API (the `rlplane up` process) and the worker
    (forwarder, heartbeat) are timed from /proc, the trainer through the worker's waited-for
    children. The benchmark asks the API for the run's status only once the trainer has exited.
    """
    spec = {**TINY, "train": {**TINY["train"], "steps": steps, "eval_every": steps, "log_every": 10}}
    spec_path = tmp / "overhead.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    out: dict[str, list[float]] = {
        "rlplane train": [],
        "through the worker": [],
        "trainer waiting for a CPU %, rlplane train": [],
        "trainer waiting for a CPU %, through the worker": [],
        "control-plane CPU %": [],
        "  of which the API": [],
        "  of which the worker": [],
    }
    worker = worker_pid(up)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    for i in range(repeats):
        for side in ("rlplane train", "through the worker") if i % 2 == 0 else ("through the worker", "rlplane train"):
            if side == "rlplane train":
                run_out = tmp / f"straight-{i}"
                command = [sys.executable, "-m", "trainer_core", "run", str(spec_path), "--out", str(run_out)]
                trainer = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                watch = SchedWatch(trainer.pid)
                _, stderr = trainer.communicate()
                if trainer.returncode:
                    raise RuntimeError(f"rlplane train failed: {stderr.decode()[-2000:]}")
                out[side].append(1 / mean_step_s(run_out / "metrics.jsonl"))
            else:
                (api_0, _), (worker_0, trainer_0) = cpu_seconds(up.process.pid), cpu_seconds(worker)
                run_id = up.submit(spec)
                watch = SchedWatch(trainer_of(worker))
                watch.finished()  # then ask the API: polling it all along would be the benchmark's cost, not ours
                up.wait(run_id, poll_s=0.1)
                (api_1, _), (worker_1, trainer_1) = cpu_seconds(up.process.pid), cpu_seconds(worker)
                out[side].append(1 / mean_step_s(up.home / "artifacts" / "runs" / str(run_id) / "metrics.jsonl"))
                trainer = trainer_1 - trainer_0
                out["control-plane CPU %"].append(100 * ((api_1 - api_0) + (worker_1 - worker_0)) / trainer)
                out["  of which the API"].append(100 * (api_1 - api_0) / trainer)
                out["  of which the worker"].append(100 * (worker_1 - worker_0) / trainer)
            out[f"trainer waiting for a CPU %, {side}"].append(watch.wait_share())
    return out


def paired_difference(straight: list[float], worker: list[float]) -> tuple[float, float]:
    """Mean of the per-pair slowdowns through the worker (%), and the half-width of its 95% interval."""
    slower = [(a - b) / a * 100 for a, b in zip(straight, worker, strict=True)]
    if len(slower) < 2:
        return slower[0], math.inf
    t95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}.get(len(slower) - 1, 2.0)
    return statistics.fmean(slower), t95 * statistics.stdev(slower) / math.sqrt(len(slower))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="dispatch runs per broker (0: only the overhead)")
    parser.add_argument("--overhead-steps", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=3, help="overhead runs each way (0: only the dispatch latency)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--slurm", action="store_true", help="also through a one-node Slurm cluster (scripts/slurm-local.sh)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    results: dict = {"machine": f"{os.cpu_count()} cores, {sys.platform}", "dispatch": {}, "overhead": {}}
    with tempfile.TemporaryDirectory(prefix="dispatch-bench-") as tmp_name:
        tmp = Path(tmp_name)
        import redis

        redis.Redis.from_url(args.redis).flushdb()
        for broker_name, broker in (("embedded (SQLite)", None), ("redis", args.redis)):
            if not args.runs and broker_name != "redis":
                continue
            up = Up(tmp / broker_name.split()[0], broker)
            try:
                if args.runs:
                    results["dispatch"][broker_name] = dispatch_latencies(up, args.runs)
                if broker_name == "redis" and args.repeats:
                    results["overhead"] = overhead(up, args.overhead_steps, args.repeats, tmp)
            finally:
                up.stop()
        if args.slurm and args.runs:
            redis.Redis.from_url(args.redis).flushdb()
            results["dispatch"]["slurm (redis)"] = slurm_latencies(tmp, args.runs, args.redis)

    print(f"\nDispatch latency, {args.runs} runs per broker (seconds)\n")
    print("| broker | measure | p50 | p95 | max |\n|---|---|---|---|---|")
    for broker_name, measures in results["dispatch"].items():
        for measure, values in measures.items():
            print(f"| {broker_name} | {measure} | {pct(values, 0.5):.2f} | {pct(values, 0.95):.2f} | {max(values):.2f} |")
    if results["dispatch"]:
        # the target is the control plane's with workers kept on the nodes; a Slurm job starts Python on its node first
        worst = max(pct(m["dispatch"], 0.95) for name, m in results["dispatch"].items() if not name.startswith("slurm"))
        print(f"\ndispatch p95 <= 2 s: {'PASS' if worst <= 2 else 'FAIL'} (worst {worst:.2f} s)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    if not results["overhead"]:
        return
    measured = results["overhead"]
    slower, half = paired_difference(measured["rlplane train"], measured["through the worker"])
    sides = ("rlplane train", "through the worker")
    straight_wait, worker_wait = (statistics.median(measured[f"trainer waiting for a CPU %, {side}"]) for side in sides)
    share = statistics.median(measured["control-plane CPU %"])
    print(f"\nReporting overhead ({args.overhead_steps} steps, {args.repeats} runs each way, alternating)\n")
    print("| measure | median (runs) |\n|---|---|")
    for side, values in measured.items():
        print(f"| {side} | {statistics.median(values):.2f} ({', '.join(f'{v:.2f}' for v in values)}) |")
    print(f"\nsteps/s through the worker: {slower:+.2f}% slower, 95% interval {slower - half:+.2f}% .. {slower + half:+.2f}%")
    added = worker_wait - straight_wait
    print(f"trainer's wait for a CPU: {straight_wait:.2f}% straight, {worker_wait:.2f}% through the worker")
    print(f"  (added by the control plane: {added:+.2f}% of the trainer's time; < 1%: {'PASS' if added < 1 else 'FAIL'})")
    print(f"control plane (API + worker) CPU per trainer CPU: {share:.2f}% (what it takes from a trainer with no spare core)")


if __name__ == "__main__":
    main()
