"""The words for where a run is, what moves it on, and how a trainer's exit says how it ended.

The API enforces TRANSITIONS (anything else is HTTP 409), the worker reports them, the CLI and the
dashboard show them; a trainer only ever says running, succeeded or failed (TRAINER_STATUSES). One exception: a
run its script started itself that the API failed for the script's silence takes the script's later word
(running, or its end) over that guess (api/runs/service.py, _script_back).
"""

from __future__ import annotations

from typing import Literal

Status = Literal["queued", "starting", "running", "succeeded", "failed", "cancelling", "cancelled", "lost"]
STATUSES: tuple[Status, ...] = ("queued", "starting", "running", "succeeded", "failed", "cancelling", "cancelled", "lost")
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
# A worker holds it: the API watches its heartbeats and a cancel has to wait for the worker.
ACTIVE = frozenset({"starting", "running", "cancelling"})
RESUMABLE = frozenset({"failed", "cancelled", "lost"})

TRANSITIONS: dict[str, frozenset[str]] = {
    # failed: its executor refused it before any attempt (a Slurm queue whose sbatch rejects the job)
    "queued": frozenset({"starting", "cancelled", "failed"}),
    "starting": frozenset({"running", "succeeded", "failed", "cancelling", "lost"}),
    "running": frozenset({"succeeded", "failed", "cancelling", "lost"}),
    "cancelling": frozenset({"cancelled", "succeeded", "failed", "lost"}),
    "succeeded": frozenset(),
    "failed": frozenset({"queued"}),
    "cancelled": frozenset({"queued"}),
    # A lost run is requeued (resume) or given up on when its retry budget is spent.
    "lost": frozenset({"queued", "failed"}),
}

# Why a run failed, as its worker says: its spec, data or model (the trainer's exit 2), its training went
# NaN/inf (exit 3), or the trainer crashed. The first two fail again the same way if resumed: fix and resubmit.
Failure = Literal["config", "diverged", "crashed"]
FAILURES: tuple[Failure, ...] = ("config", "diverged", "crashed")
NOT_RESUMABLE_FAILURES = frozenset({"config", "diverged"})

# What a trainer reports about itself (events.jsonl, or straight to the API): a subset of the run's words.
# A trainer that stops before its last step (--stop-at, a hand-back) says nothing final: its worker decides.
TrainerStatus = Literal["running", "succeeded", "failed"]
TRAINER_STATUSES: tuple[TrainerStatus, ...] = ("running", "succeeded", "failed")

# The trainer's exit status when the spec, the data, the model or a checkpoint is wrong (said on stderr), and when
# its training diverged (train.on_nonfinite); anything else non-zero is a crash.
EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3
# The trainer's exit status when it found another attempt owning its run directory (rlplane.layout.ATTEMPT_FILE): the
# control plane ended its attempt while its worker was silent. Not the run's failure: the run goes on elsewhere.
EXIT_FENCED = 4
# The trainer's exit status when a rollout engine it started died under it (asynchronous GRPO's generator process): not
# the run's fault; its worker ends the attempt lost, and the run resumes from its last checkpoint like any lost attempt.
EXIT_ENGINE_LOST = 5
# The trainer's exit status when it stopped before its last step because it was asked to (its worker's hand-back
# file, or in a Slurm job SIGTERM: a preemption or the time limit signals every process of the job) after checkpointing:
# not finished and not failed; its worker hands the run back, and the next attempt resumes from that checkpoint.
EXIT_HANDED_BACK = 6
FAILURE_OF_EXIT: dict[int, Failure] = {EXIT_BAD_INPUT: "config", EXIT_DIVERGED: "diverged"}


def can_transition(current: str, target: str) -> bool:
    return target in TRANSITIONS[current]
