"""The lease phase of an attempt on this worker, and the rest through worker/attempt.py's phases:

    lease (409: a duplicate delivery or a run that is no longer queued -> ignore the message)
    -> prepare: write the spec, bring the inputs down, find the checkpoint to resume from, claim the run directory
    -> launch: start the trainer (or a command run's script) as a process group
    -> supervise: every poll, forward reports; every heartbeat, look for a cancel; watch for a hang (worker/watch.py)
    -> settle: exit 0: succeeded | exit 2: failed on its configuration | exit 3: failed, diverged (the trainer's reason)
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
checkpoints) while every node forwards its own ranks' lines and says how its part ended. A generator node
(grpo.generator node) runs asynchronous GRPO's generator instead of a share of the trainer.
"""

from __future__ import annotations

import logging
import shutil
import time

from rlplane.layout import GENERATOR_ADDRESS_ENV
from rlplane.ports import free_port
from rlplane.reports import ReportSender
from rlplane.spec import RunSpec
from rlplane.wire import NodeEnd, NodeJoin, Rendezvous
from worker.attempt import Attempt
from worker.client import LeaseRefused, WorkerApi
from worker.forks import ForkServer
from worker.forward import Forwarder
from worker.holding import Holding
from worker.launcher import NodePlace, Trainer, generator_command, processes_per_node
from worker.settings import WorkerSettings
from worker.watch import watch_node

__all__ = ["Holding", "supervise", "supervise_node"]

logger = logging.getLogger("rlplane.worker")

RENDEZVOUS_WAIT_S = 120  # how long a node waits for node 0 to publish the rendezvous


def supervise(settings: WorkerSettings, client: WorkerApi, holding: Holding, run_id: int, forks: ForkServer | None = None) -> str:
    """Run one attempt of `run_id`; returns how it ended (for logs and tests). `forks`: the worker's forkserver."""
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
    return Attempt(settings, client, holding, run_id, lease.attempt, lease.run.spec, place=None, forks=forks).run()


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
    return Attempt(settings, client, holding, run_id, attempt, spec, place=place, registered=registered, env=env).run()


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
        return watch_node(settings, client, holding, run_id, attempt, place, generator, forwarder, who="generator")
    finally:
        holding.hold(None)
        forwarder.close()
        sink.close()
        shutil.rmtree(workdir, ignore_errors=True)
