"""The parent-death signal every process rlplane starts is armed with, so that nothing it starts outlives it: the
worker's trainers and forkserver, the forkserver's trainers, `rlplane up`'s workers."""

from __future__ import annotations

import ctypes
import signal
from collections.abc import Callable


def signal_on_parent_death(sig: signal.Signals) -> Callable[[], None]:
    """A preexec_fn (or a call in a forked child): the process gets `sig` when its parent dies, even by SIGKILL
    (Linux's PR_SET_PDEATHSIG), so nothing it starts is orphaned. Elsewhere a no-op (the API's lost-run handling
    remains)."""

    def arm() -> None:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    return arm
