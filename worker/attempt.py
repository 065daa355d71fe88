"""One attempt of a run on this worker, in the phases every worker goes through, whichever executor started it (a
worker kept on a node, or a Slurm job's pilot: api/executors/):

    lease      worker/supervise.py: the run's lease, or a gang's node slot (join, and the rendezvous)
    prepare    Attempt.prepare: the run directory, the spec file and the reports' channel; the inputs brought down,
               the checkpoint to resume from, the run's status, the fence
    launch     Attempt.launch: the trainer's (or the user's script's) command, started as a process group
    supervise  worker/watch.py: reports forwarded, cancel, hang, fence and hand-back acted on until it exits
    settle     worker/settle.py: everything reported and uploaded, then the attempt's end told to the API

On a remote artifact root each node of a gang has its own copy of the run directory: every node resumes from the
checkpoint the API registered, and each node's worker uploads its own node's shards of a sharded checkpoint, node 0's
the manifest once all are up (rlplane/node_parts.py).
"""

from __future__ import annotations

import json
import logging
import shutil
from functools import partial
from pathlib import Path
from typing import Any

from rlplane.layout import (
    ATTEMPT_ENV,
    CHECKPOINTS,
    HAND_BACK_FILE,
    RUN_DIR_PER_NODE_ENV,
    STEP_PREFIX,
    STOP_FILE,
    has_checkpoint,
    node_parts,
    step_dir_name,
    step_of,
)
from rlplane.manifest import missing
from rlplane.reports import ReportSender
from rlplane.spec import RunSpec, dump_spec
from rlplane.wire import NodeEnd, StatusUpdate
from worker.artifacts import Damaged, WorkerArtifacts
from worker.client import Superseded, WorkerApi
from worker.command import CommandError, command_argv, command_cwd, command_env
from worker.forks import ForkServer
from worker.forward import Forwarder
from worker.holding import Holding
from worker.launcher import NodePlace, Trainer, processes_per_node, trainer_command
from worker.settings import WorkerSettings
from worker.settle import end_unstarted
from worker.watch import watch, watch_node

logger = logging.getLogger("rlplane.worker")


class NodeRefused(Exception):
    """This worker cannot take its node of the gang (it says why; the attempt ends and a new gang is granted)."""


