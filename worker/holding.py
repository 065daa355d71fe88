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

    def seen(self, run_id: int, status: str, attempt: int | None = None) -> None:
        if run_id == self.run_id:
            self.status, self.current_attempt = status, attempt

    def hold(self, run_id: int | None, attempt: int | None = None) -> None:
        self.run_id, self.attempt, self.last_step, self.status, self.current_attempt = run_id, attempt, None, None, None
