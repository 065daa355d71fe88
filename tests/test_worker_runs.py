"""Runs executed by real worker processes: an `rlplane api` process (dispatching to Redis), an
`rlplane worker` process (Celery, Redis broker), Postgres, and the trainer as the worker's child."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis

from rlplane.spec import parse_spec
from tests.harness.worker_stack import (
    LONG,
    SPEC,
    Stack,
    alive,
    assert_gone_within,
    assert_metrics_once,
    children,
    cmdline,
    logged_steps,
    parent,
    trainer_pids,
)
from trainer_core.data import load_examples
from trainer_core.recipes.common import BatchOrder


def test_a_submitted_run_trains_on_a_worker_and_reports(stack: Stack) -> None:
    """An uploaded dataset (dataset:<id> in the spec: the worker points its trainer at the artifact root's
    datasets/) trains on a worker, which reports its metrics, logs, checkpoints and export."""
    rows = "".join(json.dumps({"prompt": f"{a}+{b}=", "completion": str(a + b)}) + "\n" for a in range(20) for b in range(20))
    created = stack.http.post("/datasets", data={"kind": "sft"}, files={"file": ("sums.jsonl", rows.encode())})
    assert created.status_code == 201, created.text
    stack.start_worker("w1")
    run_id = stack.submit({**SPEC, "data": {"source": created.json()["source"], "eval_fraction": 0.1}})
    run = stack.wait_status(run_id, {"succeeded", "failed"})
    assert run["status"] == "succeeded", run["status_reason"]
    assert run["last_step"] == 30
    [attempt] = run["attempts"]
    assert attempt["worker"] == "w1" and attempt["ended_at"] is not None and attempt["last_step"] == 30
    # The tokens the attempt trained on: its trainer's last perf/attempt_tokens, which the worker sends with the end.
    counted = stack.http.get(f"/runs/{run_id}/metrics", params={"keys": "perf/attempt_tokens"}).json()["series"][0]
    assert attempt["tokens"] == counted["points"][-1]["value"] > 0 and counted["points"][-1]["step"] == 30
    used = stack.http.get("/usage", params={"by": "run"}).json()["data"]
    assert [row["tokens"] for row in used if row["key"].startswith(f"{run_id} ")] == [attempt["tokens"]]

    points = stack.http.get(f"/runs/{run_id}/metrics", params={"keys": "train/loss"}).json()
    loss = {p["step"]: p["value"] for series in points["series"] for p in series["points"]} if "series" in points else points
    assert loss, points
    logs = stack.http.get(f"/runs/{run_id}/logs").json()["data"]
    assert any("step 30" in line["text"] for line in logs), [line["text"] for line in logs][-5:]
    registered = stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"]
    checkpoints = [c for c in registered if c["kind"] == "checkpoint"]
    assert sorted(c["step"] for c in checkpoints) == [10, 20, 30]
    assert all(c["path"] == f"runs/{run_id}/checkpoints/step-{c['step']:06d}" for c in checkpoints)
    files = stack.http.get(f"/runs/{run_id}/checkpoints/30/files").json()["data"]
    assert "model/model.safetensors" in {f["name"] for f in files}
    # The final export is the run's output, downloadable like a checkpoint.
    assert run["output"]["path"] == f"runs/{run_id}/final" and run["output"]["step"] == 30
    exported = stack.http.get(f"/runs/{run_id}/checkpoints/30/files", params={"kind": "export"}).json()["data"]
    assert {"model.safetensors", "config.json", "tokenizer.json", "manifest.json"} <= {f["name"] for f in exported}


def test_cancel_ends_the_process_tree_within_10_s(stack: Stack) -> None:
    worker = stack.start_worker("w1")
    run_id = stack.submit({**SPEC, "train": {**SPEC["train"], "steps": 100_000, "checkpoint_every": None}})
    stack.wait_status(run_id, {"running"})
    deadline = time.monotonic() + 120
    while not (stack.run(run_id)["last_step"] or 0) and time.monotonic() < deadline:
        time.sleep(0.3)
    trainers = trainer_pids(stack, run_id)
    assert trainers, "no trainer process found"
    # A CPU run's trainer: forked from the worker's forkserver (worker/forks.py), itself the worker's child
    [trainer] = trainers
    forkserver = parent(trainer)
    assert "-m trainer_core.forkserver" in cmdline(forkserver) and parent(forkserver) == worker.pid
    started = time.monotonic()
    assert stack.http.post(f"/runs/{run_id}/cancel").status_code == 200
    run = stack.wait_status(run_id, {"cancelled"}, timeout=10)
    assert_gone_within(trainers, started, 10, "the cancel")
    assert run["attempts"][0]["end_reason"].startswith("cancelled")
    assert stack.http.get(f"/runs/{run_id}/logs").json()["data"], "what was logged stays"


def test_a_silent_worker_is_noticed_another_takes_the_run_and_the_old_trainer_stops_at_the_claim(stack: Stack) -> None:
    """SIGSTOP a worker while its trainer goes on (a partition, as the API sees it; a killed worker's trainer dies
    with it, test_multinode): the run is lost after RLPLANE_LOST_AFTER_S and started again by another worker, whose
    claim on the run directory stops the old trainer before the new one has trained a step, though the old worker
    never heard. The run writes no checkpoint, whose fence would stop the old trainer too (resuming from one after a
    lost worker: test_worker_remote_artifacts). Awake again, the old worker takes work again; every step's metrics
    exist once across the attempts."""
    first = stack.start_worker("w1")
    run_id = stack.submit({**LONG, "train": {**LONG["train"], "steps": 100_000, "eval_every": None, "checkpoint_every": None}})
    stack.wait_step(run_id, 20)
    old = trainer_pids(stack, run_id)
    assert old, "no trainer process found"
    os.killpg(first.pid, signal.SIGSTOP)  # the worker only: its trainer is a session of its own
    stopped = time.monotonic()
    try:
        stack.start_worker("w2")
        while not logged_steps(stack, run_id, attempt=2):  # the new trainer's first step line
            run = stack.run(run_id)
            assert time.monotonic() - stopped < 90, (run["status"], run["status_reason"])
            time.sleep(0.1)
        survivors = {pid: cmdline(pid) for pid in old if alive(pid)}
        assert not survivors, survivors  # stopped at the claim, its worker still silent: two attempts never train at once
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while not any(
        w["name"] == "w1" and not w["stale"] and w["current_run_id"] is None for w in stack.http.get("/workers").json()["data"]
    ):
        assert time.monotonic() < deadline, "w1 did not come back idle"
        time.sleep(0.3)
    assert stack.http.post(f"/runs/{run_id}/cancel").status_code == 200
    run = stack.wait_status(run_id, {"cancelled"}, timeout=20)
    first_attempt, second = run["attempts"]
    assert (first_attempt["worker"], second["worker"]) == ("w1", "w2")
    assert first_attempt["end_reason"].startswith("lost: worker w1 sent no heartbeat"), first_attempt["end_reason"]
    [series] = stack.http.get(f"/runs/{run_id}/metrics", params={"keys": "train/loss", "max_points": 10_000}).json()["series"]
    steps = [point["step"] for point in series["points"]]
    assert steps == list(range(10, steps[-1] + 1, 10)) and steps[-1] > 20, steps  # each step once, across attempts


def test_duplicate_deliveries_run_one_trainer(stack: Stack) -> None:
    run_id = stack.submit(SPEC)
    time.sleep(1.0)  # the API has sent its message
    stack.send_launch(run_id, copies=2)
    stack.start_worker("w1")
    stack.start_worker("w2")
    run = stack.wait_status(run_id, {"succeeded", "failed"})
    assert run["status"] == "succeeded" and len(run["attempts"]) == 1
    assert [p.name for p in (stack.home / "artifacts" / f"runs/{run_id}").glob("spec-attempt-*")] == ["spec-attempt-1.json"]


def test_a_trainer_error_fails_the_run_without_retrying(stack: Stack) -> None:
    stack.start_worker("w1")
    run_id = stack.submit({**SPEC, "data": {"source": "/nonexistent/rows.jsonl"}})
    run = stack.wait_status(run_id, {"succeeded", "failed"})
    assert run["status"] == "failed" and len(run["attempts"]) == 1
    assert "trainer exited with 2" in run["status_reason"] and "rows.jsonl" in run["status_reason"], run["status_reason"]
    time.sleep(4)  # longer than a redispatch: nothing retries it
    assert stack.run(run_id)["status"] == "failed" and len(stack.run(run_id)["attempts"]) == 1


def test_a_hung_trainer_is_killed_and_retried_as_a_hang(stack: Stack) -> None:
    stack.start_worker("w1")
    run_id = stack.submit({**LONG, "resources": {"queue": "cpu", "hang_timeout_s": 10}})
    stack.wait_step(run_id, 150)
    [trainer] = trainer_pids(stack, run_id)
    os.kill(trainer, signal.SIGSTOP)  # alive, but no step will ever finish
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=240)
    assert run["status"] == "succeeded", run["status_reason"]
    assert len(run["attempts"]) == 2 and run["attempts"][0]["end_reason"].startswith("hang: no step finished for 10 s")
    assert not alive(trainer)
    assert_metrics_once(stack, run_id)


ASYNC_GRPO = {
    **SPEC,
    "name": "worker-async-grpo",
    "algorithm": "grpo",
    "reward": {"kind": "builtin", "name": "arithmetic"},
    "train": {"steps": 300, "batch_size": 16, "lr": 1e-4, "eval_every": 300, "log_every": 10, "checkpoint_every": 50},
    "grpo": {"group_size": 4, "gen": {"max_new_tokens": 4}, "samples_to_log": 0, "max_staleness": 2, "generator": "process"},
}


def test_an_async_run_survives_its_generator_and_its_worker_and_trains_every_prompt_once(stack: Stack) -> None:
    """Asynchronous GRPO (bound 2, its generator a process of its own, batches drawn ahead). Its generator killed
    (SIGKILL) mid-run ends the attempt lost, not failed (the trainer exits 5: the rollout engine was lost, with its
    own words), and the worker resumes it from the last checkpoint; then that worker is killed (SIGKILL) and another
    resumes the run to its end. The run's ledger holds every step once and, in the prompt order, every prompt drawn
    once, trained or dropped, across the three attempts."""
    first = stack.start_worker("w1")
    run_id = stack.submit(ASYNC_GRPO)
    stack.wait_step(run_id, 60)
    [generator] = [pid for pid in trainer_pids(stack, run_id) if "trainer_core.rollout.own_process" in cmdline(pid)]
    os.kill(generator, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while len(stack.run(run_id)["attempts"]) < 2 or (stack.run(run_id)["last_step"] or 0) < 160:
        assert time.monotonic() < deadline, stack.run(run_id)
        time.sleep(0.2)
    trainers = trainer_pids(stack, run_id)  # the trainer, forked from w1's forkserver, and its generator's process
    forkserver = {parent(pid) for pid in trainers} - set(trainers)
    os.killpg(first.pid, signal.SIGKILL)
    killed = time.monotonic()
    assert_gone_within([*trainers, *forkserver], killed, 30, "their worker's death")  # SIGTERM, each from its parent's
    stack.start_worker("w2")
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=240)
    assert run["status"] == "succeeded", run["status_reason"]
    assert [a["worker"] for a in run["attempts"]] == ["w1", "w1", "w2"]
    lost_generator = run["attempts"][0]["end_reason"]
    assert lost_generator.startswith("rollout engine lost: the trainer exited 5"), lost_generator
    assert "the generator's process" in lost_generator, lost_generator
    ledger = Path(stack.artifacts) / "runs" / str(run_id) / "rollout" / "ledger.jsonl"
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [line["step"] for line in lines if line["fate"] == "trained"] == list(range(1, 301))
    prompts = load_examples(parse_spec(ASYNC_GRPO).data, "prompts", seed=0).train
    order = BatchOrder(len(prompts), 4, seed=0, shuffle=True)
    assert [line["prompts"] for line in lines] == [order.next_batch() for _ in lines]
    assert_metrics_once(stack, run_id, steps=300)


def test_queued_runs_survive_a_flushed_broker(stack: Stack) -> None:
    run_id = stack.submit(SPEC)
    time.sleep(1.0)  # sent to Redis...
    redis.Redis.from_url(stack.broker).flushdb()  # ...and gone
    stack.start_worker("w1")
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=120)
    assert run["status"] == "succeeded" and len(run["attempts"]) == 1


def test_the_run_goes_on_while_the_api_restarts(stack: Stack) -> None:
    stack.start_worker("w1")
    longer = {**LONG, "train": {**LONG["train"], "steps": 1500}}  # still training when the API is back
    run_id = stack.submit(longer)
    stack.wait_step(run_id, 100)
    stack.restart_api(down_s=10)  # longer than lost_after_s (8): the API's own downtime is not the worker's silence
    run = stack.wait_status(run_id, {"succeeded", "failed"})
    assert run["status"] == "succeeded" and len(run["attempts"]) == 1, run
    assert_metrics_once(stack, run_id, steps=1500)


def test_trainer_commands_and_rank_prefixes(tmp_path: Path) -> None:
    from rlplane.spec import parse_spec
    from worker.launcher import split_rank, trainer_command

    one = trainer_command("py", parse_spec(SPEC), tmp_path / "s.json", tmp_path, resume=None)
    assert one == ["py", "-m", "trainer_core", "run", str(tmp_path / "s.json"), "--out", str(tmp_path)]
    gpus = parse_spec({**SPEC, "resources": {"queue": "gpu", "gpus": 4}})
    four = trainer_command("py", gpus, tmp_path / "s.json", tmp_path, resume=tmp_path / "checkpoints/step-000010")
    assert four[:6] == ["py", "-m", "trainer_core.torchrun", "--nproc_per_node", "4", "--tee"]
    assert four[-5:] == ["-m", "trainer_core", "run", "--resume", str(tmp_path / "checkpoints/step-000010")]
    assert split_rank("[default3]:step 5 | train/loss 1.0") == (3, "step 5 | train/loss 1.0")
    assert split_rank("[rank1]: Traceback (most recent call last):") == (1, "Traceback (most recent call last):")
    assert split_rank("plain line") == (0, "plain line")


def test_stopping_a_trainer_ends_ranks_in_sessions_of_their_own_even_stopped(tmp_path: Path) -> None:
    """torchrun starts each rank in a session of its own: ending the trainer's process group alone left a rank that
    could not act on SIGTERM (stopped, as a hung node's test makes it) running after its launcher was killed."""
    from worker.launcher import Trainer

    rank = "import time; time.sleep(600)"
    launcher = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', {rank!r}], start_new_session=True); "
        "print(p.pid, flush=True); time.sleep(600)"
    )
    lines: list[str] = []
    trainer = Trainer([sys.executable, "-c", launcher], tmp_path, lambda _rank, line: lines.append(line))
    deadline = time.monotonic() + 30
    while not lines:
        assert time.monotonic() < deadline and trainer.poll() is None, "the launcher did not start its rank"
        time.sleep(0.05)
    child = int(lines[0])
    os.kill(child, signal.SIGSTOP)
    started = time.monotonic()
    trainer.kill_group(grace_s=1)
    assert_gone_within([trainer.process.pid, child], started, 8, "kill_group")


