from functools import partial
from typing import Annotated

import anyio
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.types import Receive, Scope, Send

from api.auth.deps import cached_principal, principal_from_request
from api.events import stream
from api.events.cursor import Cursor
from api.events.feed import RunSeen, hub_for
from api.events.follow import follow
from api.exceptions import Forbidden
from api.params import RunId
from api.runs.service import readable_run

router = APIRouter(prefix="/api/v1/runs/{run_id}/events", tags=["events"])


class EventStreamResponse(StreamingResponse):
    """Ends as soon as the client goes away, and closes its generator then, so the stream leaves its run's feed at
    once. Starlette watches for the disconnect only under ASGI < 2.4; otherwise an idle stream would hear of it at
    its next keep-alive, and hold a server's graceful shutdown until then."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:

            async def respond() -> None:
                try:
                    await self.stream_response(send)
                except OSError:
                    pass  # the client went away mid-write
                finally:
                    with anyio.CancelScope(shield=True):
                        await self.body_iterator.aclose()
                group.cancel_scope.cancel()

            group.start_soon(respond)
            await self.listen_for_disconnect(receive)
            group.cancel_scope.cancel()


@router.get(
    "",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "events: hello, status, metrics, logs, samples, deleted"}
    },
)
async def run_events(
    run_id: RunId,
    request: Request,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=100)] = None,
    since_start: Annotated[bool, Query(description="Replay everything stored, not only what is new")] = False,
    timeout_s: Annotated[float | None, Query(gt=0, le=86_400, description="Close the stream after this long")] = None,
) -> StreamingResponse:
    """Live updates of one run (a reader's token, scope read). Reconnect with Last-Event-ID to continue exactly where
    you left off."""
    # Checked without the request thread pool, which ingest shares: after an API restart every open dashboard
    # reconnects at once, and hundreds of opens queued there held ingest up for a second (FeedHub.opening).
    run_status, last_step = await hub_for(request.app).opening(run_id, cached_principal(request), partial(_readable, request))
    start = Cursor.decode(last_event_id) or (Cursor() if since_start else None)
    settings = request.app.state.settings

    # The stream's generator itself is the body, with no generator around it: every open dashboard resumes it once
    # per message. EventStreamResponse closes it; the run's feed is the event loop's, found on its first step.
    hello = partial(stream.hello, run_id, run_status, last_step)
    messages = follow(partial(hub_for, request.app), run_id, hello, start, timeout_s, settings.sse_keepalive_s)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return EventStreamResponse(messages, media_type="text/event-stream", headers=headers)


def _readable(request: Request, session: Session, run_id: int) -> RunSeen:
    """The run as a stream opens on it, for a caller whose token may read it (else the error that says why)."""
    principal = principal_from_request(session, request)
    if not principal.has_scope("read"):
        raise Forbidden("this token lacks the 'read' scope")
    run = readable_run(session, principal, run_id)
    return RunSeen(run.project_id, run.status, run.last_step)
