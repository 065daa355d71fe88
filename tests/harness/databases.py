"""Throwaway Postgres databases on the test server (RLPLANE_TEST_POSTGRES), one per stack or session."""

from __future__ import annotations

import os
import uuid

from sqlalchemy import create_engine, text


def postgres_admin_url() -> str:
    """Read when used, not at import: the session may start a throwaway server and set the variable first."""
    return os.environ.get("RLPLANE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def create_postgres_database(admin_url: str | None = None) -> str:
    admin_url = admin_url or postgres_admin_url()
    name = f"rlplane_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return admin_url.rsplit("/", 1)[0] + "/" + name


def drop_postgres_database(url: str, admin_url: str | None = None) -> None:
    admin_url = admin_url or postgres_admin_url()
    name = url.rsplit("/", 1)[1]
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
