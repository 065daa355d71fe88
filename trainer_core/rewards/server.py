"""A reference reward service: the HTTP protocol of reward kind http, scored by a builtin task's reward.

    python -m trainer_core.rewards.server --task arithmetic --port 0
    -> prints its URL (http://127.0.0.1:<port>/) as the first line of stdout, then serves until killed

POST / with {"prompts": [...], "responses": [...], "metadata": [{...}]} -> {"rewards": [...]}; a body
that breaks the protocol gets 400 {"error": "..."}. Stdlib only, for tests and as a template.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from trainer_core.data.tasks import BUILTIN_REWARDS


def score_body(body: dict, reward: Callable[..., float]) -> list[float]:
    """The rewards of one request body; ValueError says which part of it is wrong."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    prompts, responses = body.get("prompts"), body.get("responses")
    metadata = body.get("metadata") or [{} for _ in responses or []]
    if not (isinstance(prompts, list) and isinstance(responses, list) and isinstance(metadata, list)):
        raise ValueError("prompts, responses and metadata must be lists")
    if not len(prompts) == len(responses) == len(metadata):
        raise ValueError("prompts, responses and metadata must have the same length")
    return [float(reward(p, r, (m or {}).get("answer"))) for p, r, m in zip(prompts, responses, metadata, strict=True)]


class JsonHandler(BaseHTTPRequestHandler):
    """What the reference servers share: a JSON body in, a JSON answer out, no per-request log lines (stdout carries
    the URL line only; a trainer's logs are the place for per-request noise)."""

    def body(self) -> object:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length))

    def send_json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def make_handler(reward: Callable[..., float]) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            try:
                rewards = score_body(self.body(), reward)
            except (ValueError, TypeError, AttributeError) as exc:
                self.send_json(400, {"error": str(exc)})
                return
            self.send_json(200, {"rewards": rewards})

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer_core.rewards.server", description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, choices=sorted(BUILTIN_REWARDS), help="builtin task whose reward scores")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default)")
    args = parser.parse_args(argv)
    return serve(args.host, args.port, make_handler(BUILTIN_REWARDS[args.task]), "/")


def serve(host: str, port: int, handler: type[BaseHTTPRequestHandler], path: str = "") -> int:
    """Serve until interrupted, the URL (with `path`) printed first on stdout for whoever started the server."""
    server = ThreadingHTTPServer((host, port), handler)
    host, port = server.server_address[:2]
    print(f"http://{host}:{port}{path}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
