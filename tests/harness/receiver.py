"""An HTTP server on loopback that stands where a webhook's service would: it records what is posted to it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """An HTTP server on loopback that records every POST (path, JSON body) and answers `status`; with
    `fail_first`, the first POST to each path is answered 503 (a service down at first)."""

    def __init__(self, fail_first: bool = False) -> None:
        self.posts: list[tuple[str, dict]] = []
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                first = fail_first and all(path != self.path for path, _ in receiver.posts)
                receiver.posts.append((self.path, json.loads(body or b"{}")))
                self.send_response(503 if first else receiver.status)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
