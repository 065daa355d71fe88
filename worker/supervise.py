"""One attempt of one run: lease it, start its trainer, forward its reports, and end the attempt.

    lease (409: a duplicate delivery or a run that is no longer queued -> ignore the message)
    -> write the spec, start the trainer (resuming from the run directory's checkpoints, if any)
    -> every poll: forward reports; every heartbeat: look for a cancel; watch for a hang
    -> exit 0: succeeded | exit 2: failed on its configuration | exit 3: failed, diverged (the trainer's reason)
    | exit 5 (a rollout engine's process died): lost (retried)
    | other exit: failed, crashed (with the last lines) | cancel: cancelled | hang: lost (retried)
    | the worker shuts down (SIGTERM): lost, handed back (requeued at once, not counted against max_attempts)

A stale fencing token (the API marked the run lost, or it runs elsewhere now) stops the trainer at once. A worker
that cannot hear that (silent: a partition, a stopped process) is fenced by the run directory instead: the next
attempt's worker writes its number there (rlplane.layout.ATTEMPT_FILE), and the old trainer stops after its current
step (exit EXIT_FENCED) and writes nothing more.

One node of a multi-node attempt (`supervise_node`, api/runs/gang.py) is the same with three differences:
the API granted it (the worker joins its slot instead of leasing the run); its trainer is torchrun's share of
the gang, started against node 0's rendezvous; and only node 0 reports the run (statuses, metrics, samples,
checkpoints) while every node forwards its own ranks' logs and says how its part ended. On a remote artifact root
each node has its own copy of the run directory: every node resumes from the checkpoint the API registered, and each
node's worker uploads its own node's shards of a sharded checkpoint, node 0's the manifest once all are up
(rlplane/node_parts.py).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from rlplane.layout import (
    ATTEMPT_ENV,
    CHECKPOINTS,
    GENERATOR_ADDRESS_ENV,
    HAND_BACK_FILE,
    RUN_DIR_PER_NODE_ENV,
    STEP_PREFIX,
    STOP_FILE,
    has_checkpoint,
    node_parts,
    step_dir_name,
    step_of,
)
from rlplane.limits import MAX_REASON_CHARS
from rlplane.manifest import missing
from rlplane.reports import ReportSender
from rlplane.spec import RunSpec, dump_spec
from rlplane.status import EXIT_DIVERGED, EXIT_ENGINE_LOST, EXIT_FENCED, FAILURE_OF_EXIT
from rlplane.wire import NodeEnd, NodeJoin, Rendezvous, StatusUpdate
from trainer_core.launch import free_port
from worker.artifacts import Damaged, WorkerArtifacts
from worker.client import LeaseRefused, Superseded, WorkerApi
from worker.command import CommandError, command_argv, command_cwd, command_env
from worker.forward import Forwarder
from worker.launcher import NodePlace, Trainer, generator_command, processes_per_node, trainer_command
from worker.settings import WorkerSettings

logger = logging.getLogger("rlplane.worker")

STARTUP_GRACE_S = 300  # the least a trainer gets for its first step, whatever resources.hang_timeout_s says
RENDEZVOUS_WAIT_S = 120  # how long a node waits for node 0 to publish the rendezvous


@dataclass
class Holding:
    """What the heartbeat reports (the run this worker holds and its last step) and what its answer
    said about that run (cancelling: stop it)."""

    run_id: int | None = None
    attempt: int | None = None
    last_step: int | None = None
    status: str | None = None
    current_attempt: int | None = None  # the run's attempt as the API last said (another one: ours is over)
    stopping: str | None = None  # why this worker shuts down (set from its signal handler): hand the run back

    def seen(self, run_id: int, status: str, attempt: int | None = None) -> None:
        if run_id == self.run_id:
            self.status, self.current_attempt = status, attempt

    def hold(self, run_id: int | None, attempt: int | None = None) -> None:
        self.run_id, self.attempt, self.last_step, self.status, self.current_attempt = run_id, attempt, None, None, None


def supervise(settings: WorkerSettings, client: WorkerApi, holding: Holding, run_id: int) -> str:
    """Run one attempt of `run_id`; returns how it ended (for logs and tests)."""
    if holding.stopping:
        # A message taken while shutting down (the hand-back's own requeue, say): leasing would start an attempt only
        # to hand it back at once. The API sends a queued run again (the reconciler), to a worker that stays.
        logger.info("run=%d not leased: this worker is shutting down (%s)", run_id, holding.stopping)
        return "ignored"
    try:
        lease = client.lease(run_id, settings.name)
    except LeaseRefused as exc:
        logger.info("run=%d not leased (%s): a duplicate or stale message, ignored", run_id, exc)
        return "ignored"
    return _attempt(settings, client, holding, run_id, lease.attempt, lease.run.spec, place=None)


def supervise_node(
    settings: WorkerSettings, client: WorkerApi, holding: Holding, run_id: int, attempt: int, node_rank: int
) -> str:
    """Run this worker's node of a multi-node attempt; returns how it ended."""
    if holding.stopping:  # as in supervise; the granted node goes unjoined, and the API grants a new gang
        logger.info("run=%d attempt=%d node %d not joined: this worker is shutting down", run_id, attempt, node_rank)
        return "ignored"
    # Every node brings an address and a free port: the API keeps node 0's (the rendezvous) and a generator node's
    # (where its generator listens); which this node is, the join's answer says.
    port = free_port(settings.advertise_address)
    body = NodeJoin(worker=settings.name, address=settings.advertise_address, port=port)
    try:
        lease = client.join(run_id, attempt, node_rank, body)
    except LeaseRefused as exc:
        logger.info("run=%d attempt=%d node %d not joined (%s): stale, ignored", run_id, attempt, node_rank, exc)
        return "ignored"
    holding.hold(run_id, attempt)
    spec = lease.run.spec
    if lease.role == "generator":
        return _generator_node(settings, client, holding, run_id, attempt, node_rank, spec, f"{_host(body.address)}:{port}")
    # Node 0 of a run with a generator node hands its trainer where the generator listens.
    needs_generator = node_rank == 0 and spec.trainer_nodes < spec.resources.nodes
    rendezvous = lease.rendezvous
    deadline = time.monotonic() + RENDEZVOUS_WAIT_S
    while not rendezvous.ended and time.monotonic() < deadline and _waiting(rendezvous, needs_generator):
        time.sleep(0.5)
        rendezvous = client.rendezvous(run_id, attempt)
    if rendezvous.ended:
        holding.hold(None)
        logger.info("run=%d attempt=%d ended before node %d started", run_id, attempt, node_rank)
        return "superseded"
    if _waiting(rendezvous, needs_generator):
        holding.hold(None)
        who = "the generator node published no address" if rendezvous.master_port else "node 0 published no rendezvous"
        client.end_node(run_id, attempt, node_rank, NodeEnd(exit_code=None, reason=f"{who} within {RENDEZVOUS_WAIT_S} s"))
        return "lost"
    place = NodePlace(node_rank, spec.trainer_nodes, rendezvous.master_address or "", rendezvous.master_port or 0)
    env = {}
    if needs_generator:
        env[GENERATOR_ADDRESS_ENV] = f"{_host(rendezvous.generator_address or '')}:{rendezvous.generator_port}"
    registered = lease.run.latest_checkpoint_step
    return _attempt(settings, client, holding, run_id, attempt, spec, place=place, registered=registered, env=env)