class Unstarted(Exception):
    """The attempt ended before its trainer started; `outcome` says how (cancelled, failed on its inputs)."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


class Attempt:
    """Attempt `number` of run `run_id` on this worker: its only worker's, or one node's of a gang (`place`).
    `registered`: a gang's newest registered checkpoint (the API's word, the same for every node); `env`: for the
    trainer, beside what every trainer is told; `forks`: the worker's forkserver, which starts a CPU run's one trainer
    process (worker/forks.py)."""

    def __init__(
        self,
        settings: WorkerSettings,
        client: WorkerApi,
        holding: Holding,
        run_id: int,
        number: int,
        spec: RunSpec,
        place: NodePlace | None,
        registered: int | None = None,
        env: dict[str, str] | None = None,
        forks: ForkServer | None = None,
    ) -> None:
        self.settings, self.client, self.holding, self.forks = settings, client, holding, forks
        self.run_id, self.number, self.spec, self.place = run_id, number, spec, place
        self.registered, self.env = registered, env or {}
        self.reports = place is None or place.node_rank == 0  # who reports the run: its only worker, or node 0
        cache_bytes = None if settings.input_cache_gb is None else int(settings.input_cache_gb * 1e9)
        self.artifacts = WorkerArtifacts(
            settings.artifact_root, settings.home / "scratch", holder=settings.name, cache_bytes=cache_bytes
        )
        # A gang on a remote root: each node has its own copy of the run directory, so every node resumes from the one
        # checkpoint the API registered (node 0's copy may hold a newer one it never uploaded), brought down by each.
        self.per_node = place is not None and self.artifacts.remote

    def run(self) -> str:
        """Every phase after the lease; how the attempt ended (for logs and tests)."""
        self.open()
        try:
            try:
                resume_from = self.prepare()
                trainer = self.launch(resume_from)
            except Unstarted as stopped:
                return stopped.outcome
            return self.supervise(trainer)
        except NodeRefused as exc:
            refused = NodeEnd(exit_code=None, reason=f"{self.settings.name}: {exc}")
            self.client.end_node(self.run_id, self.number, self.place.node_rank, refused)
            return "lost"
        except Superseded as exc:
            logger.warning("run=%d attempt=%d superseded: %s", self.run_id, self.number, exc)
            return "superseded"
        finally:
            self.close()

    def open(self) -> None:
        """The run directory, the spec the trainer reads, and the channel its reports take to the API."""
        settings, spec, place, number = self.settings, self.spec, self.place, self.number
        self.out_dir, self.relative = self.artifacts.run_dir(self.run_id)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        name = f"spec-attempt-{number}.json" if self.reports else f"spec-attempt-{number}-node-{place.node_rank}.json"
        self.spec_path = self.out_dir / name
        self.spec_path.write_text(json.dumps(dump_spec(spec)))
        spool = self.out_dir / (".spool" if self.reports else f".spool-node-{place.node_rank}")  # the directory may be shared
        self.sink = ReportSender(
            settings.api_url, settings.token or "", self.run_id, number, spool_dir=spool, max_retries=1, backoff=0.5
        )
        publish, uploaded = None, None  # a directory root: the API reads the trainer's files in place
        if self.artifacts.remote and self.reports:
            publish, uploaded = self.artifacts.publish, self._rotate_remote
        elif self.artifacts.remote:  # a gang's node other than 0: it uploads its own shards of each checkpoint
            publish, uploaded = partial(self.artifacts.publish_node_part, node_rank=place.node_rank), self._drop_local_copy
        self.forwarder = Forwarder(
            self.sink, self.out_dir, self.relative, number, publish=publish, uploaded=uploaded, reports=self.reports
        )
        self.holding.hold(self.run_id, number)

    def _rotate_remote(self, event: dict[str, Any]) -> None:
        """The remote copies follow the trainer's rotation of its local ones (train.keep_last)."""
        if event["metadata"].get("kind") != "export":
            self.artifacts.prune_checkpoints(f"{self.relative}/{CHECKPOINTS}", self.spec.train.keep_last)
            if self.per_node:  # node 0's copy lacks the other nodes' shards: the trainer cannot rotate it, nor resume it
                self._drop_local_copy(event)

    def _drop_local_copy(self, event: dict[str, Any]) -> None:
        shutil.rmtree(self.out_dir / event["path"], ignore_errors=True)

    def prepare(self) -> Path | None:
        """The inputs brought down (a remote root: the checkpoint to resume, the runs and dataset it names), the run's
        status told, the fence claimed; what the trainer resumes from (None: a fresh start)."""
        client, run_id, number, place = self.client, self.run_id, self.number, self.place
        try:
            self.artifacts.prepare(run_id, self.spec, self.registered if self.per_node else "latest")
        except Damaged as exc:  # another try would find the same bytes: the run fails, saying which and what to do
            self._unstartable(str(exc))
        resume_from = resume_point(self.out_dir, self.registered, self.per_node, self.artifacts.url)
        where = f"attempt {number} on {self.settings.name}" + (f" (node {place.node_rank} of {place.nodes})" if place else "")
        self.where = where + (" (resuming)" if resume_from is not None else "")
        if self.reports:
            said = client.status(run_id, StatusUpdate(attempt=number, status="running", reason=self.where))
            if said["status"] == "cancelling":
                client.status(
                    run_id, StatusUpdate(attempt=number, status="cancelled", reason="cancelled before its trainer started")
                )
                logger.info("run=%d attempt=%d cancelled before its trainer started", run_id, number)
                raise Unstarted("cancelled")
        if self.reports or self.per_node:  # a directory every node shares is node 0's to claim
            for answered in (HAND_BACK_FILE, STOP_FILE):  # the last attempt's requests
                (self.out_dir / answered).unlink(missing_ok=True)
            # the fence: an older attempt's trainer stops and its worker uploads nothing
            self.artifacts.claim(run_id, number, remote=self.reports)
        return resume_from

    def launch(self, resume_from: Path | None) -> Trainer:
        """The trainer (a recipe under torchrun or alone, or a command run's script) as a process group."""
        settings, spec, place, out_dir = self.settings, self.spec, self.place, self.out_dir
        logger.info("run=%d %s: starting its trainer", self.run_id, self.where)
        first_rank = place.node_rank * processes_per_node(spec) if place else 0
        forks = None
        if spec.command is not None:
            try:
                cwd = command_cwd(spec, out_dir, self.artifacts.local_root)
                command = command_argv(settings.python, spec, out_dir, self.run_id, self.number, place)
            except CommandError as exc:
                self._unstartable(str(exc))
            env = {**command_env(spec, out_dir, self.spec_path, self.run_id, self.number, resume=resume_from), **self.env}
            base_env: dict[str, str] | None = {}
        else:
            cwd, base_env = out_dir, None
            command = trainer_command(settings.python, spec, self.spec_path, out_dir, resume_from, place)
            env = {**self.artifacts.trainer_env(), ATTEMPT_ENV: str(self.number), **self.env}
            if place is None and processes_per_node(spec) == 1 and not spec.resources.gpus:
                forks = self.forks  # a CPU run's one process: a process that forks must not have touched CUDA
        if self.per_node:
            env = {**env, RUN_DIR_PER_NODE_ENV: "1"}
        if place is not None:  # torchrun prefixes lines with the local rank unless told: a gang's logs need the global one
            env = {**env, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:"}
        return Trainer(command, cwd, self.forwarder.add_line, env=env, first_rank=first_rank, base_env=base_env, forks=forks)

    def supervise(self, trainer: Trainer) -> str:
        """Watch the trainer to its end (worker/watch.py), which settles the attempt (worker/settle.py)."""
        settings, client, holding, forwarder = self.settings, self.client, self.holding, self.forwarder
        if not self.reports:
            outcome = watch_node(settings, client, holding, self.run_id, self.number, self.place, trainer, forwarder)
            if self.per_node and outcome == "succeeded":  # node 0 uploaded what the run wrote: this copy is done with
                shutil.rmtree(self.out_dir, ignore_errors=True)
            return outcome
        outcome = watch(settings, client, holding, self.run_id, self.number, self.spec, trainer, forwarder)
        if self.artifacts.remote and outcome in ("succeeded", "failed", "cancelled") and forwarder.settled:
            # Its checkpoints and export are on the remote root and its reports in the API: the scratch
            # copy would only fill this node's disk (a resumed failed run downloads what it needs again).
            shutil.rmtree(self.out_dir, ignore_errors=True)
        return outcome

    def close(self) -> None:
        self.holding.hold(None)
        self.forwarder.close()
        self.sink.close()
        self.artifacts.release()

    def _unstartable(self, reason: str) -> None:
        """The attempt cannot start, for a reason another try would meet again: a node says so to the gang, the run's
        worker fails the run on its inputs."""
        if not self.reports:
            raise NodeRefused(reason)
        raise Unstarted(end_unstarted(self.client, self.run_id, self.number, reason))


def resume_point(out_dir: Path, registered: int | None, per_node: bool, root: str) -> Path | None:
    """What the trainer resumes from: the run directory (its latest checkpoint) where it has one, or, for a node of a
    gang with its own copy, the registered checkpoint, which must have come down complete. Such a copy's checkpoints
    past it (an earlier attempt's on this node, never uploaded) are removed: the run goes on from the registered one
    and writes its own steps again."""
    if not per_node:
        return out_dir if has_checkpoint(out_dir) else None
    for written in (out_dir / CHECKPOINTS).glob(f"{STEP_PREFIX}*"):  # none where the directory is not there
        step = step_of(written.name)
        if step is not None and (registered is None or step > registered):
            shutil.rmtree(written, ignore_errors=True)
    for part in node_parts(out_dir):  # an earlier attempt's, not uploaded
        shutil.rmtree(part, ignore_errors=True)
    if registered is None:
        return None
    checkpoint = out_dir / CHECKPOINTS / step_dir_name(registered)
    if missing(checkpoint):
        raise NodeRefused(f"the run's registered checkpoint, step {registered}, is not complete on {root}")
    return checkpoint
