"""What this worker holds: the run and attempt its heartbeat reports, and what the API's answers said about them."""

from __future__ import annotations

from dataclasses import dataclass


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
    preempted: str | None = None  # why the API wants the run back (a higher-priority run waits): hand it back
    preempt_grace_s: float | None = None  # how long the trainer has for that hand-back's checkpoint (the API's word)

    def seen(
        self, run_id: int, status: str, attempt: int | None = None, preempted_by: int | None = None, grace_s: float | None = None
    ) -> None:
        if run_id == self.run_id:
            self.status, self.current_attempt = status, attempt
            if preempted_by is not None and self.preempted is None:  # once asked, the hand-back goes on
                self.preempted, self.preempt_grace_s = f"preempted by run {preempted_by}", grace_s

    def hold(self, run_id: int | None, attempt: int | None = None) -> None:
        self.run_id, self.attempt, self.last_step, self.status, self.current_attempt = run_id, attempt, None, None, None
        self.preempted = self.preempt_grace_s = None

    @property
    def handing_back(self) -> str | None:
        """Why the run goes back (this worker shuts down, or the API preempts it), if it does."""
        return self.stopping or self.preempted
