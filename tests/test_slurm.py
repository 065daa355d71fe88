"""Runs through a real Slurm cluster: scripts/slurm-local.sh's munged, slurmctld and two slurmd nodes (127.0.0.2 and
127.0.0.3, each with a scratch directory of its own), an `rlplane api` process on Postgres whose queue `slurm` is
bound to the cluster's partition (RLPLANE_SLURM_QUEUES), and the pilot workers each job starts. One cluster and one
stack for the module; the tests run in order."""

from __future__ import annotations

import json
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

from rlplane.ports import free_port
from tests.harness.launch import ROOT
from tests.harness.worker_stack import SPEC, Stack, alive, cmdline, pgrep

SCRIPT = ROOT / "scripts" / "slurm-local.sh"
SFT = {
    **SPEC,
    "train": {"steps": 20, "batch_size": 8, "lr": 3e-3, "log_every": 1, "eval_every": 10, "checkpoint_every": 10, "seed": 3},
}


def spec(name: str, nodes: int, processes: int) -> dict:
    return {
        **SFT,
        "name": name,
        "resources": {"queue": "slurm", "nodes": nodes},
        "backend": {"kind": "torch", "precision": "fp32", "processes": processes},
    }


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    directory = f"/tmp/rls-{uuid.uuid4().hex[:8]}"  # short: munge's and slurmstepd's socket paths have a limit
    started = subprocess.run(["bash", str(SCRIPT), "start", "2", directory], capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr[-3000:]
    exports = dict(line.removeprefix("export ").split("=", 1) for line in started.stdout.splitlines() if "=" in line)
    try:
        yield exports
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", directory], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def stack(cluster: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    port = free_port()
    queue = {
        "partition": cluster["RLPLANE_SLURM_PARTITION"],
        "job_dir": str(tmp_path_factory.mktemp("slurm-jobs")),
        "api_url": f"http://127.0.0.1:{port}",
        "worker": f"{sys.executable} -m cli.main",
        "slurm_conf": cluster["SLURM_CONF"],
        "scratch": "$RLPLANE_NODE_SCRATCH/$SLURM_JOB_ID",
        "environment": {
            "PYTHONPATH": str(ROOT),  # this checkout's rlplane, as the API's
            "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "GLOO_SOCKET_IFNAME": "lo",
            "RLPLANE_HEARTBEAT_S": "1",
        },
    }
    refused = {**queue, "sbatch_lines": ["--nodelist=n9"]}  # a node the cluster does not have: sbatch refuses the job
    minute = {**queue, "time_limit": "1", "signal_s": 0}  # jobs of one minute, ended by the time limit's own SIGTERM
    queues = json.dumps({"slurm": queue, "slurm-refused": refused, "slurm-1min": minute})
    stack = Stack(tmp_path_factory.mktemp("slurm"), api_env={"RLPLANE_SLURM_QUEUES": queues}, port=port)
    try:
        yield stack
    finally:
        stack.close()


def slurm(cluster: dict[str, str], *argv: str, check: bool = True) -> str:
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "SLURM_CONF": cluster["SLURM_CONF"]}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 or not check, (argv, done.stderr)
    return done.stdout


