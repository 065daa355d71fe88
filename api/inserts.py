"""Bulk INSERT ... ON CONFLICT DO NOTHING for Postgres and SQLite: the core of idempotent ingest.

The hot path: one fixed statement text per table, so nothing is compiled per request. Postgres gets
the whole batch as one JSON document expanded by json_to_recordset (building it costs a third of
what adapting one array per column does); SQLite takes an executemany.
"""

import functools
import json
import math
from typing import Any

import orjson
from pydantic import BaseModel, Field
from sqlalchemy import JSON, Float, Table, TextClause, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from rlplane.floats import encode


class IngestResult(BaseModel):
    accepted: int = Field(description="Rows stored by this request")
    duplicates: int = Field(description="Rows whose key was already stored; left unchanged")


def ingest_rows(session: Session, model: type, rows: list[dict[str, Any]], unique: list[str]) -> IngestResult:
    accepted = insert_ignoring_duplicates(session, model, rows, unique) if rows else 0
    return IngestResult(accepted=accepted, duplicates=len(rows) - accepted)


@functools.cache
def _statement(dialect: str, table: Table, columns: tuple[str, ...], unique: tuple[str, ...]) -> TextClause:
    names = ", ".join(f'"{c}"' for c in columns)  # quoted: "index" is a keyword
    keys = ", ".join(f'"{c}"' for c in unique)
    conflict = f"ON CONFLICT ({keys}) DO NOTHING"
    if dialect == "postgresql":
        pg = postgresql.dialect()
        record = ", ".join(f'"{c}" {table.c[c].type.compile(dialect=pg)}' for c in columns)
        rows = f"json_to_recordset(CAST(:rows AS json)) AS r({record})"
        return text(f"INSERT INTO {table.name} ({names}) SELECT {names} FROM {rows} {conflict}")
    values = ", ".join(f":{c}" for c in columns)
    return text(f"INSERT INTO {table.name} ({names}) VALUES ({values}) {conflict}")


def _json_document(rows: list[dict[str, Any]], float_columns: list[str]) -> str:
    """JSON has no literal for NaN or infinity; Postgres reads these strings into float8 as such.

    The rows are the caller's freshly built dicts, so they are changed in place rather than copied.
    """
    for row in rows:
        for column in float_columns:
            value = row[column]
            if value is not None and not math.isfinite(value):
                row[column] = encode(value)
    return orjson.dumps(rows).decode()


def insert_ignoring_duplicates(session: Session, model: type, rows: list[dict[str, Any]], unique: list[str]) -> int:
    """Insert rows, skipping those whose unique key exists; return how many were inserted."""
    table: Table = model.__table__
    columns = tuple(rows[0])
    json_columns = {c for c in columns if isinstance(table.c[c].type, JSON)}
    dialect = session.get_bind().dialect.name
    statement = _statement(dialect, table, columns, tuple(unique))
    connection = session.connection()
    if dialect == "postgresql":
        float_columns = [c for c in columns if isinstance(table.c[c].type, Float)]
        return connection.execute(statement, {"rows": _json_document(rows, float_columns)}).rowcount
    if json_columns:
        rows = [{**r, **{c: json.dumps(r[c]) for c in json_columns}} for r in rows]
    return connection.execute(statement, rows).rowcount
