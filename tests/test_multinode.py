"""One run across several nodes, with real processes: an `rlplane api` process on Postgres, Redis, and three
`rlplane worker` processes acting as nodes (each its own RLPLANE_HOME and loopback address, 127.0.0.2-4), whose
trainers run under torchrun with node 0's rendezvous, gloo on lo. One stack for the module; the tests run in
order, the last one killing a worker.

The gang rules without processes (grant, reasons, fencing, policy) are in tests/test_gang.py."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.harness.launch import after, checkpoint, launch
from tests.harness.specs import rl_spec
from tests.harness.training import metrics
from tests.harness.worker_stack import (
    ADMIN,
    SPEC,
    Stack,
    alive,
    assert_gone_within,
    children,
    cmdline,
    logged_steps,
    pgrep,
    trainer_pids,
)

NODES = ("node-a", "node-b", "node-c")
SFT = {
    **SPEC,
    "train": {"steps": 20, "batch_size": 8, "lr": 3e-3, "log_every": 1, "eval_every": 10, "checkpoint_every": 10, "seed": 3},
}


# The sharded backends' 2-rank runs give the torch backend's losses within 1e-5 on one node (test_sharded_recipes,
# test_backend_megatron): across two nodes they must still. FSDP2 across two nodes is test_worker_remote_artifacts's,
# on an fsspec root (each node its own run directory, uploading its own shards): it resumes exactly as two ranks on
# one node do, which give the torch backend's losses (test_backend_fsdp2).
ACROSS_NODES = {
    "zero3": {"kind": "deepspeed", "zero_stage": 3, "precision": "fp32"},
    "megatron-tp2": {"kind": "megatron", "tensor_parallel": 2, "precision": "fp32"},
}


def spec(name: str, nodes: int, processes: int, backend: dict | None = None, **train) -> dict:
    return {
        **SFT,
        "name": name,
        "resources": {"queue": "cpu", "nodes": nodes},
        "backend": {"kind": "torch", "precision": "fp32", **(backend or {}), "processes": processes},
        "train": {**SFT["train"], **train},
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(tmp_path_factory.mktemp("multinode"))
    try:
        for i, name in enumerate(NODES):
            stack.start_worker(name, home=stack.home / name, address=f"127.0.0.{i + 2}")
        deadline = time.monotonic() + 60
        while {w["name"] for w in stack.http.get("/workers").json()["data"]} != set(NODES):
            assert time.monotonic() < deadline, "the workers did not all report"
            time.sleep(0.3)
        yield stack
    finally:
        stack.close()


def finished(stack: Stack, *run_ids: int) -> list[dict]:
    runs = [stack.wait_status(run_id, {"succeeded", "failed"}) for run_id in run_ids]
    assert all(run["status"] == "succeeded" for run in runs), [(r["name"], r["status_reason"]) for r in runs]
    return runs


@pytest.fixture(scope="module")
def one_node_two_ranks(stack: Stack) -> dict[int, float]:
    """The torch backend's losses on one node of two ranks: what every two-node run must give."""
    [run] = finished(stack, stack.submit(spec("one-node-two-ranks", 1, 2)))
    return stack.losses(run["id"])


