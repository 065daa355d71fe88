"""The run state machine. Anything not listed here is an illegal transition (HTTP 409)."""

STATUSES = ("queued", "starting", "running", "succeeded", "failed", "cancelling", "cancelled", "lost")
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
ACTIVE = frozenset({"starting", "running", "cancelling"})
RESUMABLE = frozenset({"failed", "cancelled", "lost"})
# Why a run failed, as its worker says: its spec, data or model (the trainer's exit 2), its training went
# NaN/inf (exit 3), or the trainer crashed. The first two fail again the same way if resumed: fix and resubmit.
FAILURES = ("config", "diverged", "crashed")
NOT_RESUMABLE_FAILURES = frozenset({"config", "diverged"})

TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"starting", "cancelled"}),
    "starting": frozenset({"running", "succeeded", "failed", "cancelling", "lost"}),
    "running": frozenset({"succeeded", "failed", "cancelling", "lost"}),
    "cancelling": frozenset({"cancelled", "succeeded", "failed", "lost"}),
    "succeeded": frozenset(),
    "failed": frozenset({"queued"}),
    "cancelled": frozenset({"queued"}),
    # A lost run is requeued (resume) or given up on when its retry budget is spent.
    "lost": frozenset({"queued", "failed"}),
}


def can_transition(current: str, target: str) -> bool:
    return target in TRANSITIONS[current]
