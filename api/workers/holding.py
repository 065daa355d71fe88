"""Whether a worker still holds the run it took: its heartbeats name the run it holds, so a worker that heartbeats
holding something else, well after it took the run, has let it go without saying so (a new process of the same
name after a crash or a cold stop: `rlplane up` names its workers local-1, local-2, ... on every start)."""

from datetime import datetime

# A heartbeat built before the worker noted the run it had just taken may arrive this long after the lease.
HOLD_GRACE_S = 10.0


def moved_on(run_id: int, held_since: datetime, last_heartbeat: datetime | None, current_run_id: int | None) -> bool:
    """The worker's latest heartbeat, sent well after it took `run_id` (at `held_since`), holds another run or none."""
    if last_heartbeat is None or current_run_id == run_id:
        return False
    return (last_heartbeat - held_since).total_seconds() > HOLD_GRACE_S


def moved_on_reason(who: str, current_run_id: int | None) -> str:
    """`who`: "worker NAME", or "node R (worker NAME)" of a gang."""
    holds = f"run {current_run_id}" if current_run_id is not None else "no run"
    return f"lost: {who} is back without it (its heartbeats say it holds {holds}: restarted, or stopped at once)"