def _waiting(rendezvous: Rendezvous, for_generator: bool) -> bool:
    return rendezvous.master_port is None or (for_generator and rendezvous.generator_port is None)


def _host(address: str | None) -> str:
    """`address` as the host of a host:port (an IPv6 one bracketed)."""
    address = address or ""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def _generator_node(
    settings: WorkerSettings,
    client: WorkerApi,
    holding: Holding,
    run_id: int,
    attempt: int,
    node_rank: int,
    spec: RunSpec,
    listen: str,
) -> str:
    """A generator node (grpo.generator node): its generator process listens at `listen`, which this node published when
    it joined, until node 0's trainer connects, hands it the policy and closes the connection at the run's end. It has no
    share of the run directory or its checkpoints (its weights come from the trainer at each sync): it works in a
    scratch directory of its own, forwards its lines as this node's log, and ends as any node of a gang does."""
    place = NodePlace(node_rank, spec.resources.nodes, "", 0)
    workdir = settings.home / "scratch" / f"generator-{run_id}-attempt-{attempt}"
    workdir.mkdir(parents=True, exist_ok=True)
    sink = ReportSender(settings.api_url, settings.token or "", run_id, attempt, spool_dir=workdir / ".spool", max_retries=1)
    forwarder = Forwarder(sink, workdir, "", attempt, reports=False)
    try:
        logger.info("run=%d attempt=%d node %d: starting its generator at %s", run_id, attempt, node_rank, listen)
        command = generator_command(settings.python, spec, workdir / "model", listen)
        generator = Trainer(command, workdir, forwarder.add_line, first_rank=node_rank * processes_per_node(spec))
        return _watch_node(settings, client, holding, run_id, attempt, place, generator, forwarder, who="generator")
    finally:
        holding.hold(None)
        forwarder.close()
        sink.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _attempt(
    settings: WorkerSettings,
    client: WorkerApi,
    holding: Holding,
    run_id: int,
    attempt: int,
    spec: RunSpec,
    place: NodePlace | None,
    registered: int | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """`registered`: a gang's newest registered checkpoint (the API's word, the same for every node); `env`: for the
    trainer, beside what every trainer is told."""
    reports = place is None or place.node_rank == 0  # who reports the run: its only worker, or node 0
    cache_bytes = None if settings.input_cache_gb is None else int(settings.input_cache_gb * 1e9)
    artifacts = WorkerArtifacts(settings.artifact_root, settings.home / "scratch", holder=settings.name, cache_bytes=cache_bytes)
    # A gang on a remote root: each node has its own copy of the run directory, so every node resumes from the one
    # checkpoint the API registered (node 0's copy may hold a newer one it never uploaded), brought down by each.
    per_node = place is not None and artifacts.remote
    out_dir, relative = artifacts.run_dir(run_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_path = out_dir / (f"spec-attempt-{attempt}.json" if reports else f"spec-attempt-{attempt}-node-{place.node_rank}.json")
    spec_path.write_text(json.dumps(dump_spec(spec)))
    spool = out_dir / (".spool" if reports else f".spool-node-{place.node_rank}")  # the run directory may be shared
    sink = ReportSender(settings.api_url, settings.token or "", run_id, attempt, spool_dir=spool, max_retries=1, backoff=0.5)

    def rotate_remote(event: dict[str, Any]) -> None:
        """The remote copies follow the trainer's rotation of its local ones (train.keep_last)."""
        if event["metadata"].get("kind") != "export":
            artifacts.prune_checkpoints(f"{relative}/{CHECKPOINTS}", spec.train.keep_last)
            if per_node:  # node 0's copy lacks the other nodes' shards: the trainer cannot rotate it, nor resume it
                drop_local_copy(event)

    def drop_local_copy(event: dict[str, Any]) -> None:
        shutil.rmtree(out_dir / event["path"], ignore_errors=True)

    publish, uploaded = None, None  # a directory root: the API reads the trainer's files in place
    if artifacts.remote and reports:
        publish, uploaded = artifacts.publish, rotate_remote
    elif artifacts.remote:  # a gang's node other than 0: it uploads its own shards of each checkpoint
        publish, uploaded = partial(artifacts.publish_node_part, node_rank=place.node_rank), drop_local_copy
    forwarder = Forwarder(sink, out_dir, relative, attempt, publish=publish, uploaded=uploaded, reports=reports)
    holding.hold(run_id, attempt)
    try:
        # a remote root: the checkpoint to resume, the runs and dataset it names
        try:
            artifacts.prepare(run_id, spec, registered if per_node else "latest")
        except Damaged as exc:  # another try would find the same bytes: the run fails, saying which and what to do
            if not reports:
                raise NodeRefused(str(exc)) from None
            return _end_unstarted(client, run_id, attempt, str(exc))
        resume_from = _resume_from(out_dir, registered, per_node, artifacts.url)
        resume = resume_from is not None
        where = f"attempt {attempt} on {settings.name}" + (f" (node {place.node_rank} of {place.nodes})" if place else "")
        started = where + (" (resuming)" if resume else "")
        if reports:
            if client.status(run_id, StatusUpdate(attempt=attempt, status="running", reason=started))["status"] == "cancelling":
                client.status(
                    run_id, StatusUpdate(attempt=attempt, status="cancelled", reason="cancelled before its trainer started")
                )
                logger.info("run=%d attempt=%d cancelled before its trainer started", run_id, attempt)
                return "cancelled"
        if reports or per_node:  # a directory every node shares is node 0's to claim
            for answered in (HAND_BACK_FILE, STOP_FILE):  # the last attempt's requests
                (out_dir / answered).unlink(missing_ok=True)
            # the fence: an older attempt's trainer stops and its worker uploads nothing
            artifacts.claim(run_id, attempt, remote=reports)
        logger.info("run=%d %s: starting its trainer%s", run_id, where, " (resuming)" if resume else "")
        first_rank = place.node_rank * processes_per_node(spec) if place else 0
        if spec.command is not None:
            try:
                cwd = command_cwd(spec, out_dir, artifacts.local_root)
                command = command_argv(settings.python, spec, out_dir, run_id, attempt, place)
            except CommandError as exc:
                if not reports:
                    raise NodeRefused(str(exc)) from None
                return _end_unstarted(client, run_id, attempt, str(exc))
            env = {**command_env(spec, out_dir, spec_path, run_id, attempt, resume=resume_from), **(env or {})}
            base_env: dict[str, str] | None = {}
        else:
            cwd, base_env = out_dir, None
            command = trainer_command(settings.python, spec, spec_path, out_dir, resume_from, place)
            env = {**artifacts.trainer_env(), ATTEMPT_ENV: str(attempt), **(env or {})}
        if per_node:
            env = {**env, RUN_DIR_PER_NODE_ENV: "1"}
        if place is not None:  # torchrun prefixes lines with the local rank unless told: a gang's logs need the global one
            env = {**env, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:"}
        trainer = Trainer(command, cwd, forwarder.add_line, env=env, first_rank=first_rank, base_env=base_env)
        if not reports:
            outcome = _watch_node(settings, client, holding, run_id, attempt, place, trainer, forwarder)
            if per_node and outcome == "succeeded":  # node 0 uploaded what the run wrote: this copy is done with
                shutil.rmtree(out_dir, ignore_errors=True)
            return outcome
        outcome = _watch(settings, client, holding, run_id, attempt, spec, trainer, forwarder)
        if artifacts.remote and outcome in ("succeeded", "failed", "cancelled") and forwarder.settled:
            # Its checkpoints and export are on the remote root and its reports in the API: the scratch
            # copy would only fill this node's disk (a resumed failed run downloads what it needs again).
            shutil.rmtree(out_dir, ignore_errors=True)
        return outcome
    except NodeRefused as exc:
        client.end_node(run_id, attempt, place.node_rank, NodeEnd(exit_code=None, reason=f"{settings.name}: {exc}"))
        return "lost"
    except Superseded as exc:
        logger.warning("run=%d attempt=%d superseded: %s", run_id, attempt, exc)
        return "superseded"
    finally:
        holding.hold(None)
        forwarder.close()
        sink.close()
        artifacts.release()


def _resume_from(out_dir: Path, registered: int | None, per_node: bool, root: str) -> Path | None:
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


class NodeRefused(Exception):
    """This worker cannot take its node of the gang (it says why; the attempt ends and a new gang is granted)."""


def _watch_node(
    settings: WorkerSettings,
    client: WorkerApi,
    holding: Holding,
    run_id: int,
    attempt: int,
    place: NodePlace,
    trainer: Trainer,
    forwarder: Forwarder,
    who: str = "trainer",
) -> str:
    """A node other than 0: forward its ranks' logs until its trainer exits, or stop it when the API says the
    attempt is over (cancelled, lost, ended elsewhere: another node failed). Node 0 watches for a hang: its
    steps stop when any node's do."""
    stopped = None
    try:
        while trainer.wait(settings.poll_s) is None:
            forwarder.poll()
            over = holding.current_attempt not in (None, attempt) or holding.status not in (None, "starting", "running")
            if holding.stopping is not None or over:
                # The run succeeded, or failed on node 0's word: this node's trainer is ending too, give it a moment.
                if holding.status in ("succeeded", "failed") and trainer.wait(10) is not None:
                    break
                trainer.kill_group()
                stopped = holding.stopping or f"stopped: the run is {holding.status} (attempt {holding.current_attempt})"
                break
    except BaseException:
        trainer.kill_group()
        raise
    code = trainer.poll()
    trainer.wait_output()
    _settle(forwarder)  # node 0 waits for this node's shards of the last checkpoint: they go up first
    if stopped is not None:
        code = None
    reason = stopped or f"{who} exited with {code}" + ("" if code == 0 else ":\n" + "\n".join(list(trainer.tail)[-15:]))
    failure = None if code in (0, None) else FAILURE_OF_EXIT.get(code, "crashed")
    for wait in (0, 1, 2, 4, 8):
        time.sleep(wait)
        try:
            exited = trainer.exited_at if code not in (0, None) else None
            end = NodeEnd(exit_code=code, reason=reason[-MAX_REASON_CHARS:], failure=failure, exited_at=exited)
            client.end_node(run_id, attempt, place.node_rank, end)
            break
        except Exception as exc:
            logger.warning("run=%d node %d end not sent yet: %s", run_id, place.node_rank, exc)
    logger.info("run=%d attempt=%d node %d: %s", run_id, attempt, place.node_rank, reason.splitlines()[0])
    return "succeeded" if code == 0 else ("stopped" if code is None else "failed")


def _watch(
    settings: WorkerSettings,
    client: WorkerApi,
    holding: Holding,
    run_id: int,
    attempt: int,
    spec: RunSpec,
    trainer: Trainer,
    forwarder: Forwarder,
) -> str:
    hang_s = spec.resources.hang_timeout_s
    last_progress, last_step, told_phase = time.monotonic(), None, None
    try:
        while trainer.wait(settings.poll_s) is None:
            forwarder.poll()
            holding.last_step = forwarder.last_step
            if forwarder.phase != told_phase:  # the run says what its trainer does: compiling ops, loading, training
                told_phase = forwarder.phase
                _say_phase(client, run_id, attempt, told_phase, forwarder.last_step)
            if forwarder.last_step != last_step:
                last_progress, last_step = time.monotonic(), forwarder.last_step
            # Before its first step a trainer imports, loads (or downloads) the model and joins its ranks:
            # that may take longer than a step ever should, so the first step gets a grace period.
            limit = hang_s if hang_s is None or last_step is not None else max(hang_s, STARTUP_GRACE_S)
            if limit is not None and time.monotonic() - last_progress > limit:
                trainer.kill_group()
                what = f"no step finished for {limit} s" if last_step is not None else f"no first step within {limit} s"
                return _end(client, forwarder, trainer, run_id, attempt, "lost", f"hang: {what}; killed")
            if holding.stopping is not None:
                reason = _hand_back(settings, trainer, forwarder, holding.stopping)
                return _end(client, forwarder, trainer, run_id, attempt, "lost", reason, handed_back=True)
            if holding.current_attempt not in (None, attempt):
                trainer.kill_group()
                raise Superseded(f"run {run_id} is on attempt {holding.current_attempt} now")
            if forwarder.fenced is not None:  # found on the remote root: the API was out of this worker's reach
                trainer.kill_group()
                raise Superseded(forwarder.fenced)
            if holding.status is not None:
                status = holding.status
                if status == "cancelling":
                    if spec.command is not None:  # a user's script: should_stop() turns true, it may save first
                        reason = _ask_to_stop(trainer, forwarder, STOP_FILE, spec.command.stop_grace_s, settings.poll_s)
                        return _end(client, forwarder, trainer, run_id, attempt, "cancelled", f"cancelled: {reason}")
                    trainer.kill_group()
                    return _end(client, forwarder, trainer, run_id, attempt, "cancelled", "cancelled: the trainer was stopped")
                if status not in (None, "starting", "running"):
                    trainer.kill_group()  # marked lost (we were silent too long) or ended elsewhere
                    raise Superseded(f"run {run_id} is {status}")
    except BaseException:
        trainer.kill_group()
        raise
    code = trainer.poll()
    who = "trainer" if spec.command is None else "script"  # a command run's is the user's
    trainer.wait_output()
    if code == EXIT_FENCED:  # the run went on without this worker (it was silent): nothing of it is ours to report
        raise Superseded(f"its trainer found another attempt owning run {run_id}'s directory and stopped")
    forwarder.poll()  # what the trainer wrote last (its final step, its own failure reason) before the reason is told
    if code == 0:
        return _end(client, forwarder, trainer, run_id, attempt, "succeeded", f"{who} exited 0 at step {forwarder.last_step}")
    last_lines = "\n".join(list(trainer.tail)[-15:])
    if code == EXIT_ENGINE_LOST:  # its rollout engine's process died: lost, and retried from the last checkpoint
        said = list(trainer.tail)
        start = max((i for i, line in enumerate(said) if "(rollout engine lost)" in line), default=max(len(said) - 15, 0))
        head = f"rollout engine lost: the {who} exited {code}:\n"
        reason = head + "\n".join(said[start:])[-(MAX_REASON_CHARS - len(head)) :]  # its own words, then the engine's
        return _end(client, forwarder, trainer, run_id, attempt, "lost", reason)
    failure = FAILURE_OF_EXIT.get(code, "crashed")
    if code == EXIT_DIVERGED and forwarder.trainer_failure:
        return _end(client, forwarder, trainer, run_id, attempt, "failed", forwarder.trainer_failure, failure=failure)
    reason = f"{who} exited with {code}:\n{last_lines}"
    return _end(client, forwarder, trainer, run_id, attempt, "failed", reason, failure=failure)


def _say_phase(client: WorkerApi, run_id: int, attempt: int, phase: str | None, last_step: int | None) -> None:
    """The trainer's phase as the run's reason while it runs; a lost request is not worth a retry (the next phase,
    or the run's end, says more)."""
    try:
        client.status(run_id, StatusUpdate(attempt=attempt, status="running", reason=phase or "", last_step=last_step))
    except Superseded:
        raise
    except Exception as exc:
        logger.warning("run=%d phase not sent: %s", run_id, exc)


def _ask_to_stop(trainer: Trainer, forwarder: Forwarder, flag: str, grace_s: float, poll_s: float) -> str:
    """Write `flag` into the run directory (the SDK's should_stop() sees it) and forward while the script saves and
    exits, for up to `grace_s`; then stop whatever is left. Says how it ended."""
    (forwarder.out_dir / flag).touch()
    deadline = time.monotonic() + grace_s
    while trainer.wait(poll_s) is None and time.monotonic() < deadline:
        forwarder.poll()
    code = trainer.poll()
    if code is not None:
        trainer.wait_output()
        forwarder.poll()  # the checkpoint it saved on its way out
        saved = f"; its last checkpoint is step {forwarder.last_checkpoint}" if forwarder.last_checkpoint is not None else ""
        return f"the script stopped when asked (exit {code}){saved}"
    trainer.kill_group()
    return f"the script was stopped after {grace_s:g} s (command.stop_grace_s)"


def _end_unstarted(client: WorkerApi, run_id: int, attempt: int, reason: str) -> str:
    """The attempt could not start (a command's code is missing, the checkpoint to resume is damaged): the run fails
    on its inputs, which another try would find the same."""
    client.status(run_id, StatusUpdate(attempt=attempt, status="failed", reason=reason[-MAX_REASON_CHARS:], failure="config"))
    logger.info("run=%d attempt=%d failed before its trainer started: %s", run_id, attempt, reason)
    return "failed"


def _hand_back(settings: WorkerSettings, trainer: Trainer, forwarder: Forwarder, why: str) -> str:
    """Ask the trainer to checkpoint after its current step and exit (HAND_BACK_FILE), forwarding meanwhile;
    stop it after settings.hand_back_grace_s. Returns the attempt's end reason."""
    (forwarder.out_dir / HAND_BACK_FILE).touch()
    deadline = time.monotonic() + settings.hand_back_grace_s
    while trainer.wait(settings.poll_s) is None and time.monotonic() < deadline:
        forwarder.poll()
    if trainer.poll() == 0:
        # The hand-back checkpoint's event is the trainer's last write: read it now, after the trainer left.
        trainer.wait_output()
        forwarder.poll()
        return f"handed back: {why}; checkpointed at step {forwarder.last_checkpoint}, where the next attempt resumes"
    trainer.kill_group()
    return f"handed back: {why}; stopped after {settings.hand_back_grace_s:g} s, resumes from its latest checkpoint"


def _settle(forwarder: Forwarder) -> None:
    """Forward until the API took everything and every upload is done, or uploads were fenced: for up to 120 s for
    the API, and however long an upload that is getting on takes."""
    deadline = time.monotonic() + 120
    while not forwarder.poll() and (time.monotonic() < deadline or forwarder.uploading) and forwarder.fenced is None:
        time.sleep(1.0)


def _end(
    client: WorkerApi,
    forwarder: Forwarder,
    trainer: Trainer,
    run_id: int,
    attempt: int,
    status: str,
    reason: str,
    handed_back: bool = False,
    failure: str | None = None,
) -> str:
    trainer.wait_output()
    _settle(forwarder)  # everything reported goes in before the run's final status
    if forwarder.fenced is not None:
        raise Superseded(forwarder.fenced)
    for wait in (0, 1, 2, 4, 8, 15, 30, 60):
        time.sleep(wait)
        try:
            update = StatusUpdate(
                attempt=attempt,
                status=status,
                reason=reason[-MAX_REASON_CHARS:],
                last_step=forwarder.last_step,
                handed_back=handed_back,
                failure=failure,
                exited_at=trainer.exited_at if status == "failed" else None,
            )
            client.status(run_id, update)
            logger.info("run=%d attempt=%d %s: %s", run_id, attempt, status, reason.splitlines()[0] if reason else "")
            return "handed_back" if handed_back else status
        except Superseded:
            raise
        except Exception as exc:
            logger.warning("run=%d final status %s not sent yet: %s", run_id, status, exc)
    logger.error("run=%d final status %s never reached the API; it will be found lost and retried", run_id, status)
    return status
