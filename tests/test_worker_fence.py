"""Which attempt's files count, where each node keeps its own copy of the run directory (a remote artifact root):
a worker whose attempt was ended while it could not hear the API (a partition) writes nothing more of the run on the
remote root, the next attempt's claim being there, read before each upload; and a gang's node resumes from the
checkpoint the API registered, not from a later one of its own copy. fsspec's in-memory file system stands in for
s3://; the scratch directories, one per node, are real. (On a shared directory the trainer itself stops at the claim:
tests/test_checkpoint.py and tests/test_worker_runs.py.)"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import fsspec
import pytest

from worker.artifacts import Damaged, WorkerArtifacts
from worker.uploads import Fenced, Uploads


def checkpoint(artifacts: WorkerArtifacts, run_id: int, step: int) -> str:
    """A checkpoint the trainer wrote into the worker's scratch copy of the run; its path relative to the root."""
    relative = f"runs/{run_id}/checkpoints/step-{step:06d}"
    local = artifacts.local_root / relative
    local.mkdir(parents=True)
    (local / "model.safetensors").write_bytes(b"w" * 64)
    (local / "manifest.json").write_text("{}")
    return relative


def test_an_ended_attempt_uploads_nothing_once_the_next_one_claimed_the_run(tmp_path: Path) -> None:
    root = f"memory://fence-{uuid.uuid4().hex[:8]}"
    fs, base = fsspec.filesystem("memory"), root.removeprefix("memory:/")
    old = WorkerArtifacts(root, tmp_path / "node-a")
    new = WorkerArtifacts(root, tmp_path / "node-b")
    for artifacts in (old, new):
        artifacts.run_dir(7)[0].mkdir(parents=True)
    old.claim(7, 1)
    assert (old.run_dir(7)[0] / ".attempt").read_text() == "1" and fs.cat(f"{base}/runs/7/.attempt") == b"1"
    assert old.publish(checkpoint(old, 7, 10)) is True
    new.claim(7, 2)  # the API found attempt 1's worker silent; attempt 2 started on another node
    assert new.publish(checkpoint(new, 7, 20)) is True
    with pytest.raises(Fenced, match=f"attempt 1 was ended: attempt 2 owns runs/7 on {root} now"):
        old.publish(checkpoint(old, 7, 20))
    with pytest.raises(Fenced):
        old.publish(checkpoint(old, 7, 30))
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{base}/runs/7/checkpoints", detail=False)) == [
        "step-000010",
        "step-000020",
    ]
    assert fs.cat(f"{base}/runs/7/checkpoints/step-000020/model.safetensors") == b"w" * 64  # attempt 2's, untouched

    # The upload thread stops for good and says why; the worker then stops its trainer (worker/supervise.py).
    uploads = Uploads(old.publish, "runs/7", retry_s=0.05)
    uploads.add([{"path": "checkpoints/step-000030", "step": 30, "metadata": {}}])
    deadline = time.monotonic() + 5
    while uploads.fenced is None:
        assert time.monotonic() < deadline, "the refused upload was not given up"
        time.sleep(0.01)
    assert "attempt 2 owns runs/7" in uploads.fenced and not uploads.progressing and uploads.done() == []
    uploads.close()


def test_a_worker_that_finds_the_run_claimed_on_the_remote_root_stops_its_trainer(tmp_path: Path) -> None:
    """The supervising loop sees the refused upload and stops the trainer's process group: the attempt is over
    (Superseded), nothing is sent to the API (its address here answers nothing)."""
    from rlplane.reports import ReportSender
    from rlplane.spec import parse_spec
    from tests.harness.factories import spec
    from tests.harness.worker_stack import alive
    from worker.client import Superseded, WorkerApi
    from worker.forward import Forwarder
    from worker.holding import Holding
    from worker.launcher import Trainer
    from worker.settings import WorkerSettings
    from worker.watch import watch

    settings = WorkerSettings(home=tmp_path, poll_s=0.05, api_url="http://127.0.0.1:9")
    sink = ReportSender(settings.api_url, "", 7, 1, max_retries=0)
    forwarder = Forwarder(sink, tmp_path, "runs/7", 1, publish=lambda _relative: None)
    trainer = Trainer(["sleep", "60"], tmp_path, forwarder.add_line)
    assert forwarder.uploads is not None
    forwarder.uploads.fenced = "attempt 1 was ended: attempt 2 owns runs/7 on s3://bucket now"
    with pytest.raises(Superseded, match="attempt 2 owns runs/7"):
        watch(settings, WorkerApi.connect(settings.api_url, ""), Holding(), 7, 1, parse_spec(spec()), trainer, forwarder)
    deadline = time.monotonic() + 10
    while alive(trainer.process.pid):
        assert time.monotonic() < deadline, "the trainer outlived its fenced attempt"
        time.sleep(0.05)
    sink.close()


