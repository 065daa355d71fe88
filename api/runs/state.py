"""The run state machine. Anything not listed here is an illegal transition (HTTP 409)."""

STATUSES = ("queued", "starting", "running", "succeeded", "failed", "cancelling", "cancelled", "lost")
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
ACTIVE = frozenset({"starting", "running", "cancelling"})
RESUMABLE = frozenset({"failed", "cancelled", "lost"})

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
