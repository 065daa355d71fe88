"""Bulk INSERT ... ON CONFLICT DO NOTHING for Postgres and SQLite: the core of idempotent ingest."""

from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

_DIALECT_INSERT = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}
# Postgres allows 65535 bind parameters per statement; SQLite 32766 in modern builds.
_MAX_PARAMS = 30_000


class IngestResult(BaseModel):
    accepted: int = Field(description="Rows stored by this request")
    duplicates: int = Field(description="Rows whose key was already stored; left unchanged")


def ingest_rows(session: Session, model: type, rows: list[dict[str, Any]], unique: list[str]) -> IngestResult:
    accepted = insert_ignoring_duplicates(session, model, rows, unique) if rows else 0
    return IngestResult(accepted=accepted, duplicates=len(rows) - accepted)


def insert_ignoring_duplicates(session: Session, model: type, rows: list[dict[str, Any]], unique: list[str]) -> int:
    """Insert rows, skipping those whose unique key exists; return how many were inserted."""
    insert = _DIALECT_INSERT[session.get_bind().dialect.name]
    per_statement = max(1, _MAX_PARAMS // max(1, len(rows[0])))
    inserted = 0
    for start in range(0, len(rows), per_statement):
        chunk = rows[start : start + per_statement]
        stmt = insert(model).values(chunk).on_conflict_do_nothing(index_elements=unique).returning(model.id)
        inserted += len(session.execute(stmt).all())
    return inserted
