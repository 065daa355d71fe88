"""The trainer reports through the contract's reporter (rlplane.reporting), which the SDK shares."""

from rlplane.reporting import *  # noqa: F403
from rlplane.reporting import __all__  # noqa: F401
