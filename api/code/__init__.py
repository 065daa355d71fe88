"""Code snapshots of command runs: uploaded at submit (rlplane submit --code DIR), stored by their sha256."""
