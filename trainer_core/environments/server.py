"""A reference environment service: grpo.environment kind http's protocol, played by a builtin environment.

    python -m trainer_core.environments.server --env calculator --port 0
    -> prints its URL (http://127.0.0.1:<port>) as the first line of stdout, then serves until killed

POST /reset, /step and /cutoff as trainer_core/environments/http.py describes; a repeated (episode, turn) gets the
answer it got the first time; a body that breaks the protocol gets 400 {"error": "..."} and an unknown episode 404.
Stdlib only, for tests and as a template.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

from trainer_core.environments.base import Environment, Episode, Reply
from trainer_core.environments.calculator import Calculator
from trainer_core.rewards.server import JsonHandler, serve

SERVED = {"calculator": Calculator}


class NotFound(LookupError):
    pass


class Sessions:
    """The episodes a service is playing, each with the answers it gave (a retried turn gets the same one)."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.episodes: dict[str, tuple[Episode, dict[int, dict]]] = {}
        self.lock = threading.Lock()

    def handle(self, path: str, body: Any) -> dict:
        if not isinstance(body, dict) or not isinstance(body.get("episode"), str):
            raise ValueError('the body must be a JSON object with "episode": "<id>"')
        with self.lock:  # one request at a time: builtin environments are quick, and episodes stay consistent
            if path == "/reset":
                row = body.get("row")
                if not isinstance(row, dict):
                    raise ValueError('reset needs "row": {...}, the prompt row')
                episode = Episode(row=row)
                text = self.environment.reset(episode)
                self.episodes[body["episode"]] = (episode, {})
                return {"text": text}
            if body["episode"] not in self.episodes:
                raise NotFound(f"unknown episode {body['episode']!r}; POST /reset first")
            episode, answered = self.episodes[body["episode"]]
            if path == "/step":
                return self._step(episode, answered, body)
            if path == "/cutoff":
                return _wire(self.environment.cut_off(episode, str(body.get("why", "limits"))))
            raise NotFound(f"no {path}; POST /reset, /step or /cutoff")

    def _step(self, episode: Episode, answered: dict[int, dict], body: dict) -> dict:
        turn, message = body.get("turn"), body.get("message")
        if not isinstance(turn, int) or not isinstance(message, str):
            raise ValueError('step needs "turn": <number> and "message": "<the policy\'s text>"')
        if turn not in answered:
            episode.messages.append(("policy", message))
            reply = self.environment.step(episode, message)
            if not reply.done:
                episode.messages.append(("environment", reply.text))
            answered[turn] = _wire(reply)
        return answered[turn]


def _wire(reply: Reply) -> dict:
    body = dataclasses.asdict(reply)
    body["components"] = dict(reply.components)
    return body


def make_handler(sessions: Sessions) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            try:
                self.send_json(200, sessions.handle(self.path.rstrip("/"), self.body()))
            except NotFound as exc:
                self.send_json(404, {"error": str(exc)})
            except (ValueError, TypeError) as exc:
                self.send_json(400, {"error": str(exc)})

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer_core.environments.server", description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, choices=sorted(SERVED), help="builtin environment to serve")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default)")
    args = parser.parse_args(argv)
    return serve(args.host, args.port, make_handler(Sessions(SERVED[args.env]())))


if __name__ == "__main__":
    sys.exit(main())
