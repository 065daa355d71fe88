"""Checkpoint uploads run beside the forwarding: a slow or failing upload holds back neither metrics
nor the worker's checks, uploads keep the trainer's order, and a failed one is retried."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

from sqlalchemy import func, select

from api.models import Metric
from rlplane.reporting.http import ControlPlaneSink
from tests.harness.factories import ADMIN_TOKEN, create_run
from worker.artifacts import WorkerArtifacts
from worker.forward import Forwarder
from worker.uploads import Uploads


class Store:
    """An upload target that blocks until let go, and fails its first `failures` calls."""

    def __init__(self, failures: int = 0) -> None:
        self.failures, self.uploaded, self.calls = failures, [], 0
        self.go = threading.Event()

    def publish(self, relative: str) -> None:
        self.calls += 1
        self.go.wait(10)
        if self.failures:
            self.failures -= 1
            raise OSError("the store is down")
        self.uploaded.append(relative)


def wait_for(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_uploads_keep_order_and_retry_a_failure() -> None:
    store = Store(failures=1)
    uploads = Uploads(store.publish, "runs/1", retry_s=0.05)
    uploads.add([{"path": "checkpoints/step-000002"}, {"path": "checkpoints/step-000004"}])
    assert not uploads.idle and uploads.done() == []
    store.go.set()
    wait_for(lambda: len(store.uploaded) == 2)
    assert store.uploaded == ["runs/1/checkpoints/step-000002", "runs/1/checkpoints/step-000004"] and store.calls == 3
    assert [e["path"] for e in uploads.done()] == ["checkpoints/step-000002", "checkpoints/step-000004"]
    assert uploads.idle and not uploads.failing
    uploads.close()


def test_a_failing_store_is_not_waited_for_an_uploading_one_is() -> None:
    store = Store(failures=10**6)
    uploads = Uploads(store.publish, "runs/1", retry_s=0.05)
    uploads.add([{"path": "final"}])
    assert uploads.progressing  # under way, not failed yet
    store.go.set()
    wait_for(lambda: uploads.failing)
    assert not uploads.progressing and not uploads.idle
    uploads.close()


def test_metrics_flow_while_a_checkpoint_uploads(client, db, tmp_path: Path) -> None:
    run_id = create_run(client)["id"]
    sink = ControlPlaneSink("http://testserver", ADMIN_TOKEN, run_id, 0, client=client, backoff=0)
    store = Store()
    forwarder = Forwarder(sink, tmp_path, f"runs/{run_id}", 0, publish=store.publish)
    event = {"type": "checkpoint", "step": 1, "path": "checkpoints/step-000001", "size": 1, "sha256": "0" * 64, "metadata": {}}
    (tmp_path / "events.jsonl").write_text(json.dumps(event) + "\n")
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"key": "train/loss", "step": 1, "value": 2.0, "time": 1.0}) + "\n")
    started = time.monotonic()
    assert forwarder.poll() is False  # the upload is still going
    assert time.monotonic() - started < 5 and forwarder.uploading
    assert db.scalar(select(func.count()).select_from(Metric).where(Metric.run_id == run_id)) == 1
    store.go.set()
    wait_for(lambda: store.uploaded == [f"runs/{run_id}/checkpoints/step-000001"])
    forwarder.poll()  # collects the finished upload and registers it (refused here: no such directory)
    assert forwarder.uploads is not None and forwarder.uploads.idle
    forwarder.close()


def test_a_checkpoint_rotated_away_before_its_upload_is_not_registered() -> None:
    """publish says False (the trainer deleted it first): nothing to register, but the remote copies are still pruned."""
    pruned = []
    uploads = Uploads(lambda relative: not relative.endswith("step-000002"), "runs/1", uploaded=pruned.append)
    uploads.add([{"path": "checkpoints/step-000002"}, {"path": "checkpoints/step-000004"}])
    wait_for(lambda: len(pruned) == 2)
    assert [e["path"] for e in uploads.done()] == ["checkpoints/step-000004"]
    assert [e["path"] for e in pruned] == ["checkpoints/step-000002", "checkpoints/step-000004"]
    uploads.close()


def remote_root(tmp_path: Path, name: str) -> WorkerArtifacts:
    """A remote artifact root in fsspec's in-memory file system (its own folder per test)."""
    return WorkerArtifacts(f"memory://{name}-{tmp_path.name}", tmp_path / "scratch")


def write_checkpoint(root: Path, step: int) -> str:
    relative = f"runs/1/checkpoints/step-{step:06d}"
    (root / relative / "model").mkdir(parents=True)
    for name in ("model/model.safetensors", "trainer_state.json", "manifest.json"):
        (root / relative / name).write_text(name)
    return relative


def test_a_checkpoint_deleted_while_it_uploads_leaves_nothing_behind(tmp_path: Path, monkeypatch) -> None:
    """The trainer rotates a checkpoint away (train.keep_last) while its upload runs: the half-uploaded copy goes."""
    artifacts = remote_root(tmp_path, "rotated")
    relative = write_checkpoint(artifacts.local_root, 800)
    put_file = artifacts.fs.put_file

    def put_then_rotate(local: str, remote: str) -> None:
        put_file(local, remote)
        shutil.rmtree(artifacts.local_root / relative, ignore_errors=True)  # the trainer's rotation, mid-upload

    monkeypatch.setattr(artifacts.fs, "put_file", put_then_rotate)
    assert artifacts.publish(relative) is False
    assert not artifacts.fs.exists(artifacts._remote(relative))
    assert artifacts.publish(relative) is False  # gone before its upload began: nothing uploaded either
    assert not artifacts.fs.exists(artifacts._remote(relative))


def test_pruning_keeps_the_newest_and_drops_unfinished_older_uploads(tmp_path: Path) -> None:
    """keep_last complete checkpoints stay; older complete ones and older manifest-less leftovers (a lost worker's
    cut-short upload) go; a manifest-less one newer than those kept (being written) stays."""
    artifacts = remote_root(tmp_path, "prune")
    for step in (100, 200, 300, 400, 500):
        artifacts.publish(write_checkpoint(artifacts.local_root, step))
    remote = artifacts._remote("runs/1/checkpoints")
    for step in (150, 600):  # uploads without their manifest
        artifacts.fs.pipe(f"{remote}/step-{step:06d}/model/model.safetensors", b"partial")
    artifacts.prune_checkpoints("runs/1/checkpoints", keep_last=3)
    left = sorted(name.rstrip("/").rsplit("/", 1)[-1] for name in artifacts.fs.ls(remote, detail=False))
    assert left == ["step-000300", "step-000400", "step-000500", "step-000600"]
