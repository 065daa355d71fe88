"""The `rlplane` command."""
