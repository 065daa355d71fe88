"""One stream: catch up from the database for itself when it starts (or falls) behind its run's feed, then read the feed."""

import time
from collections.abc import AsyncIterator, Callable

from api.events import stream
from api.events.cursor import Cursor
from api.events.feed import FeedHub

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
        quiet_since = time.monotonic()
        seq = feed.next_seq
        behind = cursor.behind(feed.cursor)
        first_turn = True  # what happened before the stream started is sent even when its timeout has passed
        while first_turn or time.monotonic() < deadline:
            first_turn = False
            if behind or seq < feed.first_seq:
                seq = feed.next_seq
                while True:
                    batch, read_from = await hub.catch_up(feed, cursor)
                    seq = min(seq, read_from)  # a shared read may have begun before this stream asked
                    if batch is None:
                        yield stream.deleted(run_id, cursor)
                        return
                    if batch.parts:
                        cursor = batch.after
                        yield batch.wire
                        quiet_since = time.monotonic()
                    if not batch.full or time.monotonic() >= deadline:
                        break
                behind = False
            while feed.first_seq <= seq < feed.next_seq:  # a yield may wait long enough for the feed to drop batches
                data, cursor = feed.batch(seq).for_stream(cursor)
                seq += 1
                if data:
                    yield data
                    quiet_since = time.monotonic()
            if seq < feed.first_seq:
                continue
            if feed.ended == "deleted":
                yield stream.deleted(run_id, cursor)
            if feed.ended:
                return
            if time.monotonic() - quiet_since >= keepalive_s:
                yield KEEP_ALIVE
                quiet_since = time.monotonic()
            await feed.wait(seq, min(deadline, quiet_since + keepalive_s) - time.monotonic())
    finally:
        await hub.leave(feed)