def test_a_two_node_run_through_slurm_trains_as_its_one_node_twin(stack: Stack, cluster: dict[str, str]) -> None:
    """A 1-node run of 2 ranks and a 2-node run of 1 rank each on the queue bound to Slurm: each is one job whose
    pilot workers serve that job's queue for one attempt and exit; both succeed with every loss within 1e-5. The run
    shows its job (state, nodes, the batch script's output); the job's worker token is neither in the batch script
    nor in `scontrol show job` nor on any process's command line, and it is revoked once the job has ended."""
    one = stack.submit(spec("slurm-one-node", 1, 2))
    two = stack.submit(spec("slurm-two-nodes", 2, 1))
    deadline = time.monotonic() + 60
    while not (jobs := stack.run(two)["slurm_jobs"]):
        assert time.monotonic() < deadline, stack.run(two)
        time.sleep(0.3)
    job, output = jobs[0]["job_id"], Path(jobs[0]["output"])
    token = output.with_name("token")
    secret = token.read_text().strip()  # until the job has ended
    assert token.stat().st_mode & 0o077 == 0  # the job's user's alone
    assert secret not in slurm(cluster, "scontrol", "show", "job", "-d", str(job))
    assert secret not in output.with_name("job.sh").read_text()
    while not (pilots := pgrep(f"worker --once --queues slurm.{job}")):
        assert time.monotonic() < deadline, stack.run(two)
        time.sleep(0.2)
    assert not [pid for pid in pilots if secret in cmdline(pid)]
    runs = [stack.wait_status(run_id, {"succeeded", "failed"}, timeout=240) for run_id in (one, two)]
    assert [run["status"] for run in runs] == ["succeeded", "succeeded"], [run["status_reason"] for run in runs]
    a, b = stack.losses(one), stack.losses(two)
    assert sorted(a) == sorted(b) == list(range(1, 21)) and max(abs(a[s] - b[s]) for s in a) < 1e-5, (a, b)
    [attempt] = runs[1]["attempts"]
    assert [(n["node_rank"], n["worker"]) for n in attempt["nodes"]] == [(0, f"slurm-{job}-0"), (1, f"slurm-{job}-1")]
    deadline = time.monotonic() + 30
    while (jobs := stack.run(two)["slurm_jobs"])[0]["ended_at"] is None:
        assert time.monotonic() < deadline, jobs
        time.sleep(0.5)
    assert jobs[0]["state"] == "COMPLETED" and jobs[0]["node_list"] == "n[1-2]", jobs
    assert output.read_text().count("served one attempt (succeeded): exiting (once)") == 2  # each node's pilot
    assert not token.exists()
    # revoked with its job (an API process may reuse a token it resolved for RLPLANE_AUTH_CACHE_S, 2 s)
    while (refused := stack.http.get("/runs", headers={"Authorization": f"Bearer {secret}"})).status_code != 401:
        assert refused.status_code == 403 and time.monotonic() < deadline + 10, refused.text
        time.sleep(0.5)
    assert not pgrep(f"worker --once --queues slurm.{job}")  # each pilot exited after its attempt


def test_a_run_the_partition_cannot_hold_is_refused_at_submit(stack: Stack) -> None:
    three = spec("slurm-three-nodes", 3, 1)
    too_big = stack.http.post("/runs", json={**three, "train": {**three["train"], "batch_size": 12}})
    assert too_big.status_code == 422, too_big.text
    [error] = too_big.json()["detail"]
    assert error["loc"] == ["body", "resources", "nodes"]
    assert error["msg"] == "the run asks for 3 nodes and partition rlplane (queue slurm) has 2: set resources.nodes to at most 2"


def test_a_job_sbatch_refuses_fails_the_run_with_its_words(stack: Stack) -> None:
    run_id = stack.submit({**spec("slurm-refused", 1, 1), "resources": {"queue": "slurm-refused"}})
    run = stack.wait_status(run_id, {"failed"}, timeout=30)
    assert run["status_reason"].startswith("the Slurm job could not be submitted: sbatch failed: "), run["status_reason"]
    assert run["status_reason"].endswith("Invalid node name specified") and run["failure"] == "config"
    assert run["attempts"] == [] and run["slurm_jobs"] == []


