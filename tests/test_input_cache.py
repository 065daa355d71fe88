"""The inputs a worker brings down from a remote artifact root stay in its scratch directory for later runs, within
its input_cache_gb: the least recently used go first, never one that a live attempt (of any worker sharing the
directory) uses. fsspec's in-memory file system stands in for s3://; the scratch directory is real."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import fsspec

from rlplane.spec import parse_spec
from tests.harness.factories import spec
from worker.artifacts import WorkerArtifacts

KB = 1000


def dataset_run(dataset: int):
    return parse_spec(spec(data={"source": f"dataset:{dataset}"}))


def cached(scratch: Path) -> list[str]:
    return sorted(p.name for p in (scratch / "datasets").iterdir()) if (scratch / "datasets").exists() else []


def test_inputs_stay_cached_within_the_limit_least_recently_used_first(tmp_path: Path) -> None:
    root = f"memory://cache-{uuid.uuid4().hex[:8]}"
    fs = fsspec.filesystem("memory")
    for dataset in (1, 2, 3):
        fs.pipe(f"{root.removeprefix('memory://')}/datasets/{dataset}/rows.jsonl", b"x" * KB)
    scratch = tmp_path / "scratch"
    w1 = WorkerArtifacts(root, scratch, holder="w1", cache_bytes=int(2.5 * KB))
    w2 = WorkerArtifacts(root, scratch, holder="w2", cache_bytes=int(2.5 * KB))  # a second worker on the same disk

    def attempt(artifacts: WorkerArtifacts, dataset: int) -> None:
        artifacts.prepare(100 + dataset, dataset_run(dataset))
        assert (scratch / f"datasets/{dataset}/rows.jsonl").read_bytes() == b"x" * KB
        artifacts.release()

    attempt(w1, 1)
    attempt(w1, 2)
    assert cached(scratch) == ["1", "2"]  # 2 KB: within the limit
    attempt(w1, 1)  # used again: now 2 is the least recently used
    attempt(w1, 3)  # 3 KB: over the limit
    assert cached(scratch) == ["1", "3"]
    index = json.loads((scratch / ".inputs/index.json").read_text())
    assert sorted(index) == ["datasets/1", "datasets/3"] and {e["bytes"] for e in index.values()} == {KB}

    # w2's attempt on dataset 1 is running (this process is alive): 1 is not removed while it is the least recently used
    w2.prepare(201, dataset_run(1))
    attempt(w1, 2)  # 3 goes (least recently used)
    assert cached(scratch) == ["1", "2"]
    attempt(w1, 3)  # 1 is the least recently used, but pinned: 2 goes
    assert cached(scratch) == ["1", "3"]
    w2.release()  # within the limit: nothing more goes
    assert cached(scratch) == ["1", "3"]

    # a pin left by a killed worker (its process is gone) holds nothing
    gone = 2**22 + 1  # above Linux's largest pid_max: no process has it
    (scratch / ".inputs/pins/w9.json").write_text(json.dumps({"pid": gone, "inputs": ["datasets/1"]}))
    attempt(w1, 2)
    assert cached(scratch) == ["2", "3"]


def test_an_attempt_keeps_inputs_larger_than_the_limit_until_it_ends(tmp_path: Path) -> None:
    """The limit never takes an input from under its attempt; what is over it goes when the attempt ends. Without a
    limit nothing goes."""
    root = f"memory://cache-{uuid.uuid4().hex[:8]}"
    fsspec.filesystem("memory").pipe(f"{root.removeprefix('memory://')}/datasets/7/rows.jsonl", b"x" * KB)
    small = WorkerArtifacts(root, tmp_path / "small", holder="gpu/node-1@host", cache_bytes=KB // 2)  # any name
    small.prepare(1, dataset_run(7))
    assert cached(tmp_path / "small") == ["7"] and [p.name for p in (tmp_path / "small/.inputs/pins").iterdir()] == [
        "gpu_node-1_host.json"
    ]
    small.release()
    assert cached(tmp_path / "small") == []
    unlimited = WorkerArtifacts(root, tmp_path / "unlimited", holder="w1")
    unlimited.prepare(1, dataset_run(7))
    unlimited.release()
    assert cached(tmp_path / "unlimited") == ["7"]
