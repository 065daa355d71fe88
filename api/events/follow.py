"""One stream: catch up from the database for itself when it starts (or falls) behind its run's feed, then read the feed."""

import time
from collections.abc import AsyncIterator, Callable, Iterator

from api.events import stream
from api.events.cursor import Cursor
from api.events.feed import FeedHub, RunFeed

KEEP_ALIVE = b": keep-alive\n\n"
# A stream waits this long at most for its feed's first read, even past its own timeout_s: a short stream on a
# busy server still says hello and what happened so far, and a feed that never reads does not hold it forever.
FIRST_READ_S = 10.0


async def follow(
    hub_of_loop: Callable[[], FeedHub],
    run_id: int,
    hello: Callable[[Cursor], bytes],
    start: Cursor | None,
    timeout_s: float | None,
    keepalive_s: float,
) -> AsyncIterator[bytes]:
    """The stream's messages from `start` (None: from now) until the run is deleted or `timeout_s` passes.

    No row is missed or sent twice: the feed's batches are read from `seq`, at most the feed's batch number when
    the catch-up read began (a read shared with other streams at the same cursor may have begun earlier), so a row
    is either in a batch from `seq` on or was committed before the catch-up read it; a row in both is skipped by id
    (Batch.for_stream)."""
    deadline = time.monotonic() + timeout_s if timeout_s else float("inf")
    hub = hub_of_loop()  # on the event loop that serves the stream: its feeds are that loop's
    feed = hub.join(run_id)
    try:
        first_read_by = max(deadline, time.monotonic() + FIRST_READ_S)
        while feed.cursor is None and not feed.ended and time.monotonic() < first_read_by:
            await feed.wait(feed.next_seq, first_read_by - time.monotonic())
        if feed.cursor is None:
            return  # the feed failed before its first read; the client reconnects
        cursor = start or feed.cursor
        yield hello(cursor)
        reader = _Reader(hub, feed, run_id, cursor, deadline)
        async for data in reader.messages(keepalive_s):
            yield data
    finally:
        await hub.leave(feed)


class _Reader:
    """Where one stream is: its cursor (the rows sent), the feed's next batch for it (`seq`), and when it last sent."""

    def __init__(self, hub: FeedHub, feed: RunFeed, run_id: int, cursor: Cursor, deadline: float) -> None:
        self.hub, self.feed, self.run_id, self.deadline = hub, feed, run_id, deadline
        self.cursor, self.seq, self.quiet_since = cursor, feed.next_seq, time.monotonic()
        self.gone = False  # the run was deleted

    async def messages(self, keepalive_s: float) -> AsyncIterator[bytes]:
        feed = self.feed
        behind = self.cursor.behind(feed.cursor)
        first_turn = True  # what happened before the stream started is sent even when its timeout has passed
        while first_turn or time.monotonic() < self.deadline:
            first_turn = False
            if behind or self.seq < feed.first_seq:
                async for data in self.catch_up():
                    yield data
                if self.gone:
                    return
                behind = False
            for data in self.from_feed():
                yield data
            if self.seq < feed.first_seq:
                continue
            if feed.ended == "deleted":
                yield stream.deleted(self.run_id, self.cursor)
            if feed.ended:
                return
            if time.monotonic() - self.quiet_since >= keepalive_s:
                yield KEEP_ALIVE
                self.quiet_since = time.monotonic()
            await feed.wait(self.seq, min(self.deadline, self.quiet_since + keepalive_s) - time.monotonic())

    async def catch_up(self) -> AsyncIterator[bytes]:
        """From the database, up to now (or the deadline): the rows the feed's batches no longer hold for us."""
        self.seq = self.feed.next_seq
        while True:
            batch, read_from = await self.hub.catch_up(self.feed, self.cursor)
            self.seq = min(self.seq, read_from)  # a shared read may have begun before this stream asked
            if batch is None:
                self.gone = True
                yield stream.deleted(self.run_id, self.cursor)
                return
            if batch.parts:
                self.cursor = batch.after
                yield batch.wire
                self.quiet_since = time.monotonic()
            if not batch.full or time.monotonic() >= self.deadline:
                return

    def from_feed(self) -> Iterator[bytes]:
        """The feed's batches from `seq`; a yield may wait long enough for the feed to drop batches."""
        while self.feed.first_seq <= self.seq < self.feed.next_seq:
            data, self.cursor = self.feed.batch(self.seq).for_stream(self.cursor)
            self.seq += 1
            if data:
                yield data
                self.quiet_since = time.monotonic()
