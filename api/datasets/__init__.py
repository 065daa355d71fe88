"""Uploaded datasets: validated against their kind, stored under the artifact root."""
