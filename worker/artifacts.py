"""Where a worker's trainers read and write.

A directory artifact root (the default, or a shared file system such as NFS) is used in place: the
trainer writes `runs/<id>/` under it, the API reads the same files. An fsspec URL (s3://, gs://,
sftp://, ...) cannot be written by a trainer directly, so the worker keeps a local scratch copy
under `$RLPLANE_HOME/scratch`:

    before an attempt   the run's latest complete checkpoint (to resume, maybe written on another
                        node), the runs its spec names (run:<id>[@step]) and its uploaded dataset
                        come down from the root
    after a checkpoint  the directory goes up, its manifest.json last (a reader that sees the
                        manifest sees a complete checkpoint), and only then is it registered
                        with the API; a gang node other than 0 uploads its own shards of a sharded
                        checkpoint (its part directory) and says so for its attempt, and node 0
                        uploads the manifest once every node has (rlplane/node_parts.py)

The attempt that owns a run (rlplane.layout.ATTEMPT_FILE) is written to the run's local directory and, on a
remote root, to the remote one too: a worker whose attempt was ended while it could not hear the API (a
partition) finds another attempt's number there before each upload, uploads nothing more and stops its
trainer, so the two attempts never write the same checkpoints.

The inputs stay in the scratch directory for the next attempt that names them, within the worker's
input_cache_gb (input_cache.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Literal

import fsspec

from rlplane.layout import (
    ATTEMPT_FILE,
    CHECKPOINTS,
    MANIFEST,
    NODE_PART_SUFFIX,
    NODES_SUFFIX,
    STEP_PREFIX,
    beside_step,
    code_snapshot,
    rotated,
    run_checkpoint,
    step_beside,
    step_dir_name,
    step_of,
)
from rlplane.manifest import missing
from rlplane.spec import RunSpec
from worker.input_cache import InputCache
from worker.uploads import Fenced

NODES_QUIET_S = 600.0  # node 0 gives up waiting for the other nodes' shards after this long without one arriving
_CHUNK = 1 << 22  # bytes read at a time from the root while hashing a download


class Damaged(Exception):
    """A file on the artifact root is not what its checkpoint's manifest lists (the message names it, and the fix)."""


logger = logging.getLogger("rlplane.worker")


def is_url(root: str) -> bool:
    return "://" in root and not root.startswith("file://")