def test_a_forked_trainer_trains_as_a_new_interpreter_does_and_goes_with_its_forkserver(tmp_path: Path) -> None:
    """The worker's forkserver (worker/forks.py, trainer_core/forkserver.py) forks a CPU run's trainer: the same losses
    bit for bit as a new interpreter's, a session of its own showing its own command line, the trainer's environment
    read at run time (the fence's RLPLANE_ATTEMPT) and its exit codes as Popen's. A launch whose environment differs in
    what imports read starts as a new interpreter. The forkserver killed ends its trainer (SIGTERM), and the worker's
    later trainers start as new interpreters."""
    from rlplane.layout import ATTEMPT_ENV, ATTEMPT_FILE
    from rlplane.spec import dump_spec
    from rlplane.status import EXIT_BAD_INPUT, EXIT_FENCED
    from worker.forks import ForkedProcess, ForkServer
    from worker.launcher import Trainer

    def spec_file(name: str, **train: object) -> Path:
        path = tmp_path / f"{name}.json"
        spec = parse_spec({**SPEC, "train": {**SPEC["train"], "checkpoint_every": None, **train}})
        path.write_text(json.dumps(dump_spec(spec)))
        return path

    short, endless = spec_file("short", steps=10), spec_file("endless", steps=100_000)
    forks = ForkServer(sys.executable)

    def train(out: str, spec: Path = short, env: dict[str, str] | None = None, forked: bool = True) -> tuple[Trainer, list[str]]:
        lines: list[str] = []
        command = [sys.executable, "-m", "trainer_core", "run", str(spec), "--out", str(tmp_path / out)]
        env = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
        trainer = Trainer(command, tmp_path, lambda _rank, line: lines.append(line), env=env, forks=forks if forked else None)
        return trainer, lines

    def ended(trainer: Trainer, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while (code := trainer.wait(1)) is None:
            assert time.monotonic() < deadline, "the trainer did not end"
        trainer.wait_output()
        return code

    def losses(out: str) -> list[float]:
        rows = [json.loads(line) for line in (tmp_path / out / "metrics.jsonl").read_text().splitlines()]
        return [row["value"] for row in rows if row["key"] == "train/loss"]

    try:
        new, _ = train("new", forked=False)
        forked, lines = train("forked")
        assert isinstance(forked.process, ForkedProcess) and os.getsid(forked.process.pid) == forked.process.pid
        shown = cmdline(forked.process.pid)
        assert f"-m trainer_core run {short} --out {tmp_path / 'forked'}" in shown, shown
        assert ended(new) == 0 and ended(forked) == 0, lines[-10:]
        assert losses("forked") == losses("new") and len(losses("new")) == 2

        (tmp_path / "fenced").mkdir()
        (tmp_path / "fenced" / ATTEMPT_FILE).write_text("2")  # another attempt owns the directory: this one (1) stops
        fenced, lines = train("fenced", env={ATTEMPT_ENV: "1"})
        assert isinstance(fenced.process, ForkedProcess) and ended(fenced) == EXIT_FENCED, lines[-10:]
        (refused_spec := tmp_path / "refused.json").write_text(json.dumps({**SPEC, "train": {**SPEC["train"], "steps": 0}}))
        refused, lines = train("refused", spec=refused_spec)
        assert ended(refused) == EXIT_BAD_INPUT and any("train.steps" in line for line in lines), lines
        threads, _ = train("threads", spec=endless, env={"OMP_NUM_THREADS": "2"})  # read as libgomp loads: not forked
        assert isinstance(threads.process, subprocess.Popen)
        threads.kill_group(grace_s=1)

        running, lines = train("running", spec=endless)
        deadline = time.monotonic() + 60
        while not any(line.startswith("step ") for line in lines):
            assert time.monotonic() < deadline and running.poll() is None, lines[-10:]
            time.sleep(0.1)
        [server] = [pid for pid in children(os.getpid()) if "trainer_core.forkserver" in cmdline(pid)]
        os.kill(server, signal.SIGKILL)
        killed = time.monotonic()
        assert ended(running, timeout=30) == -signal.SIGTERM
        assert_gone_within([running.process.pid, server], killed, 30, "the forkserver's death")
        later, _ = train("later", spec=endless)
        assert isinstance(later.process, subprocess.Popen)
        later.kill_group(grace_s=1)
    finally:
        forks.close()
