"""An fsspec artifact root (sftp:// here, s3:// in production) shared by the API and workers on
different nodes: a real SFTP server (tests/sftp_server.py), an `rlplane api` process, `rlplane worker`
processes each with its own RLPLANE_HOME (its own local scratch, as on separate machines), Redis and
Postgres. The trainer never sees the URL: the worker brings inputs down and sends checkpoints up."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.worker_stack import LONG, SPEC, Stack, assert_metrics_once
from trainer_core.data import load_examples

ROOT = Path(__file__).resolve().parents[1]
# Interrupted after its step-100 checkpoint went up, resumed from it on another node; six checkpoints, three kept.
# Steps of 64 rows: slow enough (tens of ms a step here) that the run is still short of step 250, which rotates step
# 100's checkpoint away (train.keep_last 3), when the test sees step 130 and freezes the trainer.
SHORT = {**LONG, "train": {**LONG["train"], "steps": 300, "batch_size": 64, "checkpoint_every": 50}}


@pytest.fixture
def sftp(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(the artifact root's URL, the directory the SFTP server keeps it in)."""
    port_file = tmp_path / "sftp.port"
    server = subprocess.Popen([sys.executable, "-m", "tests.sftp_server", str(tmp_path / "sftp"), str(port_file)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert server.poll() is None and time.monotonic() < deadline, "the SFTP server did not start"
            time.sleep(0.1)
        yield f"sftp://rlplane:rlplane@127.0.0.1:{port_file.read_text()}/artifacts", tmp_path / "sftp" / "artifacts"
    finally:
        server.kill()
        server.wait(10)


@pytest.fixture
def remote_stack(tmp_path: Path, sftp: tuple[str, Path]) -> Iterator[Stack]:
    stack = Stack(tmp_path, artifacts=sftp[0])
    try:
        yield stack
    finally:
        stack.close()


def test_runs_on_an_fsspec_root_resume_on_another_node(remote_stack: Stack, sftp: tuple[str, Path]) -> None:
    stack, (_, remote) = remote_stack, sftp
    rows = load_examples({"source": "builtin:arithmetic"}, "sft", seed=0).train
    upload = "".join(json.dumps({"prompt": r["prompt"], "completion": r["completion"]}) + "\n" for r in rows)
    created = stack.http.post("/datasets", data={"kind": "sft"}, files={"file": ("arith.jsonl", upload.encode())})
    assert created.status_code == 201, created.text
    dataset = created.json()
    assert (remote / f"datasets/{dataset['id']}/arith.jsonl").read_text() == upload  # stored by the API, remotely

    node1, node2, node3 = (stack.home / f"node{i}" for i in (1, 2, 3))
    first = stack.start_worker("w1", home=node1)
    run_id = stack.submit({**SHORT, "data": {"source": dataset["source"], "eval_fraction": 0.1}})
    stack.wait_step(run_id, 130)
    # The trainer is frozen while the upload is awaited (a fast one would rotate step 100 away first); the worker,
    # its uploads in a thread of their own, goes on. Then the worker is killed, and its trainer with it.
    found = subprocess.run(["pgrep", "-f", f"{node1}/scratch/runs/{run_id}"], capture_output=True, text=True).stdout
    frozen = [int(pid) for pid in found.split()]
    assert frozen, "no trainer found"
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        uploaded = remote / f"runs/{run_id}/checkpoints/step-000100/manifest.json"
        deadline = time.monotonic() + 30
        while not uploaded.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert uploaded.exists(), "checkpoints go up as they are made"
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    second = stack.start_worker("w2", home=node2)  # a node that never saw node1's disk
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=240)
    assert run["status"] == "succeeded", run["status_reason"]
    assert [a["worker"] for a in run["attempts"]] == ["w1", "w2"]
    logs = [line["text"] for line in stack.http.get(f"/runs/{run_id}/logs", params={"limit": 1000}).json()["data"]]
    assert any("resumed from" in text for text in logs), "node2 did not resume from the checkpoint it downloaded"
    assert_metrics_once(stack, run_id, steps=SHORT["train"]["steps"])
    assert (node2 / "scratch" / f"datasets/{dataset['id']}/arith.jsonl").read_text() == upload  # inputs stay cached
    scratch = node2 / "scratch" / f"runs/{run_id}"
    deadline = time.monotonic() + 30  # removed right after the final status is sent
    while scratch.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not scratch.exists(), "the ended run's scratch copy was left on the node"

    # Every registered checkpoint is complete on the remote root, and the API serves it from there.
    # Rotation (train.keep_last, 3 by default) reaches the remote copies and the API's records.
    registered = stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"]
    assert [c["step"] for c in registered if c["kind"] == "checkpoint"] == [200, 250, 300]
    assert sorted(p.name for p in (remote / f"runs/{run_id}/checkpoints").iterdir()) == [
        "step-000200",
        "step-000250",
        "step-000300",
    ]
    for checkpoint in registered:
        assert (remote / checkpoint["path"] / "manifest.json").exists(), checkpoint
    weights = stack.http.get(f"/runs/{run_id}/checkpoints/300/files/model.safetensors", params={"kind": "export"})
    assert weights.status_code == 200 and weights.content == (remote / f"runs/{run_id}/final/model.safetensors").read_bytes()

    # A run that starts from that run's export, on a third node: run:<id> comes down from the root. The node keeps
    # 1 kB of inputs (RLPLANE_INPUT_CACHE_GB): the export stays while the run uses it and goes when it ends.
    os.killpg(second.pid, signal.SIGKILL)
    stack.start_worker("w3", home=node3, env={"RLPLANE_INPUT_CACHE_GB": "0.000001"})
    child = stack.submit({**SPEC, "model": {"path": f"run:{run_id}", "max_seq_len": 32}, "train": {**SPEC["train"], "steps": 10}})
    run = stack.wait_status(child, {"succeeded", "failed"})
    assert run["status"] == "succeeded", run["status_reason"]
    assert (remote / f"runs/{child}/final/manifest.json").exists()
    log = (stack.home / "w3.log").read_text()
    assert f"downloaded runs/{run_id}/final from" in log, log
    deadline = time.monotonic() + 30  # the attempt ends after its final status is sent
    while (node3 / "scratch" / f"runs/{run_id}/final").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (node3 / "scratch" / f"runs/{run_id}/final").exists(), "the input cache kept more than its limit"
    assert f"removed runs/{run_id}/final from the input cache" in (stack.home / "w3.log").read_text()


def test_a_gang_on_an_fsspec_root_uploads_each_nodes_shards_from_that_node_and_every_node_resumes(
    remote_stack: Stack, sftp: tuple[str, Path], tmp_path: Path
) -> None:
    """FSDP2 over two nodes that share no directory, each with its own scratch copy of the run directory: each node's
    worker uploads its own node's shards of every checkpoint, and node 0's the manifest once both are up (it verifies,
    both ranks' shards in it). Cancelled and resumed on a new gang, both nodes bring down the registered
    checkpoint and go on from it exactly as two ranks on one node do from it."""
    from tests.harness.launch import after, launch
    from tests.harness.training import metrics
    from trainer_core.checkpoint.files import verify

    stack, (_, remote) = remote_stack, sftp
    for i, name in enumerate(("g1", "g2")):
        stack.start_worker(name, home=stack.home / name, address=f"127.0.0.{i + 2}", env={"GLOO_SOCKET_IFNAME": "lo"})
    backend = {"kind": "fsdp2", "precision": "fp32", "processes": 1}
    train = {"steps": 100, "batch_size": 8, "lr": 3e-3, "log_every": 1, "eval_every": None, "checkpoint_every": 10}
    gang = {**SPEC, "name": "gang-fsspec", "backend": backend, "train": {**train, "keep_last": 20, "seed": 3}}
    run_id = stack.submit({**gang, "resources": {"queue": "cpu", "nodes": 2}})
    deadline = time.monotonic() + 120
    while not [c for c in stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"] if c["kind"] == "checkpoint"]:
        assert time.monotonic() < deadline, stack.run(run_id)["status_reason"]
        time.sleep(0.2)
    assert stack.http.post(f"/runs/{run_id}/cancel").status_code == 200
    stack.wait_status(run_id, {"cancelled"}, timeout=30)
    resumed_from = stack.run(run_id)["latest_checkpoint_step"]
    assert stack.http.post(f"/runs/{run_id}/resume").status_code == 200
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=180)
    assert run["status"] == "succeeded", run["status_reason"]
    assert [len(a["nodes"]) for a in run["attempts"]] == [2, 2]
    logs = [line["text"] for line in stack.http.get(f"/runs/{run_id}/logs", params={"limit": 5000}).json()["data"]]
    assert any("resumed from" in text and f"step-{resumed_from:06d}" in text for text in logs), "no resume"

    registered = [c for c in stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"] if c["kind"] == "checkpoint"]
    assert [c["step"] for c in registered] == list(range(10, 101, 10))
    for checkpoint in registered:
        path = remote / checkpoint["path"]
        assert verify(path), checkpoint  # every file, node 1's shards among them, as its manifest lists them
        assert {p.name for p in (path / "dcp").iterdir()} >= {"__0_0.safetensors", "__1_0.safetensors"}, checkpoint
    # Node 1's shards went up from node 1, never through node 0; what the nodes said of them went with the manifests.
    for attempt in run["attempts"]:
        [node1] = [n["worker"] for n in attempt["nodes"] if n["node_rank"] == 1]
        log = (stack.home / f"{node1}.log").read_text()
        assert re.search(rf"uploaded node 1's part of runs/{run_id}/checkpoints/step-\d+ \(\d+ files\)", log), log[-3000:]
    assert not list((remote / f"runs/{run_id}/checkpoints").glob(".*")), "what the nodes said was left on the root"
    copies = [stack.home / name / "scratch" / f"runs/{run_id}" for name in ("g1", "g2")]
    deadline = time.monotonic() + 30  # each node's copy goes once its part has ended
    while any(copy.exists() for copy in copies):
        assert time.monotonic() < deadline, [copy for copy in copies if copy.exists()]
        time.sleep(0.2)
    [series] = stack.http.get(f"/runs/{run_id}/metrics", params={"keys": "train/loss", "max_points": 10_000}).json()["series"]
    losses = {p["step"]: p["value"] for p in series["points"]}
    alone = {**gang, "name": "one-node", "resources": {"queue": "cpu"}}
    saved = str(remote / f"runs/{run_id}/checkpoints/step-{resumed_from:06d}")
    out = launch(tmp_path, alone, {**backend, "processes": 2}, "one-node", "--resume", saved)
    assert metrics(out, "train/loss") == after(losses, resumed_from)


def test_a_scripts_sharded_checkpoints_go_up_from_every_node_and_a_new_gang_resumes_each_rank(
    remote_stack: Stack, sftp: tuple[str, Path]
) -> None:
    """A command run over two nodes that share no directory (tests/sdk_sharded.py): each rank saves its own shard on
    its node and hands it in with log_checkpoint(sharded=True). Node 1's shards go up from node 1, and every registered
    checkpoint verifies with both ranks' shards and the file both nodes wrote alike. Rank 1 dies after step 25; the
    attempt is lost, and a new gang resumes, each rank from its own shard of step 20."""
    from trainer_core.checkpoint.files import verify

    stack, (_, remote) = remote_stack, sftp
    for i, name in enumerate(("s1", "s2")):
        stack.start_worker(name, home=stack.home / name, address=f"127.0.0.{i + 2}", env={"GLOO_SOCKET_IFNAME": "lo"})
    argv = ["python", "sdk_sharded.py", "--steps", "40", "--crash-at", "25", "--out", "{run.dir}/out"]
    spec = {
        "name": "sharded-script",
        "algorithm": "command",
        "train": {"steps": 40, "keep_last": 10},
        "command": {"argv": argv, "code": {"path": str(ROOT / "tests")}},
        "resources": {"queue": "cpu", "nodes": 2},
    }
    run_id = stack.submit(spec)
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=180)
    assert run["status"] == "succeeded", run["status_reason"]
    assert len(run["attempts"]) == 2 and "node 1" in run["attempts"][0]["end_reason"], run["attempts"]
    logs = [line["text"] for line in stack.http.get(f"/runs/{run_id}/logs", params={"limit": 5000}).json()["data"]]
    for rank in (0, 1):
        assert any(f"rank {rank} resumed at step 20 from its own shard" in text for text in logs), logs[-40:]
    registered = [c for c in stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"] if c["kind"] == "checkpoint"]
    assert [c["step"] for c in registered] == [10, 20, 30, 40]
    for checkpoint in registered:
        path = remote / checkpoint["path"]
        assert verify(path), checkpoint  # every file, node 1's shard among them, as its manifest lists them
        assert {p.name for p in path.iterdir()} == {"shard-0.json", "shard-1.json", "meta.json", "manifest.json"}
    for attempt in run["attempts"]:
        [node1] = [n["worker"] for n in attempt["nodes"] if n["node_rank"] == 1]
        log = (stack.home / f"{node1}.log").read_text()
        assert re.search(rf"uploaded node 1's part of runs/{run_id}/checkpoints/step-\d+ \(2 files\)", log), log[-3000:]