def test_a_submission_cut_short_is_taken_on_or_dropped_never_doubled(stack: Stack, cluster: dict[str, str]) -> None:
    """The API may stop between sbatch and recording the job (sbatch runs outside the run's transaction). A run's
    submission begun by an executor in this process on the stack's database (for a queue the API does not bind, so
    its own loop leaves the run alone): its job sbatch made but never recorded is found by its comment on a later
    tick and taken on (one job, the token renamed for it); a submission cut short before sbatch is dropped (its token
    revoked) and the next dispatch submits anew."""
    from datetime import timedelta

    from api.db import make_engine, make_sessionmaker
    from api.executors.celery import CeleryExecutor
    from api.executors.slurm import RECOVER_AFTER_S, Slurm, SlurmExecutor
    from api.models import ApiToken, Run, SlurmJob
    from api.settings import SlurmQueue
    from api.unit_of_work import transaction

    config = SlurmQueue(**json.loads(stack.api_env["RLPLANE_SLURM_QUEUES"])["slurm"])
    factory = make_sessionmaker(make_engine(stack.database_url))
    sent: list = []
    celery = CeleryExecutor(factory, lambda *message: sent.append(message), redispatch_s=1, lost_after_s=10)
    executor = SlurmExecutor(factory, {"slurm-aside": config}, celery, broker_url=stack.broker, artifacts=stack.artifacts)
    run_id = stack.submit({**spec("slurm-cut-short", 1, 1), "resources": {"queue": "slurm-aside"}})

    def begin() -> tuple[int, Path]:
        """What dispatch does before sbatch, committed."""
        with transaction(factory) as uow:
            run = uow.session.get(Run, run_id)
            submission = executor._prepare(uow.session, run, config)
        return submission.token_id, submission.script

    def age(token_id: int) -> None:
        with transaction(factory) as uow:
            uow.session.get(ApiToken, token_id).created_at -= timedelta(seconds=RECOVER_AFTER_S + 1)

    def jobs() -> list[tuple[int, int | None]]:
        with factory() as session:
            return [(j.job_id, j.token_id) for j in session.query(SlurmJob).filter_by(run_id=run_id)]

    def token(token_id: int) -> ApiToken:
        with factory() as session:
            return session.get(ApiToken, token_id)

    # cut short before sbatch: dropped, and the next dispatch submits anew
    dropped, _ = begin()
    executor.dispatch(run_id, "slurm-aside", 1)  # a submission is in flight: nothing more
    assert jobs() == [] and token(dropped).revoked_at is None
    age(dropped)
    executor.tick()
    assert token(dropped).revoked_at is not None and jobs() == []
    # cut short after sbatch: the job is taken on, once
    taken, script = begin()
    job_id = Slurm(config).submit(script)
    try:
        executor.dispatch(run_id, "slurm-aside", 1)
        assert jobs() == []
        age(taken)
        executor.tick()
        assert jobs() == [(job_id, taken)] and token(taken).name == f"slurm job {job_id} (run {run_id})"
        executor.tick()
        executor.dispatch(run_id, "slurm-aside", 1)  # pending (or running) in that job: no other is submitted
        assert jobs() == [(job_id, taken)]
        named = slurm(cluster, "squeue", "-h", "-t", "all", "-n", f"rlplane-run-{run_id}", "-o", "%i").split()
        assert named == [str(job_id)], named
    finally:
        slurm(cluster, "scancel", str(job_id), check=False)
        stack.http.post(f"/runs/{run_id}/cancel")


def test_a_pending_job_says_why_and_cancel_removes_it(stack: Stack, cluster: dict[str, str]) -> None:
    """With the partition down, a run's job pends: the run is queued with Slurm's reason; cancelling the run cancels
    the job. The run's low priority is the job's nice value (Slurm's own priority stays the site's)."""
    slurm(cluster, "scontrol", "update", "partitionname=rlplane", "state=down")
    try:
        low = spec("slurm-pending", 1, 1)
        run_id = stack.submit({**low, "resources": {**low["resources"], "priority": "low"}})
        deadline = time.monotonic() + 30
        while "PartitionDown" not in (stack.run(run_id)["status_reason"] or ""):
            assert time.monotonic() < deadline, stack.run(run_id)
            time.sleep(0.3)
        run = stack.run(run_id)
        [job] = run["slurm_jobs"]
        assert run["status"] == "queued" and run["status_reason"] == f"pending in Slurm job {job['job_id']}: PartitionDown"
        assert slurm(cluster, "squeue", "-h", "-j", str(job["job_id"]), "-o", "%y").strip() == "2500"  # (50 - 25) * 100
        assert stack.http.post(f"/runs/{run_id}/cancel").json()["status"] == "cancelled"
        while slurm(cluster, "squeue", "-h", "-j", str(job["job_id"]), "-o", "%T").strip() not in ("", "CANCELLED"):
            assert time.monotonic() < deadline
            time.sleep(0.3)
    finally:
        slurm(cluster, "scontrol", "update", "partitionname=rlplane", "state=up")


