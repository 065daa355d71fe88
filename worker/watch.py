"""An attempt's trainer while it runs, on its worker: its reports forwarded, and the API's word (cancel, another
attempt), a hang, the fence and this worker's own shutdown (a hand-back) acted on until it exits. Node 0 of a gang
(or a one-node attempt's worker) watches the run (`watch`); any other node its own part (`watch_node`)."""

from __future__ import annotations

import logging
import time

from rlplane.layout import HAND_BACK_FILE, STOP_FILE
from rlplane.limits import MAX_REASON_CHARS
from rlplane.spec import RunSpec
from rlplane.status import EXIT_DIVERGED, EXIT_ENGINE_LOST, EXIT_FENCED, EXIT_HANDED_BACK, FAILURE_OF_EXIT
from rlplane.wire import NodeEnd, StatusUpdate
from worker.client import Superseded, WorkerApi
from worker.forward import Forwarder
from worker.holding import Holding
from worker.launcher import NodePlace, Trainer
from worker.settings import WorkerSettings
from worker.settle import end, settle

logger = logging.getLogger("rlplane.worker")

STARTUP_GRACE_S = 300  # the least a trainer gets for its first step, whatever resources.hang_timeout_s says


def watch_node(
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
    steps stop when any node's do. This worker shutting down (Slurm's SIGTERM reaches every node of a job) is a
    hand-back: the ranks agree on it and checkpoint together, so its trainer gets hand_back_grace_s to do its part."""
    stopped = None
    try:
        while trainer.wait(settings.poll_s) is None:
            forwarder.poll()
            over = holding.current_attempt not in (None, attempt) or holding.status not in (None, "starting", "running")
            if holding.handing_back is not None and not over:
                grace_s = _grace_s(settings, holding)
                if _wait_out(trainer, forwarder, grace_s, settings.poll_s) is None:
                    trainer.kill_group()
                    stopped = f"{holding.handing_back}; stopped after {grace_s:g} s"
                break
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
    settle(forwarder)  # node 0 waits for this node's shards of the last checkpoint: they go up first
    if stopped is not None:
        code = None
    if code == EXIT_HANDED_BACK:  # its part of the gang's hand-back checkpoint is saved
        reason = f"handed back: the {who} checkpointed with the gang and exited {code}"
    else:
        reason = stopped or f"{who} exited with {code}" + ("" if code == 0 else ":\n" + "\n".join(list(trainer.tail)[-15:]))
    failure = None if code in (0, None, EXIT_HANDED_BACK) else FAILURE_OF_EXIT.get(code, "crashed")
    for wait in (0, 1, 2, 4, 8):
        time.sleep(wait)
        try:
            exited = trainer.exited_at if code not in (0, None) else None
            said = NodeEnd(exit_code=code, reason=reason[-MAX_REASON_CHARS:], failure=failure, exited_at=exited)
            client.end_node(run_id, attempt, place.node_rank, said)
            break
        except Exception as exc:
            logger.warning("run=%d node %d end not sent yet: %s", run_id, place.node_rank, exc)
    logger.info("run=%d attempt=%d node %d: %s", run_id, attempt, place.node_rank, reason.splitlines()[0])
    return "succeeded" if code == 0 else ("stopped" if code is None else "failed")


def watch(
    settings: WorkerSettings,
    client: WorkerApi,
    holding: Holding,
    run_id: int,
    attempt: int,
    spec: RunSpec,
    trainer: Trainer,
    forwarder: Forwarder,
) -> str:
    try:
        ended = _while_it_runs(settings, client, holding, run_id, attempt, spec, trainer, forwarder)
    except BaseException:
        trainer.kill_group()
        raise
    return ended if ended is not None else _on_exit(client, holding, run_id, attempt, spec, trainer, forwarder)


def _while_it_runs(
    settings: WorkerSettings,
    client: WorkerApi,
    holding: Holding,
    run_id: int,
    attempt: int,
    spec: RunSpec,
    trainer: Trainer,
    forwarder: Forwarder,
) -> str | None:
    """Forward until the trainer exits (None), or end the attempt on a hang, a hand-back or the API's word."""
    hang_s = spec.resources.hang_timeout_s
    last_progress, last_step, told_phase = time.monotonic(), None, None
    while trainer.wait(settings.poll_s) is None:
        forwarder.poll()
        holding.last_step = forwarder.last_step
        if forwarder.phase != told_phase:  # the run says what its trainer does: compiling ops, loading, training
            told_phase = forwarder.phase
            say_phase(client, run_id, attempt, told_phase, forwarder.last_step)
        if forwarder.last_step != last_step:
            last_progress, last_step = time.monotonic(), forwarder.last_step
        limit = _hang_limit(hang_s, last_step)
        if limit is not None and time.monotonic() - last_progress > limit:
            trainer.kill_group()
            what = f"no step finished for {limit} s" if last_step is not None else f"no first step within {limit} s"
            return end(client, forwarder, trainer, run_id, attempt, "lost", f"hang: {what}; killed")
        if holding.handing_back is not None:  # this worker shuts down, or the API preempts the run
            reason = hand_back(settings, trainer, forwarder, holding.handing_back, _grace_s(settings, holding))
            return end(client, forwarder, trainer, run_id, attempt, "lost", reason, handed_back=True)
        _check_still_ours(holding, run_id, attempt, trainer, forwarder)
        if holding.status == "cancelling":
            return _cancelled(settings, client, run_id, attempt, spec, trainer, forwarder)
    return None