def test_a_gang_node_with_its_own_copy_resumes_from_the_registered_checkpoint_only(tmp_path: Path) -> None:
    """A node's copy of the run directory may hold checkpoints an earlier attempt wrote there and never uploaded: the
    gang resumes from the one the API registered, every node alike, and the later ones go (the trainer writes those
    steps again; it refuses to overwrite a checkpoint), as do its parts of checkpoints it never uploaded. Where none is
    registered, the gang starts afresh; a registered one that lacks a file its manifest lists is refused."""
    from worker.attempt import NodeRefused, resume_point

    def written(*steps: int, files: dict | None = None) -> Path:
        out = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
        for step in steps:
            (out / "checkpoints" / f"step-{step:06d}").mkdir(parents=True)
            (out / "checkpoints" / f"step-{step:06d}" / "manifest.json").write_text(json.dumps({"files": files or {}}))
        return out

    out = written(10, 20, 30)
    (out / "checkpoints" / ".step-000030.node-part").mkdir()
    assert resume_point(out, 20, True, "s3://b") == out / "checkpoints" / "step-000020"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000010", "step-000020"]
    shards_elsewhere = written(10, files={"dcp/__1_0.safetensors": {"size": 8, "sha256": "0" * 64}})
    with pytest.raises(NodeRefused, match="registered checkpoint, step 10, is not complete on s3://b"):
        resume_point(shards_elsewhere, 10, True, "s3://b")
    fresh = written(10)
    assert resume_point(fresh, None, True, "s3://b") is None and not list((fresh / "checkpoints").iterdir())
    with pytest.raises(NodeRefused, match="registered checkpoint, step 40, is not complete on s3://b"):
        resume_point(written(10, 20), 40, True, "s3://b")
    one_node = written(10, 20)  # one worker (or a shared directory): its latest, whatever the API registered
    assert resume_point(one_node, 10, False, "s3://b") == one_node and len(list((one_node / "checkpoints").iterdir())) == 2


