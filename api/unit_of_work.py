"""One transaction, and the work that must wait until it has committed.

Jobs and nudges go out only after the commit: a worker sent a run the database does not hold yet would
find nothing to lease, and a rollback must drop them. Services get only a Session, so the unit of work
that opened it rides in `session.info`, where `unit_of_work(session)` finds it whoever commits: a
request, the reporting hot path or the reconciler's thread.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session, sessionmaker

_KEY = "rlplane.unit_of_work"

Callback = Callable[[], None]


class UnitOfWork:
    def __init__(self, session: Session, nudge_dispatcher: Callback | None = None) -> None:
        """`nudge_dispatcher`: wakes this process's dispatcher (None where none runs: its tick, or another
        API process's, sends the run anyway)."""
        self.session = session
        self._nudge_dispatcher = nudge_dispatcher
        self._after_commit: list[Callback] = []
        session.info[_KEY] = self

    def after_commit(self, callback: Callback) -> None:
        """Run `callback` once the transaction has committed; registered twice, it runs once."""
        if callback not in self._after_commit:
            self._after_commit.append(callback)

    def dispatch_after_commit(self) -> None:
        """A run became queued: wake the dispatcher once it is committed, so it sends it now rather than on
        its next tick (which stays the safety net). However many runs one transaction queues, it wakes once."""
        if self._nudge_dispatcher is not None:
            self.after_commit(self._nudge_dispatcher)

    def commit(self) -> None:
        self.session.commit()
        callbacks, self._after_commit = self._after_commit, []
        for callback in callbacks:
            callback()

    def rollback(self) -> None:
        self._after_commit = []
        self.session.rollback()


def unit_of_work(session: Session) -> UnitOfWork:
    uow = session.info.get(_KEY)
    if uow is None:
        # Deferred work would be dropped without a word: open the session with transaction() instead.
        raise RuntimeError("this session has no unit of work; open it with api.unit_of_work.transaction()")
    return uow


@contextmanager
def transaction(factory: sessionmaker[Session], nudge_dispatcher: Callback | None = None) -> Iterator[UnitOfWork]:
    """A session that commits when the block ends, then runs the after-commit work; an error rolls both back."""
    with factory() as session:
        uow = UnitOfWork(session, nudge_dispatcher)
        try:
            yield uow
        except BaseException:
            uow.rollback()
            raise
        uow.commit()
