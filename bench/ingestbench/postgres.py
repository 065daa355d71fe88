"""The Postgres server both systems use: create and drop their databases, report its version and settings."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg


@dataclass
class Pg:
    url: str  # server URL without a database, e.g. postgresql://postgres@127.0.0.1:5432

    def db_url(self, db: str) -> str:
        return f"{self.url.rstrip('/')}/{db}"

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.db_url("postgres"), autocommit=True)

    def recreate(self, db: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{db}"')

    def drop(self, db: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

    def version(self) -> str:
        with self.admin() as conn:
            return conn.execute("SHOW server_version").fetchone()[0]

    def settings(self) -> dict[str, str]:
        with self.admin() as conn:
            names = ("shared_buffers", "synchronous_commit", "fsync", "max_connections")
            return {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}
