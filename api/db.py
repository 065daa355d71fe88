"""Engine and session handling. The request's session commits on success, rolls back on error."""

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker


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


class UnitOfWork:
    """A session plus callbacks that run only after the commit succeeded (e.g. enqueueing jobs)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._after_commit: list[Callable[[], None]] = []

    def after_commit(self, callback: Callable[[], None]) -> None:
        self._after_commit.append(callback)

    def run_after_commit(self) -> None:
        callbacks, self._after_commit = self._after_commit, []
        for callback in callbacks:
            callback()


def get_uow(request: Request) -> Iterator[UnitOfWork]:
    factory: sessionmaker[Session] = request.app.state.sessionmaker
    with factory() as session:
        uow = UnitOfWork(session)
        try:
            yield uow
            session.commit()
        except BaseException:
            session.rollback()
            raise
        queued = session.info.pop("rlplane.dispatch", False)  # api.runs.service.DISPATCH
    reconciler = getattr(request.app.state, "reconciler", None)
    if queued and reconciler is not None:
        reconciler.nudge()  # send it now rather than on the next tick; the tick stays the safety net
    uow.run_after_commit()


def get_session(uow: Annotated[UnitOfWork, Depends(get_uow, scope="function")]) -> Session:
    return uow.session


UowDep = Annotated[UnitOfWork, Depends(get_uow, scope="function")]
SessionDep = Annotated[Session, Depends(get_session)]