def test_two_nodes_train_as_one_node_of_two_ranks_while_a_bigger_gang_waits(
    stack: Stack, one_node_two_ranks: dict[int, float]
) -> None:
    big = stack.submit(spec("four-nodes", 4, 1, batch_size=8))
    [run] = finished(stack, stack.submit(spec("two-nodes-one-rank", 2, 1)))
    two = run["id"]
    expected, got = one_node_two_ranks, stack.losses(two)
    assert sorted(got) == sorted(expected) == list(range(1, 21))
    assert all(abs(got[s] - expected[s]) < 1e-5 for s in expected), (expected, got)

    [attempt] = run["attempts"]
    nodes = attempt["nodes"]
    assert [(n["node_rank"], n["state"]) for n in nodes] == [(0, "ended"), (1, "ended")]
    assert nodes[0]["address"] and nodes[0]["port"], nodes  # the rendezvous node 0 published
    assert {n["worker"] for n in nodes} <= set(NODES) and len({n["worker"] for n in nodes}) == 2
    ranks = {line["rank"] for line in stack.http.get(f"/runs/{two}/logs", params={"limit": 1000}).json()["data"]}
    assert ranks == {0, 1}, ranks  # each node forwards its own ranks' lines
    node1 = stack.http.get(f"/runs/{two}/logs", params={"node": 1}).json()["data"]
    assert node1 and {(line["rank"], line["node"]) for line in node1} == {(1, 1)}
    assert any(line["text"].startswith("rank 1 of 2 joined") for line in node1), node1
    env = {"RLPLANE_URL": stack.api.url, "RLPLANE_TOKEN": ADMIN, "COLUMNS": "200"}
    shown = CliRunner().invoke(app, ["runs", "show", str(two)], env=env, catch_exceptions=False).stdout
    printed = CliRunner().invoke(app, ["logs", str(two), "--node", "1"], env=env, catch_exceptions=False).stdout
    assert "rank 1 of 2 joined" in printed and "exported the final model" not in printed, printed  # rank 0's line
    rows = [line.split() for line in shown.splitlines() if line.split()[:1] == ["1"] and len(line.split()) >= 5]
    assert [(r[1], r[2], r[5]) for r in rows if r[1] in ("0", "1")] == [("0", "trainer", "ended"), ("1", "trainer", "ended")], (
        shown
    )

    waiting = stack.run(big)
    assert waiting["status"] == "queued" and waiting["status_reason"].startswith("waiting for 4 workers on queue cpu:")
    assert stack.http.post(f"/runs/{big}/cancel").json()["status"] == "cancelled"


def test_zero3_and_megatron_tp_across_two_nodes(stack: Stack, one_node_two_ranks: dict[int, float], tmp_path: Path) -> None:
    """DeepSpeed ZeRO-3 and Megatron with its tensor-parallel group split over the two nodes, each with the
    spec it has on one node: every step's loss within 1e-5 of the one-node two-rank run's. Each run's step-10
    checkpoint, its shards written by both nodes, is complete on the artifact root and resumes exactly: two ranks
    resumed from it give the run's own steps 11-20 bit for bit."""
    run_ids = [stack.submit(spec(f"across-{name}", 2, 1, backend)) for name, backend in ACROSS_NODES.items()]
    for name, run in zip(ACROSS_NODES, finished(stack, *run_ids), strict=True):
        got = stack.losses(run["id"])
        assert sorted(got) == sorted(one_node_two_ranks), name
        worst = max(abs(got[s] - one_node_two_ranks[s]) for s in got)
        assert worst < 1e-5, (name, worst)
        assert len(run["attempts"]) == 1 and len(run["attempts"][0]["nodes"]) == 2, name
        resume = spec(f"resume-{name}", 1, 2, ACROSS_NODES[name])
        saved = checkpoint(Path(stack.artifacts) / "runs" / str(run["id"]), 10)
        out = launch(tmp_path, resume, resume["backend"], f"resume-{name}", "--resume", saved)
        assert metrics(out, "train/loss") == after(got, 10), name


def test_grpo_across_two_nodes_learns_as_its_one_node_twin(stack: Stack, walker: Path) -> None:
    """GRPO from the session's walker: two nodes of one rank each and one node of two ranks sample the same groups
    and follow the same curve (every logged value within 1e-5), on a gang and on a single worker at once."""
    grpo = rl_spec(walker, "grpo", {"kind": "torch", "precision": "fp32"})
    twin = stack.submit({**grpo, "name": "grpo-one-node"})
    gang = stack.submit(
        {
            **grpo,
            "name": "grpo-two-nodes",
            "backend": {**grpo["backend"], "processes": 1},
            "resources": {"queue": "cpu", "nodes": 2},
        }
    )
    finished(stack, twin, gang)
    keys = ("train/loss", "reward/mean", "grpo/kl", "eval/optimality")
    for key in keys:
        [a] = stack.http.get(f"/runs/{twin}/metrics", params={"keys": key}).json()["series"]
        [b] = stack.http.get(f"/runs/{gang}/metrics", params={"keys": key}).json()["series"]
        one, two = ({p["step"]: p["value"] for p in s["points"]} for s in (a, b))
        assert sorted(one) == sorted(two) and one, key
        assert max(abs(one[s] - two[s]) for s in one) < 1e-5, (key, one, two)


