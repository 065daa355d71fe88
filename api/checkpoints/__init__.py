"""Checkpoint records and file downloads through the API."""
