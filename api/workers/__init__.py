"""Worker heartbeats and the worker list."""