def test_node_0_commits_a_checkpoint_once_every_node_uploaded_its_shards_for_this_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gang's sharded checkpoint on a remote root: each node's worker uploads its own shards (its part directory)
    and says so for its attempt; node 0's uploads the manifest only then. The same step's shard and word left by an
    earlier attempt do not count. Node 0's copy, which lacks node 1's shard, fetches only that to resume; a part
    that never arrives fails the upload (retried) after worker.artifacts.NODES_QUIET_S without news. A copy of the same
    step that another attempt left on node 0 is replaced by the registered one. Every file that comes down is checked
    against the manifest's sha256."""
    import threading

    import worker.artifacts
    from rlplane.manifest import missing, read_manifest, sha256_file, write_manifest

    root = f"memory://parts-{uuid.uuid4().hex[:8]}"
    fs, base = fsspec.filesystem("memory"), root.removeprefix("memory:/")
    node0, node1 = WorkerArtifacts(root, tmp_path / "node-0"), WorkerArtifacts(root, tmp_path / "node-1")
    for artifacts in (node0, node1):
        artifacts.run_dir(7)[0].mkdir(parents=True)
    node0.claim(7, 2)
    node1.claim(7, 2, remote=False)
    fs.pipe(f"{base}/runs/7/checkpoints/step-000020/dcp/__1_0.safetensors", b"attempt 1's")
    fs.pipe(
        f"{base}/runs/7/checkpoints/.step-000020.nodes/1", json.dumps({"attempt": 1, "files": ["dcp/__1_0.safetensors"]}).encode()
    )

    part = node1.local_root / "runs/7/checkpoints/.step-000020.node-part"
    (part / "dcp").mkdir(parents=True)
    (part / "dcp/__1_0.safetensors").write_bytes(b"node 1's shard")
    local = node0.local_root / "runs/7/checkpoints/step-000020"
    (local / "dcp").mkdir(parents=True)
    (local / "dcp/__0_0.safetensors").write_bytes(b"node 0's shard")
    shard1 = {
        "size": part.joinpath("dcp/__1_0.safetensors").stat().st_size,
        "sha256": sha256_file(part / "dcp/__1_0.safetensors"),
    }
    write_manifest(local, 20, elsewhere={"dcp/__1_0.safetensors": shard1})

    published: list[bool] = []
    thread = threading.Thread(target=lambda: published.append(node0.publish("runs/7/checkpoints/step-000020")))
    thread.start()
    time.sleep(1.0)
    assert thread.is_alive() and not fs.exists(f"{base}/runs/7/checkpoints/step-000020/manifest.json")
    assert fs.cat(f"{base}/runs/7/checkpoints/step-000020/dcp/__0_0.safetensors") == b"node 0's shard"
    assert node1.publish_node_part("runs/7/checkpoints/.step-000020.node-part", 1) is True
    thread.join(timeout=10)
    assert published == [True] and fs.exists(f"{base}/runs/7/checkpoints/step-000020/manifest.json")
    assert fs.cat(f"{base}/runs/7/checkpoints/step-000020/dcp/__1_0.safetensors") == b"node 1's shard"
    assert not fs.exists(f"{base}/runs/7/checkpoints/.step-000020.nodes")  # what the nodes said goes with the commit

    assert missing(local) == ["dcp/__1_0.safetensors"]
    node0._download("runs/7/checkpoints/step-000020")
    manifest = read_manifest(local)
    assert manifest is not None and not missing(local)
    assert all(sha256_file(local / name) == entry["sha256"] for name, entry in manifest["files"].items())
    # Another attempt's copy of the same step on this node (never uploaded) is replaced, not topped up.
    (local / "dcp/__0_0.safetensors").write_bytes(b"an earlier attempt's shard")
    write_manifest(local, 20)
    node0._download("runs/7/checkpoints/step-000020")
    assert (local / "dcp/__0_0.safetensors").read_bytes() == b"node 0's shard" and read_manifest(local) == manifest

    monkeypatch.setattr(worker.artifacts, "NODES_QUIET_S", 0.3)
    (local.parent / "step-000030/dcp").mkdir(parents=True)
    (local.parent / "step-000030/dcp/__0_0.safetensors").write_bytes(b"node 0's")
    write_manifest(local.parent / "step-000030", 30, elsewhere={"dcp/__1_0.safetensors": shard1})
    with pytest.raises(TimeoutError, match="1 files of runs/7/checkpoints/step-000030 from the other nodes did not arrive"):
        node0.publish("runs/7/checkpoints/step-000030")
    assert not fs.exists(f"{base}/runs/7/checkpoints/step-000030/manifest.json")

    # A shard overwritten on the root with bytes of the same size: a node bringing the checkpoint down refuses it,
    # naming the file, and keeps nothing of it; the worker then fails the run with that (worker/supervise.py).
    fs.pipe(f"{base}/runs/7/checkpoints/step-000020/dcp/__1_0.safetensors", b"node 1's SHARD")
    node2 = WorkerArtifacts(root, tmp_path / "node-2")
    with pytest.raises(Damaged, match=r"runs/7/checkpoints/step-000020/dcp/__1_0.safetensors on memory://.* is not the file"):
        node2._download("runs/7/checkpoints/step-000020")
    assert not list((node2.local_root / "runs/7/checkpoints").iterdir())