def test_async_grpo_with_a_generator_node_learns_as_its_one_node_twin(stack: Stack, walker: Path) -> None:
    """Asynchronous GRPO (bound 1) from the session's walker, its generator a process beside the trainer on one node,
    and a gang of two whose second node is the generator (its lease says so; its worker starts the generator, which
    listens where the node said when it joined; the trainer on node 0 reaches it over TCP and sends it the policy and
    every sync's weights). The generator node's process killed after step 12 ends the gang's attempt lost, with its
    reason, and a new gang resumes from its last checkpoint. Both runs learn (held-out optimality up by 0.1 over 30 steps) and end
    within 0.1 of each other, every group at most one step stale; the node's lines are its own in the run's log
    (measured on 2026-11-29: both 0.553 -> 0.978)."""
    grpo = rl_spec(walker, "grpo", {"kind": "torch", "precision": "fp32"})
    grpo["backend"]["processes"] = 1
    grpo["train"] |= {"steps": 30, "eval_every": 30, "checkpoint_every": 10}
    grpo["grpo"] |= {"max_staleness": 1, "samples_to_log": 0}
    twin = stack.submit({**grpo, "name": "async-one-node", "grpo": {**grpo["grpo"], "generator": "process"}})
    gang = stack.submit(
        {
            **grpo,
            "name": "async-generator-node",
            "grpo": {**grpo["grpo"], "generator": "node"},
            "resources": {"queue": "cpu", "nodes": 2},
        }
    )
    metrics_file, deadline = Path(stack.artifacts) / "runs" / str(gang) / "metrics.jsonl", time.monotonic() + 120
    while not re.search(rb'"step": ?1[2-9]\b', metrics_file.read_bytes() if metrics_file.exists() else b""):
        assert time.monotonic() < deadline, stack.run(gang)
        time.sleep(0.02)
    [listening] = [pid for pid in pgrep("trainer_core.rollout.own_process --listen") if alive(pid)]
    os.kill(listening, signal.SIGKILL)
    _, run = finished(stack, twin, gang)
    lost, attempt = run["attempts"]
    assert "generator" in lost["end_reason"], lost  # its own words, or the trainer's
    resumed = stack.http.get(f"/runs/{gang}/logs", params={"q": "resumed from", "limit": 10}).json()["data"]
    [at] = [int(m[1]) for line in resumed if (m := re.search(r" at step (\d+) ", line["text"]))]
    assert at in (10, 20), resumed  # a checkpoint before its end: the run went on from there
    assert [(n["node_rank"], n["role"], n["state"]) for n in attempt["nodes"]] == [
        (0, "trainer", "ended"),
        (1, "generator", "ended"),
    ]
    assert attempt["nodes"][1]["port"], attempt["nodes"]  # where its generator listened
    said = [line["text"] for line in stack.http.get(f"/runs/{gang}/logs", params={"node": 1, "limit": 1000}).json()["data"]]
    assert any(line.startswith("generator: the trainer connected from 127.") for line in said), said
    final = {}
    for run_id in (twin, gang):
        keys = {"keys": ["eval/optimality", "async/staleness_max"]}
        answer = stack.http.get(f"/runs/{run_id}/metrics", params=keys).json()["series"]
        series = {s["key"]: {p["step"]: p["value"] for p in s["points"]} for s in answer}
        optimality, staleness = series["eval/optimality"], series["async/staleness_max"]
        assert optimality[30] >= optimality[0] + 0.1, (run_id, optimality)
        assert sorted(staleness) == list(range(1, 31)) and max(staleness.values()) <= 1, staleness
        final[run_id] = optimality[30]
    assert abs(final[twin] - final[gang]) <= 0.1, final