def test_a_node_set_down_mid_run_is_requeued_and_the_run_resumes_every_step_once(stack: Stack, cluster: dict[str, str]) -> None:
    """A 2-node run's second node is set down (scontrol) past its first checkpoint: Slurm kills the job and requeues
    it (--requeue), the attempt is lost, and once the node is back the same job's new workers resume the run from its
    last checkpoint: it succeeds with every step logged once."""
    longer = spec("slurm-node-down", 2, 1)
    # Long enough that Slurm's kill comes before the end: 300 steps once ended in 13 s, the node's kill after it.
    longer["train"] |= {"steps": 500, "log_every": 10, "checkpoint_every": 50, "eval_every": None}
    run_id = stack.submit(longer)
    stack.wait_step(run_id, 60, timeout=180)
    slurm(cluster, "scontrol", "update", "nodename=n2", "state=down", "reason=rlplane-test")
    try:
        deadline = time.monotonic() + 90
        while len((run := stack.run(run_id))["attempts"]) < 1 or run["attempts"][0]["ended_at"] is None:
            assert time.monotonic() < deadline, run
            time.sleep(0.5)
    finally:
        # ReturnToService=2 may have brought the node back already (its slurmd never stopped): then this is refused
        slurm(cluster, "scontrol", "update", "nodename=n2", "state=resume", check=False)
    # Slurm holds a requeued job for 2 minutes (Reason=BeginTime); an admin's `StartTime=now` lets it go at once.
    [job] = stack.run(run_id)["slurm_jobs"]
    while "BeginTime" not in slurm(cluster, "squeue", "-h", "-j", str(job["job_id"]), "-o", "%r"):
        assert time.monotonic() < deadline, slurm(cluster, "squeue", "-h", "-j", str(job["job_id"]), "-o", "%T %r")
        time.sleep(0.3)
    # The node was set down while its slurmd ran on: its steps of the job's first run end only when slurmd hears of it,
    # and that late end would take the job's next run on the node with it (a node really down runs nothing). The
    # requeued job is let go once they are gone.
    while pgrep(rf"slurmstepd: \[{job['job_id']}\."):
        assert time.monotonic() < deadline + 30, "the job's first run left its steps behind"
        time.sleep(0.3)
    # Nor is a step's process gone the end of it: slurmctld's kill of the first run reaches a node that was down once it
    # answers again, and a kill that came after the next run started ended that run's task there (seen once in a
    # cold CI run: `srun: error: n2: task 1: Killed`, the run queued ever after). Both nodes idle, none completing.
    while set(slurm(cluster, "sinfo", "-h", "-n", "n1,n2", "-o", "%T").split()) != {"idle"}:
        assert time.monotonic() < deadline + 60, slurm(cluster, "sinfo", "-h", "-n", "n1,n2", "-o", "%N %T")
        time.sleep(0.3)
    slurm(cluster, "scontrol", "update", f"jobid={job['job_id']}", "StartTime=now")
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=240)
    assert run["status"] == "succeeded", run["status_reason"]
    ended = [(a["end_reason"], [(n["worker"], n["end_reason"]) for n in a["nodes"]]) for a in run["attempts"]]
    print("attempts:", json.dumps(ended), "jobs:", json.dumps(run["slurm_jobs"]))  # in full, should it fail
    assert len(run["attempts"]) == 2 and [j["job_id"] for j in run["slurm_jobs"]] == [job["job_id"]], ended
    # the requeued job's new pilots (named for its restart) took the second attempt, not the dead ones
    assert [n["worker"] for n in run["attempts"][1]["nodes"]] == [f"slurm-{job['job_id']}-{node}-r1" for node in (0, 1)]
    assert run["slurm_jobs"][0]["restarts"] == 1
    logs = [line["text"] for line in stack.http.get(f"/runs/{run_id}/logs", params={"limit": 5000}).json()["data"]]
    assert any("resumed from" in text for text in logs), "the requeued job did not resume from a checkpoint"
    steps = sorted(stack.losses(run_id))
    assert steps == list(range(10, 501, 10)), steps  # each step once, across the two attempts


