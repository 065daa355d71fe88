"""Alembic migrations; applied by `rlplane api` on start and by the tests."""