def test_a_silent_node_is_fenced_and_its_attempt_is_gone_before_the_next_one_trains(stack: Stack) -> None:
    """SIGSTOP one node's worker while its trainer goes on (a partition, as the API sees it): the attempt is lost
    after RLPLANE_LOST_AFTER_S, every node's processes of it end, and a new gang of the other workers resumes;
    the old processes are gone before the new attempt has trained a step. Then a cancel ends every node's
    processes within 10 s (the run is long enough not to finish meanwhile)."""
    run_id = stack.submit(spec("stop-a-node", 2, 1, steps=5000, checkpoint_every=50, eval_every=None, log_every=10))
    stack.wait_step(run_id, 80)
    attempt = stack.run(run_id)["attempts"][0]
    silent = next(n["worker"] for n in attempt["nodes"] if n["node_rank"] == 1)
    worker = stack.workers[NODES.index(silent)]
    old = trainer_pids(stack, run_id)
    os.killpg(worker.pid, signal.SIGSTOP)  # the worker only: its trainer is a session of its own
    stopped = time.monotonic()
    try:
        while True:
            run = stack.run(run_id)
            steps = logged_steps(stack, run_id, attempt=2)
            trained = run["status"] == "running" and len(steps) > 1 and max(steps) - min(steps) >= 20
            alive_old = [pid for pid in old if alive(pid)]
            if trained:
                assert not alive_old, {pid: cmdline(pid) for pid in alive_old}  # two attempts never train at once
                break
            assert time.monotonic() - stopped < 90, (run["status"], run["status_reason"])
            if len(run["attempts"]) > 1:
                assert not alive_old or time.monotonic() - stopped < 30, "the old attempt's processes outlived 30 s"
            time.sleep(0.2)
    finally:
        os.killpg(worker.pid, signal.SIGCONT)
    trainers = trainer_pids(stack, run_id)
    assert len(trainers) >= 4, [cmdline(pid) for pid in trainers]  # torchrun and its rank, on each node
    cancelled = time.monotonic()
    assert stack.http.post(f"/runs/{run_id}/cancel").status_code == 200
    run = stack.wait_status(run_id, {"cancelled"}, timeout=10)
    assert_gone_within(trainers, cancelled, 10, "the cancel")
    assert run["attempts"][-1]["end_reason"].startswith("cancelled"), run["attempts"][-1]
    first, second = run["attempts"][:2]
    assert first["end_reason"].startswith(f"lost: node 1 (worker {silent}) sent no heartbeat"), first["end_reason"]
    assert silent not in {n["worker"] for n in second["nodes"]}
    logs = [line["text"] for line in stack.http.get(f"/runs/{run_id}/logs", params={"limit": 5000}).json()["data"]]
    assert any("resumed from" in text for text in logs), "the new gang did not resume from a checkpoint"
    [series] = stack.http.get(f"/runs/{run_id}/metrics", params={"keys": "train/loss", "max_points": 10_000}).json()["series"]
    steps = [p["step"] for p in series["points"]]
    assert steps == list(range(10, steps[-1] + 1, 10)) and steps[-1] > 100, steps  # each step once, across attempts
    # The silent worker, awake again, finds its attempt over and takes work again.
    deadline = time.monotonic() + 30
    while not any(
        w["name"] == silent and not w["stale"] and w["current_run_id"] is None for w in stack.http.get("/workers").json()["data"]
    ):
        assert time.monotonic() < deadline, f"{silent} did not come back idle"
        time.sleep(0.3)


def test_a_hung_node_ends_the_attempt_and_a_new_gang_resumes(stack: Stack) -> None:
    """SIGSTOP node 1's rank (its worker and torchrun go on): node 0's steps stop with it, node 0's worker ends the
    attempt at resources.hang_timeout_s, every process of it is gone within 30 s, and a new gang resumes."""
    hung = spec("hang-a-node", 2, 1, steps=5000, checkpoint_every=50, eval_every=None, log_every=10)
    run_id = stack.submit({**hung, "resources": {**hung["resources"], "hang_timeout_s": 10}})
    stack.wait_step(run_id, 60)
    old = trainer_pids(stack, run_id)
    agent = next(pid for pid in old if "--node-rank 1 " in cmdline(pid))
    [rank] = [pid for pid in old if pid in children(agent)]
    os.kill(rank, signal.SIGSTOP)
    stopped = time.monotonic()
    while len((run := stack.run(run_id))["attempts"]) < 2 or run["attempts"][0]["ended_at"] is None:
        assert time.monotonic() - stopped < 60, (run["status"], run["status_reason"])
        time.sleep(0.3)
    assert run["attempts"][0]["end_reason"].startswith("hang: "), run["attempts"][0]
    assert_gone_within(old, stopped, 40, "the hung attempt")  # 10 s of hang limit, then 30 s
    deadline = time.monotonic() + 60
    while not ((steps := logged_steps(stack, run_id, attempt=2)) and max(steps) - min(steps) >= 20):
        assert time.monotonic() < deadline, f"the new gang did not train: {stack.run(run_id)['status_reason']}"
        time.sleep(0.3)
    assert stack.http.post(f"/runs/{run_id}/cancel").status_code == 200
    assert stack.wait_status(run_id, {"cancelled"}, timeout=30)["status"] == "cancelled"