def _hang_limit(hang_s: float | None, last_step: int | None) -> float | None:
    """Before its first step a trainer imports, loads (or downloads) the model and joins its ranks: that may take
    longer than a step ever should, so the first step gets a grace period."""
    return hang_s if hang_s is None or last_step is not None else max(hang_s, STARTUP_GRACE_S)


def _check_still_ours(holding: Holding, run_id: int, attempt: int, trainer: Trainer, forwarder: Forwarder) -> None:
    """Stop the trainer and raise Superseded when the run has gone on without this attempt."""
    if holding.current_attempt not in (None, attempt):
        trainer.kill_group()
        raise Superseded(f"run {run_id} is on attempt {holding.current_attempt} now")
    if forwarder.fenced is not None:  # found on the remote root: the API was out of this worker's reach
        trainer.kill_group()
        raise Superseded(forwarder.fenced)
    if holding.status not in (None, "starting", "running", "cancelling"):
        trainer.kill_group()  # marked lost (we were silent too long) or ended elsewhere
        raise Superseded(f"run {run_id} is {holding.status}")


def _cancelled(
    settings: WorkerSettings,
    client: WorkerApi,
    run_id: int,
    attempt: int,
    spec: RunSpec,
    trainer: Trainer,
    forwarder: Forwarder,
) -> str:
    if spec.command is not None:  # a user's script: should_stop() turns true, it may save first
        reason = ask_to_stop(trainer, forwarder, STOP_FILE, spec.command.stop_grace_s, settings.poll_s)
        return end(client, forwarder, trainer, run_id, attempt, "cancelled", f"cancelled: {reason}")
    trainer.kill_group()
    return end(client, forwarder, trainer, run_id, attempt, "cancelled", "cancelled: the trainer was stopped")


