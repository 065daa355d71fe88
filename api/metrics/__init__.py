"""Metric ingest (idempotent) and downsampled series."""