class WorkerArtifacts:
    def __init__(self, root: str, scratch: Path, *, holder: str = "worker", cache_bytes: int | None = None) -> None:
        """`holder`: the worker's name, which pins the inputs its attempt uses; `cache_bytes`: the most the inputs
        brought down from a remote root may keep in the scratch directory (None: no limit)."""
        self.url = root
        self.cache: InputCache | None = None
        self._claimed: tuple[str, int] | None = None  # (the run's relative directory, the attempt) of claim()
        self._sent: set[str] = set()  # the files of an upload that was cut short: its retry does not send them again
        if is_url(root):
            self.fs, self.remote_root = fsspec.core.url_to_fs(root)
            self.local_root = scratch.expanduser().resolve()
        else:
            self.fs, self.remote_root = None, ""
            self.local_root = Path(root.removeprefix("file://")).expanduser().resolve()
        self.local_root.mkdir(parents=True, exist_ok=True)
        if self.fs is not None:
            self.cache = InputCache(self.local_root, holder, cache_bytes)

    @property
    def remote(self) -> bool:
        return self.fs is not None

    def run_dir(self, run_id: int) -> tuple[Path, str]:
        """(the run's local directory, its path relative to the artifact root)."""
        relative = f"runs/{run_id}"
        return self.local_root / relative, relative

    def trainer_env(self) -> dict[str, str]:
        """What the trainer resolves run:<id>[@step] and dataset:<id> against (see trainer_core)."""
        return {"RLPLANE_RUNS_DIR": str(self.local_root / "runs"), "RLPLANE_DATASETS_DIR": str(self.local_root / "datasets")}

    def prepare(self, run_id: int, spec: RunSpec, resume_step: int | None | Literal["latest"] = "latest") -> None:
        """Bring down what the attempt needs from a remote root (its inputs pinned in the cache until release()):
        the run's checkpoint of `resume_step` (none, or "latest": the newest complete one, where it is newer than
        every local one), and the runs, dataset and code its spec names; nothing to do for a directory root."""
        if self.cache is None:
            return
        if resume_step == "latest":
            self._latest_checkpoint(f"runs/{run_id}/{CHECKPOINTS}")
        elif resume_step is not None:
            self._download(run_checkpoint(run_id, resume_step))
        directories = [
            f"runs/{r.run_id}/final" if r.step is None else run_checkpoint(r.run_id, r.step) for r in spec.references()
        ]
        source = spec.data.source if spec.data is not None else ""
        if source.startswith("dataset:"):
            directories.append(f"datasets/{source.removeprefix('dataset:')}")
        code = spec.command.code if spec.command is not None else None
        files = [code_snapshot(code.snapshot)] if code is not None and code.snapshot is not None else []
        self.cache.pin(directories + files)
        for relative in directories + files:
            with self.cache.bringing(relative):
                (self._download_file if relative in files else self._download)(relative)
        self.cache.used(directories + files)

    def claim(self, run_id: int, attempt: int, remote: bool = True) -> None:
        """`attempt` owns run `run_id` from now on: an older attempt's trainer writes no checkpoint (its run
        directory's fence) and, on a remote root (unless not `remote`: a gang's node other than 0), an older
        attempt's worker uploads nothing more (publish)."""
        out_dir, relative = self.run_dir(run_id)
        (out_dir / ATTEMPT_FILE).write_text(str(attempt))
        if self.remote and remote:
            self.fs.makedirs(self._remote(relative), exist_ok=True)
            self.fs.pipe_file(self._remote(f"{relative}/{ATTEMPT_FILE}"), str(attempt).encode())
        if self.remote:  # a gang's other nodes check node 0's claim before they upload their shards
            self._claimed = (relative, attempt)

    def release(self) -> None:
        """The attempt is over: its inputs may leave the cache when it is over its limit."""
        if self.cache is not None:
            self.cache.release()

    def publish(self, relative: str) -> bool:
        """Upload `relative` (a checkpoint or export directory, or a file) to a remote root, manifest last.

        False where the trainer deleted it first (it rotated the checkpoint away, train.keep_last, while the
        upload waited behind others or ran): nothing of it is left on the remote root, and it is not to be
        registered."""
        if not self.remote:
            return True
        local = self.local_root / relative
        files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
        files.sort(key=lambda p: p.name == MANIFEST)  # stable: everything else first, in order
        try:
            if not files:
                raise FileNotFoundError(local)
            for path in files:
                if path == files[0] or path.name == MANIFEST:  # before the first byte, and before the commit
                    self._check_claim()
                if path.name == MANIFEST:
                    self._await_other_nodes(local, relative)
                target = self._remote(path.relative_to(self.local_root).as_posix())
                if target in self._sent:
                    continue
                self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                self.fs.put_file(str(path), target)
                self._sent.add(target)
        except FileNotFoundError:
            if local.exists():
                raise
            if self.fs.exists(self._remote(relative)):
                self.fs.rm(self._remote(relative), recursive=True)
            logger.info("skipped %s: the trainer rotated it away before its upload finished", relative)
            return False
        self._sent.clear()
        logger.info("uploaded %s (%d files) to %s", relative, len(files), self.url)
        return True

    def publish_node_part(self, relative: str, node_rank: int) -> bool:
        """Upload a gang node's part of a checkpoint (`relative`: its part directory, NODE_PART_SUFFIX) into the
        checkpoint's directory on the remote root, then say that this node's part of it is up, for this attempt
        (node 0 uploads the manifest once every node has said so)."""
        local = self.local_root / relative
        step = step_beside(local.name, NODE_PART_SUFFIX)
        if step is None or not local.is_dir():
            raise ValueError(f"{relative} is not a node's part of a checkpoint")
        checkpoints = local.parent.relative_to(self.local_root).as_posix()
        checkpoint, nodes = f"{checkpoints}/{step_dir_name(step)}", f"{checkpoints}/{beside_step(step, NODES_SUFFIX)}"
        files = sorted(p for p in local.rglob("*") if p.is_file())
        self._check_claim()
        for path in files:
            target = self._remote(f"{checkpoint}/{path.relative_to(local).as_posix()}")
            self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
            self.fs.put_file(str(path), target)
        assert self._claimed is not None  # a gang's node on a remote root claims before its trainer starts
        said = {"attempt": self._claimed[1], "files": [path.relative_to(local).as_posix() for path in files]}
        self.fs.makedirs(self._remote(nodes), exist_ok=True)
        self.fs.pipe_file(self._remote(f"{nodes}/{node_rank}"), json.dumps(said).encode())
        logger.info("uploaded node %d's part of %s (%d files) to %s", node_rank, checkpoint, len(files), self.url)
        return True

    def _await_other_nodes(self, local: Path, relative: str) -> None:
        """Before a checkpoint's manifest goes up: wait until every file it lists that this node does not hold (the
        other nodes' shards) is up, as the nodes that uploaded them said for this attempt (an earlier attempt's files
        of the same step may be there, and are no sign). Raises when none arrives for NODES_QUIET_S (retried)."""
        absent = set(missing(local)) - {MANIFEST}  # a directory without one (an export, a file) awaits nothing
        if not absent:
            return
        parent, name = relative.rsplit("/", 1)
        nodes = self._remote(f"{parent}/{beside_step(step_of(name), NODES_SUFFIX)}")
        attempt = self._claimed[1] if self._claimed is not None else None
        quiet_since, arrived = time.monotonic(), 0
        while True:
            up: set[str] = set()
            for name in self._ls(nodes):
                said = json.loads(self.fs.cat_file(name))
                if attempt is None or said.get("attempt") == attempt:
                    up.update(said.get("files", []))
            if absent <= up:
                break
            if len(absent & up) > arrived:
                quiet_since, arrived = time.monotonic(), len(absent & up)
            if time.monotonic() - quiet_since > NODES_QUIET_S:
                raise TimeoutError(f"{len(absent - up)} files of {relative} from the other nodes did not arrive")
            time.sleep(0.5)
        self.fs.rm(nodes, recursive=True)

    def _ls(self, remote: str) -> list[str]:
        try:
            return list(self.fs.ls(remote, detail=False))
        except FileNotFoundError:
            return []

    def prune_checkpoints(self, relative: str, keep_last: int) -> None:
        """On a remote root, delete the complete checkpoints under `relative` older than the newest
        `keep_last`, as the trainer rotates its local copies (train.keep_last); manifest first, so a
        reader never finds a half-deleted checkpoint that looks complete."""
        if not self.remote:
            return
        remote = self._remote(relative)
        if not self.fs.exists(remote):
            return
        names = [name.rstrip("/") for name in self.fs.ls(remote, detail=False)]
        steps = sorted((name for name in names if step_of(name) is not None), key=step_of)
        complete = [name for name in steps if self.fs.exists(f"{name}/{MANIFEST}")]
        doomed = set(rotated([step_of(name) for name in complete], keep_last))
        for name in [name for name in complete if step_of(name) in doomed]:
            self.fs.rm_file(f"{name}/{MANIFEST}")
            self.fs.rm(name, recursive=True)
            logger.info("removed %s from %s (rotated: train.keep_last %d)", name, self.url, keep_last)
        # Uploads cut short by a lost worker, older than every checkpoint kept: nothing will finish them.
        # (Uploads run one at a time, after this, so none of these is being written.)
        oldest_kept = complete[-keep_last:][0] if complete[-keep_last:] else None
        for name in steps:
            if name not in complete and oldest_kept is not None and step_of(name) < step_of(oldest_kept):
                self.fs.rm(name, recursive=True)
                logger.info("removed %s from %s (an unfinished upload older than the checkpoints kept)", name, self.url)
        for name in names:  # what a gang's nodes said of checkpoints whose manifests never went up
            step = step_beside(name, NODES_SUFFIX)
            if step is not None and oldest_kept is not None and step < step_of(oldest_kept):
                self.fs.rm(name, recursive=True)

    def _check_claim(self) -> None:
        """Raise Fenced when another attempt claimed the run this worker claimed (none claimed: nothing to check)."""
        if self._claimed is None:
            return
        relative, attempt = self._claimed
        try:
            current = int(self.fs.cat_file(self._remote(f"{relative}/{ATTEMPT_FILE}")))
        except (FileNotFoundError, ValueError):  # none (written by an older worker), or not ours to read
            return
        if current != attempt:
            raise Fenced(f"attempt {attempt} was ended: attempt {current} owns {relative} on {self.url} now")

    def _remote(self, relative: str) -> str:
        return f"{self.remote_root.rstrip('/')}/{relative}"

    def _download_file(self, relative: str) -> None:
        """Copy one remote file down unless it is here (a code snapshot: its name is its content's hash)."""
        local = self.local_root / relative
        if local.is_file() or not self.fs.exists(self._remote(relative)):
            return
        local.parent.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(local.name + ".partial")
        self.fs.get_file(self._remote(relative), str(partial))
        partial.replace(local)

    def _download(self, relative: str) -> None:
        """Copy a remote directory down unless a complete copy is already here (a re-run on this node). Each file its
        manifest lists is checked against the listed sha256 as it comes down (Damaged where it differs)."""
        local = self.local_root / relative
        remote = self._remote(relative)
        if not self.fs.exists(remote):
            return  # the trainer reports what is missing, with the fix
        manifest = self._cat(f"{remote.rstrip('/')}/{MANIFEST}")
        listed = _files_of(manifest)
        if local.is_dir() and (local / MANIFEST).exists() and manifest == (local / MANIFEST).read_bytes():
            # The registered checkpoint, not another attempt's copy of the same step (that one is replaced whole).
            # A checkpoint this node wrote: where it is a gang's, the other nodes' shards come down beside its own.
            for name in missing(local):
                self._fetch(relative, name, local, listed.get(name))
            return
        if local.is_dir() and not (local / MANIFEST).exists() and any(local.iterdir()):
            return
        partial = local.with_name(local.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        try:
            for path in self.fs.find(remote):
                name = path[len(remote.rstrip("/")) + 1 :]
                self._fetch(relative, name, partial, listed.get(name))
        except Damaged:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        shutil.rmtree(local, ignore_errors=True)
        partial.rename(local)
        logger.info("downloaded %s from %s", relative, self.url)

    def _cat(self, remote: str) -> bytes | None:
        try:
            return self.fs.cat_file(remote)
        except FileNotFoundError:
            return None

    def _fetch(self, relative: str, name: str, into: Path, entry: dict | None) -> None:
        """Copy one file of `relative` into `into`; one its manifest lists is hashed as it comes, and refused (deleted,
        Damaged) where it is not what the manifest says: a resume never starts from bytes the run did not write."""
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        source = f"{self._remote(relative).rstrip('/')}/{name}"
        if entry is None:
            self.fs.get_file(source, str(target))
            return
        digest, size = hashlib.sha256(), 0
        with self.fs.open(source, "rb") as reading, target.open("wb") as writing:
            while chunk := reading.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                writing.write(chunk)
        if digest.hexdigest() != entry.get("sha256") or size != entry.get("size"):
            target.unlink()
            raise Damaged(
                f"{relative}/{name} on {self.url} is not the file its manifest lists ({size} bytes, sha256 "
                f"{digest.hexdigest()[:12]}..., where the manifest says {entry.get('size')} bytes, "
                f"{str(entry.get('sha256'))[:12]}...): that copy was damaged or overwritten. Delete {relative} there to "
                "resume from the checkpoint before it"
            )

    def _latest_checkpoint(self, relative: str) -> None:
        """The newest remote checkpoint with a manifest, if it is newer than every local one."""
        remote = self._remote(relative)
        if not self.fs.exists(remote):
            return
        steps = sorted(
            name.rstrip("/").rsplit("/", 1)[-1]
            for name in self.fs.ls(remote, detail=False)
            if self.fs.exists(f"{name.rstrip('/')}/{MANIFEST}")
        )
        local = self.local_root / relative
        have = sorted(p.parent.name for p in local.glob(f"{STEP_PREFIX}*/{MANIFEST}")) if local.is_dir() else []
        if steps and (not have or steps[-1] > have[-1]):
            self._download(f"{relative}/{steps[-1]}")


def _files_of(manifest: bytes | None) -> dict[str, dict]:
    """The files a manifest lists, with size and sha256 ({} for none, or one that does not parse)."""
    try:
        document = json.loads(manifest) if manifest is not None else None
    except ValueError:
        return {}
    files = document.get("files") if isinstance(document, dict) else None
    return files if isinstance(files, dict) else {}
