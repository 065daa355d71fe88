import time
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from api.auth.deps import Reader
from api.db import SessionDep
from api.events import stream
from api.events.cursor import Cursor
from api.runs.service import readable_run
from api.values import RunId

router = APIRouter(prefix="/api/v1/runs/{run_id}/events", tags=["events"])


@router.get(
    "",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "events: hello, status, metrics, logs, samples, deleted"}
    },
)
def run_events(
    run_id: RunId,
    principal: Reader,
    session: SessionDep,
    request: Request,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=100)] = None,
    since_start: Annotated[bool, Query(description="Replay everything stored, not only what is new")] = False,
    timeout_s: Annotated[float | None, Query(gt=0, le=86_400, description="Close the stream after this long")] = None,
) -> StreamingResponse:
    """Live updates of one run. Reconnect with Last-Event-ID to continue exactly where you left off."""
    run = readable_run(session, principal, run_id)
    cursor = Cursor.decode(last_event_id)
    if cursor is None:
        cursor = Cursor() if since_start else stream.current_cursor(session, run_id)
    first = stream.hello(run, cursor)
    settings = request.app.state.settings
    factory = request.app.state.sessionmaker

    def poll_once(at: Cursor):
        with factory() as poll_session:
            return stream.poll(poll_session, run_id, at)

    async def body() -> AsyncIterator[str]:
        nonlocal cursor
        yield first
        deadline = time.monotonic() + timeout_s if timeout_s else None
        quiet_since = time.monotonic()
        while deadline is None or time.monotonic() < deadline:
            messages, cursor, alive = await run_in_threadpool(poll_once, cursor)
            for message in messages:
                yield message
            if not alive:
                return
            if messages:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > settings.sse_keepalive_s:
                quiet_since = time.monotonic()
                yield ": keep-alive\n\n"
            await anyio.sleep(settings.sse_poll_s)

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)