def kill_past_a_checkpoint(stack: Stack, run_id: int, worker_pid: int) -> int:
    """SIGKILL a worker once rank 0 has logged steps past the newest checkpoint the run has begun, so the next
    gang must train logged steps again; the last step logged before the kill. What rank 0 logged reaches its files
    every half second and at each checkpoint, so a logged step is no sign of where the trainer is: its processes
    are stopped while the run directory is read (a checkpoint needs every rank, so none begins once the node is
    dead), and the worker is killed only if the last logged step is past every checkpoint, finished or staged."""
    run_dir = Path(stack.artifacts) / "runs" / str(run_id)

    def logged_and_saved() -> tuple[int, int]:
        text = (run_dir / "metrics.jsonl").read_text() if (run_dir / "metrics.jsonl").is_file() else ""
        lines = text[: text.rfind("\n") + 1].splitlines()  # whole lines: the trainer may be writing the next one
        # Finished checkpoints and the staging directories of begun ones (.step-000200.tmp-...).
        saved = [int(m[1]) for path in (run_dir / "checkpoints").glob("*step-*") if (m := re.search(r"step-(\d+)", path.name))]
        return (json.loads(lines[-1])["step"] if lines else 0), max(saved, default=0)

    deadline = time.monotonic() + 120
    while True:
        logged, saved = logged_and_saved()
        if logged > saved > 0:
            frozen = trainer_pids(stack, run_id)
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            try:
                logged, saved = logged_and_saved()
                if logged > saved > 0:
                    os.killpg(worker_pid, signal.SIGKILL)  # its trainer dies with it (PR_SET_PDEATHSIG)
                    return logged
            finally:
                for pid in frozen:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
        assert time.monotonic() < deadline, f"run {run_id} logged no step past a checkpoint: {logged}, saved {saved}"
        time.sleep(0.05)


def test_a_killed_node_ends_the_attempt_and_a_new_gang_resumes(stack: Stack) -> None:
    # Checkpoints 200 steps apart (2 s or more here) leave time for the reporter's half-second writes between them.
    run_id = stack.submit(spec("kill-a-node", 2, 1, steps=600, checkpoint_every=200, eval_every=None, log_every=10))
    stack.wait_step(run_id, 1)
    attempt = stack.run(run_id)["attempts"][0]
    node1 = next(n["worker"] for n in attempt["nodes"] if n["node_rank"] == 1)
    logged = kill_past_a_checkpoint(stack, run_id, stack.workers[NODES.index(node1)].pid)
    killed = time.monotonic()
    run = stack.run(run_id)
    while len(run["attempts"]) < 2:
        assert time.monotonic() - killed < 30, f"no new gang within 30 s: {run['status']} {run['status_reason']}"
        time.sleep(0.3)
        run = stack.run(run_id)
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=240)
    assert run["status"] == "succeeded", run["status_reason"]
    first, second = run["attempts"][:2]
    # The killed node is named, whichever came first: node 0's crash report (then node 1 is named first once its
    # worker has been silent since before the end) or node 1's silence
    assert f"node 1 (worker {node1})" in first["end_reason"].split(";")[0], first["end_reason"]
    rows = {n["node_rank"]: n["end_reason"] for n in first["nodes"]}
    assert f"its worker {node1} was lost" in rows[1] and node1 not in rows[0], rows
    assert node1 not in {n["worker"] for n in second["nodes"]}
    logs = [line["text"] for line in stack.http.get(f"/runs/{run_id}/logs", params={"limit": 5000}).json()["data"]]
    assert any("resumed from" in text for text in logs), "the new gang did not resume from a checkpoint"
    [series] = stack.http.get(f"/runs/{run_id}/metrics", params={"keys": "train/loss", "max_points": 10_000}).json()["series"]
    assert [p["step"] for p in series["points"]] == list(range(10, 601, 10))  # every step once, across attempts
    # The resumed gang trained again the steps after the checkpoint: the run directory's metrics.jsonl holds both
    # attempts' values of them, which an exact resume makes equal.
    seen: dict[tuple[str, int], list[float]] = {}
    for line in (Path(stack.artifacts) / "runs" / str(run_id) / "metrics.jsonl").read_text().splitlines():
        point = json.loads(line)
        seen.setdefault((point["key"], point["step"]), []).append(point["value"])
    twice = {k: v for k, v in seen.items() if len(v) > 1 and k[0] == "train/loss"}
    assert ("train/loss", logged) in twice and all(max(v) - min(v) < 1e-6 for v in twice.values()), (logged, twice)
