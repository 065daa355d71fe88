"""Request body limits, enforced on the declared length and on the bytes actually received."""

import json
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(Exception):
    pass


class BodyLimitMiddleware:
    def __init__(
        self, app: ASGIApp, default_limit: int, upload_limit: int, upload_paths: tuple[str | re.Pattern[str], ...]
    ) -> None:
        """`upload_paths`: where files are uploaded (upload_limit): exact paths, or patterns a path must match."""
        self.app, self.default_limit, self.upload_limit, self.upload_paths = app, default_limit, upload_limit, upload_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if b"%00" in scope.get("query_string", b"") or b"%00" in scope.get("raw_path", b"") or "\x00" in scope["path"]:
            # No column can hold NUL and no name contains it; refuse it before any query sees it.
            await _reject(send, 400, "NUL characters (%00) are not allowed in URLs")
            return
        limit = self.upload_limit if self._upload(scope["path"].rstrip("/")) else self.default_limit
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _reject(send, 413, f"request body larger than {limit} bytes")
            return
        received = 0
        started = exceeded = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if exceeded and not started:
                return  # FastAPI turns our exception into "400 error parsing the body"; the answer is 413
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except Exception:
            if not exceeded:
                raise
        if exceeded and not started:
            await _reject(send, 413, f"request body larger than {limit} bytes")

    def _upload(self, path: str) -> bool:
        return any(path == p if isinstance(p, str) else p.match(path) for p in self.upload_paths)


async def _reject(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
