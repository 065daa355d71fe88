"""The client commands of `rlplane`, one module per area."""
