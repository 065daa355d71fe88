"""One poller per run, shared by every open stream of that run.

The first stream of a run starts its feed and the last one to leave stops it. The feed reads the run's tables
once per poll interval, in a worker thread with one session, and appends what it found to a short log of
batches that every stream reads at its own pace; so N open dashboards cost one query set per interval, not N.
"""

import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import anyio
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from api.auth.principal import Principal
from api.events import stream
from api.events.cursor import Cursor
from api.events.stream import Batch

log = logging.getLogger(__name__)
T = TypeVar("T")

# Rows kept for streams that read slower than the run is written; one further behind reads the database itself.
LOG_ROWS = 20_000
# Streams woken per turn of the event loop when a batch comes. Between turns the loop serves other requests and,
# waiting on its sockets, lets go of the GIL, which an ingest request's worker thread needs; 4 gave ingest a
# shorter p99 with 300 streams than 16 did (bench/sse_load.py), 1 no better than 4.
WAKE_AT_ONCE = 4
# Database connections SSE may hold at once (the request pool has 30), so requests such as ingest keep theirs.
READ_THREADS = 4


class RunFeed:
    def __init__(self, hub: "FeedHub", run_id: int) -> None:
        self.hub, self.run_id = hub, run_id
        self.cursor: Cursor | None = None  # past every row published; None until the first read
        self.ended: Literal["deleted", "failed"] | None = None
        self.batches: deque[Batch] = deque()
        self.first_seq = self.next_seq = 0  # sequence numbers of batches[0] and of the next batch to come
        self.kept_rows = 0
        self.streams = 0
        self.waiting: set[asyncio.Future] = set()
        self.stopping = asyncio.Event()
        self.task: asyncio.Task | None = None

    def batch(self, seq: int) -> Batch:
        return self.batches[seq - self.first_seq]

    async def wait(self, seq: int, timeout: float) -> None:
        """Until batch `seq` is published, the feed ends, or `timeout` passes."""
        if seq < self.next_seq or self.ended or timeout <= 0:
            return
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        # A timer that resolves the waiter, not a cancel scope: every open stream waits once per batch.
        timer = loop.call_later(timeout, _resolve, waiter)
        self.waiting.add(waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self.waiting.discard(waiter)

    async def run(self) -> None:
        try:
            self.cursor = await self.hub.in_thread(stream.current_cursor, self.run_id)
            self._wake()
            while not self.stopping.is_set():
                batch = await self.hub.in_thread(stream.read, self.run_id, self.cursor)
                if batch is None:
                    self.ended = "deleted"
                    break
                if batch.parts:
                    self._publish(batch)
                if not batch.full:
                    with anyio.move_on_after(self.hub.poll_s):
                        await self.stopping.wait()
        except Exception:
            log.exception("SSE feed failed run=%s", self.run_id)
            self.ended = "failed"  # its streams close; clients reconnect with Last-Event-ID to a new feed
        self.hub.forget(self)
        self._wake()

    def _publish(self, batch: Batch) -> None:
        self.batches.append(batch)
        self.next_seq += 1
        self.kept_rows += batch.rows
        self.cursor = batch.after
        while len(self.batches) > 1 and self.kept_rows > LOG_ROWS:
            self.kept_rows -= self.batches.popleft().rows
            self.first_seq += 1
        self._wake()

    def _wake(self) -> None:
        waiting, self.waiting = list(self.waiting), set()
        wake_in_turns(waiting)


def wake_in_turns(waiting: list[asyncio.Future], start: int = 0) -> None:
    """Resolve `waiting`, WAKE_AT_ONCE per turn of the event loop."""
    for waiter in waiting[start : start + WAKE_AT_ONCE]:
        _resolve(waiter)
    if start + WAKE_AT_ONCE < len(waiting):
        # The rest on the loop's next turn, after it has looked at its sockets: an ingest request arriving
        # meanwhile waits for a few streams' writes, not for every open dashboard's.
        asyncio.get_running_loop().call_soon(wake_in_turns, waiting, start + WAKE_AT_ONCE)


def _resolve(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass
class RunSeen:
    """A run as the opening check of one of its streams found it."""

    project_id: int
    status: str
    last_step: int | None
    at: float = field(default_factory=time.monotonic)


class SharedRead:
    """One catch-up read that the streams at one cursor wait for together (FeedHub.catch_up)."""

    def __init__(self) -> None:
        self.result: tuple[Batch | None, int] | None = None
        self.error: BaseException | None = None
        self.done_at: float | None = None
        self.waiting: list[asyncio.Future] = []


class FeedHub:
    """The feeds of one event loop: one per run that has open streams."""

    def __init__(self, sessions: sessionmaker[Session], poll_s: float) -> None:
        self.sessions, self.poll_s = sessions, poll_s
        self.feeds: dict[int, RunFeed] = {}
        self.limiter = anyio.CapacityLimiter(READ_THREADS)
        # A stream's opening checks (its token, its run) take one of these, not the request pool's threads
        self.open_limiter = anyio.CapacityLimiter(2)
        self.runs_seen: dict[int, RunSeen] = {}  # what the last opening check found of each run
        # Streams catching up read one at a time: a crowd of dashboards opening or reconnecting at once would
        # otherwise hold the GIL from ingest's worker threads for as long as their reads run side by side.
        self.catch_up_limiter = anyio.CapacityLimiter(1)
        # ... and streams at the same cursor share one read: after an API restart every open dashboard reconnects
        # at once with the id it had, nearly all the same one (they followed one feed). Reads under way, and those
        # done within the last poll interval, by (run, cursor).
        self.reads: dict[tuple[int, Cursor], SharedRead] = {}

    def join(self, run_id: int) -> RunFeed:
        feed = self.feeds.get(run_id)
        if feed is None:
            feed = self.feeds[run_id] = RunFeed(self, run_id)
            feed.task = asyncio.create_task(feed.run(), name=f"sse-feed-{run_id}")
        feed.streams += 1
        return feed

    async def leave(self, feed: RunFeed) -> None:
        feed.streams -= 1
        if feed.streams == 0:
            self.forget(feed)
            # Asked to stop, not cancelled: a cancelled task would leave its read running in the worker thread,
            # and a stream that has ended must leave no database work behind it.
            feed.stopping.set()
            if feed.task is not None:
                with anyio.CancelScope(shield=True):
                    await asyncio.wait([feed.task])

    def forget(self, feed: RunFeed) -> None:
        if self.feeds.get(feed.run_id) is feed:
            del self.feeds[feed.run_id]

    async def in_thread(self, read: Callable[..., T], *args, limiter: anyio.CapacityLimiter | None = None) -> T:
        def in_session() -> T:
            with self.sessions() as session:
                return read(session, *args)

        return await anyio.to_thread.run_sync(in_session, limiter=limiter or self.limiter)

    async def opening(
        self, run_id: int, principal: Principal | None, check: Callable[[Session, int], RunSeen]
    ) -> tuple[str, int | None]:
        """The run's status and step for a stream about to open on it, once the caller may read it. A caller whose
        token is cached, on a run a stream saw within the poll interval, is let in here, on the loop; any other is
        checked by `check(session, run_id)`, which raises what refuses it, in a thread of the feeds' own few."""
        seen = self.runs_seen.get(run_id)
        fresh = seen is not None and time.monotonic() - seen.at <= self.poll_s
        if fresh and principal is not None and principal.can(seen.project_id, "read"):
            return seen.status, seen.last_step
        seen = await self.in_thread(check, run_id, limiter=self.open_limiter)
        # Only what is still fresh is kept: the hub lives as long as the API, and sees every run ever opened.
        for stale in [k for k, s in self.runs_seen.items() if seen.at - s.at > self.poll_s]:
            del self.runs_seen[stale]
        self.runs_seen[run_id] = seen
        return seen.status, seen.last_step

    async def catch_up(self, feed: RunFeed, cursor: Cursor) -> tuple[Batch | None, int]:
        """The rows past `cursor` (None: the run is gone), and the feed's next batch number when the read began:
        a row committed after it is in the feed's batches from that number on. Streams at the same cursor share the
        read, so a stream may get one that began before it asked, with that earlier number."""
        key, now = (feed.run_id, cursor), time.monotonic()
        for old in [k for k, r in self.reads.items() if r.done_at is not None and now - r.done_at > self.poll_s]:
            del self.reads[old]
        shared = self.reads.get(key)
        if shared is None:
            shared = self.reads[key] = SharedRead()
            asyncio.create_task(self._read(key, shared, feed.next_seq), name=f"sse-catch-up-{feed.run_id}")
        if shared.done_at is None:
            # Its own waiter: a stream that goes away cancels only that. The readers are woken a few per turn of
            # the loop, as the feed wakes its streams: each then writes what it caught up on, which for hundreds of
            # streams at once would otherwise hold an ingest request up for all of their writes.
            waiter = asyncio.get_running_loop().create_future()
            shared.waiting.append(waiter)
            await waiter
        if shared.error is not None:
            raise shared.error
        assert shared.result is not None
        return shared.result

    async def _read(self, key: tuple[int, Cursor], shared: SharedRead, seq: int) -> None:
        try:
            shared.result = await self.in_thread(stream.read, *key, limiter=self.catch_up_limiter), seq
        except BaseException as exc:  # the streams that wait for it end; a failed read is not kept for the next
            shared.error = exc
            self.reads.pop(key, None)
        shared.done_at = time.monotonic()
        wake_in_turns(shared.waiting)


def hub_for(app: FastAPI) -> FeedHub:
    """The hub of the running event loop (a test client runs one loop per client, on one app)."""
    hubs = getattr(app.state, "event_hubs", None)
    if hubs is None:
        hubs = app.state.event_hubs = weakref.WeakKeyDictionary()
    loop = asyncio.get_running_loop()
    if loop not in hubs:
        hubs[loop] = FeedHub(app.state.sessionmaker, app.state.settings.sse_poll_s)
    return hubs[loop]
