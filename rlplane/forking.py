"""The forkserver's protocol, shared by its two ends: trainer_core/forkserver.py (which says how it works) and the
worker's worker/forks.py."""

FORKSERVER_MODULE = "trainer_core.forkserver"
MAX_MESSAGE = 1 << 20  # one message's bytes, a request's environment included
# The environment a forked trainer may differ in from its forkserver: read by rlplane's code when it runs, never when a
# module is imported (what imports read, the forkserver read once, for every trainer it forks).
READ_AT_RUN_TIME = ("RLPLANE_",)
