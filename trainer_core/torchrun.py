"""torchrun (`python -m trainer_core.torchrun`, torchrun's own arguments), as every launch of several ranks starts it,
so that the launch ends as its ranks meant it to:

- Its exit code is the ranks': torchrun exits 1 whenever a rank fails, which turns a hand-back (every rank exits
  EXIT_HANDED_BACK after their checkpoint), a bad input (EXIT_BAD_INPUT) or a divergence into a crash. Here the
  first failed rank's code is the launch's (1 where a signal ended it); torchrun's failure summary is still printed.
- In a Slurm job, SIGTERM is the ranks' to answer. Slurm signals every process of a job it preempts or whose time is
  up; torchrun's agent took it as its own end and stopped the ranks before their hand-back checkpoint, so a run of
  several processes or nodes lost its attempt. Here the agent leaves SIGTERM to the ranks (they checkpoint after
  their step and exit EXIT_HANDED_BACK, trainer_core/recipes/run_dir_signals.py) and waits for them; SIGINT, SIGHUP
  and SIGQUIT still end it and its ranks, and it gets SIGHUP when its worker dies.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run

# torchrun's agent installs its handlers for these when it starts the ranks (its default adds SIGTERM); older
# versions read only the variable TORCHELASTIC_SIGNALS_TO_HANDLE, newer ones an argument that sets it.
_AGENT_ENDS_ON = "SIGINT,SIGHUP,SIGQUIT"
_PR_SET_PDEATHSIG = 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.environ.get("SLURM_JOB_ID"):
        _leave_sigterm_to_the_ranks()
        args.signals_to_handle = _AGENT_ENDS_ON  # torchrun's --signals-to-handle, which sets the variable again
    try:
        run(args)
    except ChildFailedError as exc:
        print(exc.format_msg(), file=sys.stderr, flush=True)
        _, first = exc.get_first_failure()
        return first.exitcode if first.exitcode > 0 else 1
    return 0


def _leave_sigterm_to_the_ranks() -> None:
    os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = _AGENT_ENDS_ON
    # The worker armed SIGTERM for its death (PR_SET_PDEATHSIG), which is about to be ignored: SIGHUP instead, armed
    # first, so a worker that dies in between still ends this process.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGHUP)
    except (OSError, AttributeError):
        pass
    # A handler, not SIG_IGN: the ranks (exec'd) start with SIGTERM's default, as a rank outside this launch would.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)


if __name__ == "__main__":
    sys.exit(main())
