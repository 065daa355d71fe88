"""Who runs a queue's attempts: an executor (DESIGN.md, "The path of one run", 7). Every queue is served by Celery
workers kept on the nodes (celery.py) unless RLPLANE_SLURM_QUEUES binds it to a Slurm cluster (slurm.py), whose jobs
start short-lived workers for one attempt each. Both dispatch through the broker: a Slurm job's workers serve a queue
of that job's own, so a run on a Slurm queue reaches only the workers of the job that was submitted for it.

The reconcile loop (api/reconcile.py) asks each queued run's executor to dispatch it, then lets each executor look
after what it started (`tick`); everything after the lease (attempts, fencing, reporting, lost runs) is the same for
both.
"""

from __future__ import annotations

from typing import Protocol


class Executor(Protocol):
    def dispatch(self, run_id: int, queue: str, nodes: int) -> None:
        """Move a queued run towards its lease: send it to a worker, grant its gang, or start what will run it."""
        ...

    def tick(self) -> None:
        """Once per reconcile tick, after the dispatches: what the executor started, brought up to date."""
        ...