def _on_exit(
    client: WorkerApi,
    holding: Holding,
    run_id: int,
    attempt: int,
    spec: RunSpec,
    trainer: Trainer,
    forwarder: Forwarder,
) -> str:
    """The attempt's end from the trainer's exit code."""
    code = trainer.poll()
    who = "trainer" if spec.command is None else "script"  # a command run's is the user's
    trainer.wait_output()
    if code == EXIT_FENCED:  # the run went on without this worker (it was silent): nothing of it is ours to report
        raise Superseded(f"its trainer found another attempt owning run {run_id}'s directory and stopped")
    forwarder.poll()  # what the trainer wrote last (its final step, its own failure reason) before the reason is told
    if code == 0:
        return end(client, forwarder, trainer, run_id, attempt, "succeeded", f"{who} exited 0 at step {forwarder.last_step}")
    if code == EXIT_HANDED_BACK:  # SIGTERM reached the trainer itself (Slurm signals every process of a job)
        saved = f"checkpointed at step {forwarder.last_checkpoint}, where the next attempt resumes"
        if holding.handing_back is not None:  # and this worker: the hand-back it would have asked for
            reason = f"handed back: {holding.handing_back}; {saved}"
            return end(client, forwarder, trainer, run_id, attempt, "lost", reason, handed_back=True)
        reason = f"the {who} was stopped (SIGTERM) and {saved}"
        return end(client, forwarder, trainer, run_id, attempt, "lost", reason)
    if code == EXIT_ENGINE_LOST:  # its rollout engine's process died: lost, and retried from the last checkpoint
        said = list(trainer.tail)
        start = max((i for i, line in enumerate(said) if "(rollout engine lost)" in line), default=max(len(said) - 15, 0))
        head = f"rollout engine lost: the {who} exited {code}:\n"
        reason = head + "\n".join(said[start:])[-(MAX_REASON_CHARS - len(head)) :]  # its own words, then the engine's
        return end(client, forwarder, trainer, run_id, attempt, "lost", reason)
    failure = FAILURE_OF_EXIT.get(code, "crashed")
    if code == EXIT_DIVERGED and forwarder.trainer_failure:
        return end(client, forwarder, trainer, run_id, attempt, "failed", forwarder.trainer_failure, failure=failure)
    last_lines = "\n".join(list(trainer.tail)[-15:])
    reason = f"{who} exited with {code}:\n{last_lines}"
    return end(client, forwarder, trainer, run_id, attempt, "failed", reason, failure=failure)


def _wait_out(trainer: Trainer, forwarder: Forwarder, grace_s: float, poll_s: float) -> int | None:
    """Forward while the trainer ends on its own, for up to `grace_s`; its exit code, or None if it is still running."""
    deadline = time.monotonic() + grace_s
    while trainer.wait(poll_s) is None and time.monotonic() < deadline:
        forwarder.poll()
    return trainer.poll()


def say_phase(client: WorkerApi, run_id: int, attempt: int, phase: str | None, last_step: int | None) -> None:
    """The trainer's phase as the run's reason while it runs; a lost request is not worth a retry (the next phase,
    or the run's end, says more)."""
    try:
        client.status(run_id, StatusUpdate(attempt=attempt, status="running", reason=phase or "", last_step=last_step))
    except Superseded:
        raise
    except Exception as exc:
        logger.warning("run=%d phase not sent: %s", run_id, exc)


def ask_to_stop(trainer: Trainer, forwarder: Forwarder, flag: str, grace_s: float, poll_s: float) -> str:
    """Write `flag` into the run directory (the SDK's should_stop() sees it) and forward while the script saves and
    exits, for up to `grace_s`; then stop whatever is left. Says how it ended."""
    (forwarder.out_dir / flag).touch()
    code = _wait_out(trainer, forwarder, grace_s, poll_s)
    if code is not None:
        trainer.wait_output()
        forwarder.poll()  # the checkpoint it saved on its way out
        saved = f"; its last checkpoint is step {forwarder.last_checkpoint}" if forwarder.last_checkpoint is not None else ""
        return f"the script stopped when asked (exit {code}){saved}"
    trainer.kill_group()
    return f"the script was stopped after {grace_s:g} s (command.stop_grace_s)"


def _grace_s(settings: WorkerSettings, holding: Holding) -> float:
    """How long a hand-back's checkpoint may take: the API's word for a preemption, else this worker's setting."""
    if holding.stopping is None and holding.preempt_grace_s is not None:
        return holding.preempt_grace_s
    return settings.hand_back_grace_s


def hand_back(settings: WorkerSettings, trainer: Trainer, forwarder: Forwarder, why: str, grace_s: float) -> str:
    """Ask the trainer to checkpoint after its current step and exit (HAND_BACK_FILE), forwarding meanwhile;
    stop it after `grace_s`. Returns the attempt's end reason."""
    (forwarder.out_dir / HAND_BACK_FILE).touch()
    if _wait_out(trainer, forwarder, grace_s, settings.poll_s) in (0, EXIT_HANDED_BACK):
        # The hand-back checkpoint's event is the trainer's last write: read it now, after the trainer left.
        trainer.wait_output()
        forwarder.poll()
        return f"handed back: {why}; checkpointed at step {forwarder.last_checkpoint}, where the next attempt resumes"
    trainer.kill_group()
    return f"handed back: {why}; stopped after {grace_s:g} s, resumes from its latest checkpoint"