def test_a_preempted_job_and_one_at_its_time_limit_hand_the_run_back_and_the_next_job_resumes(
    stack: Stack, cluster: dict[str, str]
) -> None:
    """On a queue whose jobs have a time limit of one minute (and no early --signal): the first job gets SIGTERM
    (`scancel --signal=TERM`: what Slurm sends on preemption) and the second runs into its time limit (Slurm's own
    SIGTERM to every process of the job, then SIGKILL after KillWait). Each time the trainer checkpoints after its
    current step and the worker hands the run back (requeued, not counted as a failure); the first job ends COMPLETED,
    the second TIMEOUT, and each next job resumes the run from that checkpoint: every logged step once. Two nodes, so
    Slurm's SIGTERM also reaches both nodes' torchrun agents (they leave it to their ranks: trainer_core/torchrun.py)
    and both workers (node 1's waits for its trainer's part of the gang's checkpoint)."""
    longer = {**spec("slurm-preempted", 2, 1), "resources": {"queue": "slurm-1min", "nodes": 2}}
    longer["train"] |= {"steps": 100_000, "log_every": 10, "checkpoint_every": None, "eval_every": None}
    run_id = stack.submit(longer)
    stack.wait_step(run_id, 20, timeout=55)  # well within the first job's minute
    [job] = stack.run(run_id)["slurm_jobs"]
    slurm(cluster, "scancel", "--signal=TERM", str(job["job_id"]))
    deadline = time.monotonic() + 180  # the second job: its minute, and up to 30 s until slurmctld's time-limit pass
    while len(jobs := stack.run(run_id)["slurm_jobs"]) < 3:
        assert time.monotonic() < deadline, jobs
        time.sleep(1)
    handed = stack.run(run_id)["last_step"]
    stack.wait_step(run_id, handed + 20, timeout=60)  # the third job trains on from where the second handed back
    assert stack.http.post(f"/runs/{run_id}/cancel").json()["status"] in ("cancelling", "cancelled")
    run = stack.wait_status(run_id, {"cancelled"}, timeout=30)
    first, second, third = run["attempts"]
    print("attempts:", json.dumps([(a["end_reason"], a["handed_back"]) for a in run["attempts"]]))  # should it fail
    assert first["handed_back"] and "handed back" in first["end_reason"], first
    assert second["handed_back"] and "handed back" in second["end_reason"], second
    for attempt in (first, second):  # each node's own word: no worker taken for dead, no trainer for crashed
        assert "failed first" not in attempt["end_reason"], attempt["end_reason"]
        assert all(n["end_reason"].startswith("handed back") for n in attempt["nodes"]), attempt["nodes"]
    assert [j["state"] for j in run["slurm_jobs"][:2]] == ["COMPLETED", "TIMEOUT"], run["slurm_jobs"]
    logs = [line["text"] for line in stack.http.get(f"/runs/{run_id}/logs", params={"limit": 5000}).json()["data"]]
    # checkpoint_every is off: the run's checkpoints are its hand-backs' (and perhaps the cancel's). Each job resumed
    # where the one before checkpointed after its last step: no step trained twice, none skipped.
    listed = stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"]
    saved = sorted(c["step"] for c in listed if c["kind"] == "checkpoint")
    resumed = [int(m.group(1)) for text in logs if (m := re.search(r"resumed from .* at step (\d+)", text))]
    assert resumed == saved[:2] and saved[0] < saved[1], (saved, resumed)
    steps = sorted(stack.losses(run_id))
    assert steps == list(range(10, steps[-1] + 1, 10)) and steps[-1] >= handed + 20, steps  # each step once


def ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_ctrl_c_of_everything_leaves_no_slurm_daemon_job_or_trainer(tmp_path: Path) -> None:
    """`scripts/slurm-local.sh run 1 DIR -- rlplane up --workers 0`, its queue `slurm` bound to that cluster: while a
    run's job trains, the whole foreground process group gets SIGINT (a terminal's Ctrl-C). `rlplane up` ends, the
    script stops the cluster, and no munged, slurmctld, slurmd, job step, pilot worker or trainer is left."""
    directory, port = f"/tmp/rls-{uuid.uuid4().hex[:8]}", free_port()
    queue = {
        "partition": "rlplane",
        "job_dir": str(tmp_path / "jobs"),
        "api_url": f"http://127.0.0.1:{port}",
        "worker": f"{sys.executable} -m cli.main",
        "slurm_conf": f"{directory}/etc/slurm.conf",
        "scratch": "$RLPLANE_NODE_SCRATCH/$SLURM_JOB_ID",
        "environment": {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPLANE_")}
    env |= {"RLPLANE_HOME": str(tmp_path / "home"), "RLPLANE_SLURM_QUEUES": json.dumps({"slurm": queue})}
    up = [sys.executable, "-m", "cli.main", "up", "--workers", "0", "--port", str(port)]
    everything = subprocess.Popen(
        ["bash", str(SCRIPT), "run", "1", directory, "--", *up],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "run.log").open("w"),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        token = tmp_path / "home" / "admin.token"
        while not (token.exists() and ready(port)):
            assert everything.poll() is None and time.monotonic() < deadline, (tmp_path / "run.log").read_text()[-3000:]
            time.sleep(0.2)
        http = httpx.Client(
            base_url=f"http://127.0.0.1:{port}/api/v1", headers={"Authorization": f"Bearer {token.read_text().strip()}"}
        )
        long = spec("slurm-ctrl-c", 1, 1)
        long["train"] |= {"steps": 5000, "log_every": 10, "eval_every": None, "checkpoint_every": None}
        submitted = http.post("/runs", json=long)
        assert submitted.status_code == 201, submitted.text
        run_id = submitted.json()["id"]
        while not (http.get(f"/runs/{run_id}").json()["last_step"] or 0) >= 10:
            assert time.monotonic() < deadline, http.get(f"/runs/{run_id}").json()
            time.sleep(0.3)
        trainers = pgrep(f"{tmp_path}/home/artifacts/runs/{run_id}(/| |$)")
        pilots = pgrep("worker --once --queues slurm.")
        assert trainers and pilots
        os.killpg(everything.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the foreground process group
        assert everything.wait(timeout=90) in (0, 130), (tmp_path / "run.log").read_text()[-3000:]
    finally:
        if everything.poll() is None:
            os.killpg(everything.pid, signal.SIGKILL)
            subprocess.run(["bash", str(SCRIPT), "stop", directory], capture_output=True)
    left = [pid for pid in [*trainers, *pilots, *pgrep(directory)] if alive(pid)]
    assert not left, [cmdline(pid) for pid in left]
    steps = [pid for pid in pgrep("slurmstepd") if alive(pid) and directory in os.path.realpath(f"/proc/{pid}/cwd")]
    assert not steps and not Path(directory).exists()
