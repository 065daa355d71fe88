"""An fsspec artifact root (sftp:// here, s3:// in production) shared by the API and workers on
different nodes: a real SFTP server (tests/sftp_server.py), an `rlplane api` process, `rlplane worker`
processes each with its own RLPLANE_HOME (its own local scratch, as on separate machines), Redis and
Postgres. The trainer never sees the URL: the worker brings inputs down and sends checkpoints up."""

from __future__ import annotations

import json
import os
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
    run_id = stack.submit({**LONG, "data": {"source": dataset["source"], "eval_fraction": 0.1}})
    stack.wait_step(run_id, 250)
    uploaded = remote / f"runs/{run_id}/checkpoints/step-000200/manifest.json"
    deadline = time.monotonic() + 30  # uploads run beside the training, in a thread of their own
    while not uploaded.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert uploaded.exists(), "checkpoints go up as they are made"
    os.killpg(first.pid, signal.SIGKILL)
    second = stack.start_worker("w2", home=node2)  # a node that never saw node1's disk
    run = stack.wait_status(run_id, {"succeeded", "failed"}, timeout=240)
    assert run["status"] == "succeeded", run["status_reason"]
    assert [a["worker"] for a in run["attempts"]] == ["w1", "w2"]
    logs = [line["text"] for line in stack.http.get(f"/runs/{run_id}/logs", params={"limit": 1000}).json()["data"]]
    assert any("resumed from" in text for text in logs), "node2 did not resume from the checkpoint it downloaded"
    assert_metrics_once(stack, run_id)
    assert (node2 / "scratch" / f"datasets/{dataset['id']}/arith.jsonl").read_text() == upload  # inputs stay cached
    scratch = node2 / "scratch" / f"runs/{run_id}"
    deadline = time.monotonic() + 30  # removed right after the final status is sent
    while scratch.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not scratch.exists(), "the ended run's scratch copy was left on the node"

    # Every registered checkpoint is complete on the remote root, and the API serves it from there.
    # Rotation (train.keep_last, 3 by default) reaches the remote copies and the API's records.
    registered = stack.http.get(f"/runs/{run_id}/checkpoints").json()["data"]
    assert [c["step"] for c in registered if c["kind"] == "checkpoint"] == [400, 500, 600]
    assert sorted(p.name for p in (remote / f"runs/{run_id}/checkpoints").iterdir()) == [
        "step-000400",
        "step-000500",
        "step-000600",
    ]
    for checkpoint in registered:
        assert (remote / checkpoint["path"] / "manifest.json").exists(), checkpoint
    weights = stack.http.get(f"/runs/{run_id}/checkpoints/600/files/model.safetensors", params={"kind": "export"})
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
