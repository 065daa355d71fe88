"""Engine and session handling. The request's session commits on success, rolls back on error."""

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from api.unit_of_work import Callback, UnitOfWork, transaction


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record) -> None:
            cursor = dbapi_conn.cursor()
            # WAL lets SSE readers proceed while ingest writes; foreign keys are off by default in SQLite.
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    # No pre-ping: a SELECT 1 before every request costs a round trip; a connection found dead is
    # invalidated with the pool on its first error instead.
    return create_engine(url, pool_size=10, max_overflow=20)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def dispatcher_nudge(app: FastAPI) -> Callback | None:
    reconciler = getattr(app.state, "reconciler", None)
    return reconciler.nudge if reconciler is not None else None


def get_uow(request: Request) -> Iterator[UnitOfWork]:
    with transaction(request.app.state.sessionmaker, dispatcher_nudge(request.app)) as uow:
        yield uow


def get_session(uow: Annotated[UnitOfWork, Depends(get_uow, scope="function")]) -> Session:
    return uow.session


UowDep = Annotated[UnitOfWork, Depends(get_uow, scope="function")]
SessionDep = Annotated[Session, Depends(get_session)]
