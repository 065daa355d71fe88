"""Runs: submission, state machine, lineage, leases."""
