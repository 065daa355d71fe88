"""Run log lines: idempotent append, tail with an offset."""
