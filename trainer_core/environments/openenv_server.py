"""grpo.environment {kind: openenv, url: ...}: episodes played by an OpenEnv environment server, in openenv-core's own
protocol (spoken here without importing openenv): one WebSocket session per episode at <url>/ws,

    {"type": "reset", "data": {the row's columns}}  -> {"type": "observation", "data": {"observation": {...},
                                                                                        "reward": r, "done": d}}
    {"type": "step", "data": {the action's fields}} -> the same, or {"type": "error", "data": {"message": ...}}
    {"type": "close"}

and the Action's JSON schema at GET <url>/schema ({"action": {...}}), whose one required field a bare message fills.
Actions and observations read as openenv.py reads an environment in the trainer's process, rewards summed over the
episode's steps. An action the server refuses is answered to the policy (an error turn); a server that cannot be
reached or answers outside the protocol fails the run, naming the field. A session lost mid-episode cannot be
retried (its state lives on the server), so it fails the run too.

A server whose Action is OpenEnv's CallToolAction serves an MCP tool environment: its tools are offered on the
episode after the reset ({"type": "step", "data": {"type": "list_tools"}}) and each turn's tool call is a call_tool
step, in the tags of tool_calls.py.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import ClientConnection, connect

from rlplane.spec.environments import OpenEnvEnvironment as OpenEnvSpec
from trainer_core.environments import tool_calls
from trainer_core.environments.base import EnvError, Episode, Reply, answer, end
from trainer_core.environments.openenv import action_fields, shown_text
from trainer_core.rewards.http import jsonable

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # observations may carry screenshots or pages


@dataclass(eq=False)  # kept in a set: each session is itself
class _Session:
    socket: ClientConnection
    held: contextlib.ExitStack
    total: float = 0.0


class OpenEnvServer:
    def __init__(self, spec: OpenEnvSpec, field: str) -> None:
        self.spec, self.field = spec, field
        self.concurrency = spec.concurrency
        self.sessions = spec.sessions  # rollout/episodes.py plays at most this many of a rank's episodes at once
        base = spec.url.rstrip("/")
        self.ws_url = re.sub(r"^http", "ws", base) + "/ws"  # http -> ws, https -> wss
        schema = self._action_schema(re.sub(r"^ws", "http", base) + "/schema")
        self.required = [str(name) for name in schema.get("required", [])]
        self.tools = tool_calls.is_tool_action(schema)
        stop = tuple(spec.stop)
        self.tool_format = spec.tool_format
        self.stop = tool_calls.with_call_stop(stop, self.tool_format) if self.tools else stop
        self._open: set[_Session] = set()
        self._lock = threading.Lock()

    def _action_schema(self, url: str) -> Mapping[str, Any]:
        try:
            reply = httpx.get(url, timeout=self.spec.timeout_s)
            reply.raise_for_status()
            schema = reply.json()["action"]
            if not isinstance(schema, Mapping) or not isinstance(schema.get("required", []), list):
                raise TypeError(f"its action is {str(schema)[:200]!r}")
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise EnvError(
                f"{self.field}.url: {url} gave no Action schema ({exc}); is it an OpenEnv environment server?"
            ) from None
        return schema

    def reset(self, episode: Episode) -> str:
        held = contextlib.ExitStack()  # the connection's context, held across the episode's calls
        try:
            socket = held.enter_context(connect(self.ws_url, open_timeout=self.spec.timeout_s, max_size=MAX_MESSAGE_BYTES))
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise EnvError(f"{self.field}.url: no session at {self.ws_url} ({exc})") from None
        session = episode.state = _Session(socket, held)
        with self._lock:
            self._open.add(session)
        kind, data = self._ask(session, "reset", dict(episode.row))
        if kind == "error":
            why = _why(data)
            if data.get("code") == "CAPACITY_REACHED":  # every live episode holds a session
                allowed = data.get("max_sessions")
                why += (
                    f"; each live episode holds a session: set {self.field}.sessions to {allowed or 'what it allows'} "
                    "(divided among the ranks that share the server), and a rank plays at most that many episodes at once"
                )
            raise EnvError(f"{self.field}: the OpenEnv server at {self.ws_url} refused to reset: {why}")
        observation, reward, _ = self._observed(data)
        session.total += reward
        if not self.tools:
            return shown_text(observation)
        kind, data = self._ask(session, "step", {"type": "list_tools"})
        try:
            if kind == "error":
                raise ValueError(f"list_tools was refused: {_why(data)}")
            episode.tools = tool_calls.schemas(self._observed(data)[0].get("tools"))
        except ValueError as exc:
            raise EnvError(f"{self.field}: the OpenEnv server at {self.ws_url}: {exc}") from None
        return shown_text(observation)

    def step(self, episode: Episode, message: str) -> Reply:
        session: _Session = episode.state
        call = None
        try:
            if self.tools:
                call = tool_calls.read_call(message, self.tool_format, episode.tools)
                fields = {"type": "call_tool", "tool_name": call.name, "arguments": call.arguments}
            else:
                fields = action_fields(message, self.required)
        except ValueError as exc:
            if self.tools:
                refused = tool_calls.refusal(str(exc), self.tool_format)
                return answer(refused, error=True, reason=f"invalid tool call: {exc}")
            return answer(f"invalid action: {exc}", error=True, reason=f"invalid action: {exc}")
        kind, data = self._ask(session, "step", fields)
        if kind == "error":
            why = _why(data)
            return answer(f"invalid action: {why}", error=True, reason=f"invalid action: {why}")
        observation, reward, done = self._observed(data)
        session.total += reward
        if done:
            self._close(session)
            return end(session.total, components={"openenv": session.total})
        if not self.tools:
            return answer(shown_text(observation))
        assert call is not None  # a tool environment's step read one above
        return tool_calls.answered(observation, self.tool_format, call)

    def cut_off(self, episode: Episode, why: str) -> Reply:
        session: _Session = episode.state
        self._close(session)
        return end(session.total, components={"openenv": session.total}, reason=f"cut off by {why}")

    def close(self) -> None:
        with self._lock:
            left = list(self._open)
        for session in left:  # episodes a failure abandoned: their sessions end on the server too
            self._close(session)

    def _ask(self, session: _Session, kind: str, data: dict[str, Any]) -> tuple[str, Mapping[str, Any]]:
        where = f"{self.field}: the OpenEnv server at {self.ws_url}"
        try:
            session.socket.send(json.dumps({"type": kind, "data": data}, default=jsonable))
        except (ConnectionClosed, OSError):
            pass  # a server may say why, then close, before it reads a word (at capacity): its reason is still to read
        try:
            raw = session.socket.recv(timeout=self.spec.timeout_s)
        except TimeoutError:
            raise EnvError(f"{where} did not answer a {kind} within {self.spec.timeout_s} s") from None
        except (ConnectionClosed, OSError) as exc:
            raise EnvError(f"{where} lost the episode's session ({exc})") from None
        try:
            body = json.loads(raw)
            answered, payload = body["type"], body.get("data") or {}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise EnvError(f"{where} answered {str(raw)[:200]!r}, outside OpenEnv's protocol") from None
        if answered not in ("observation", "error") or not isinstance(payload, Mapping):
            raise EnvError(f"{where} answered a {kind} with {str(raw)[:200]!r}; an observation or an error was due")
        return answered, payload

    def _observed(self, data: Mapping[str, Any]) -> tuple[dict[str, Any], float, bool]:
        observation, reward, done = data.get("observation", {}), data.get("reward"), data.get("done", False)
        where = f"{self.field}: the OpenEnv server at {self.ws_url}"
        if not isinstance(observation, dict) or not isinstance(done, bool):
            raise EnvError(f"{where} answered {json.dumps(data, default=str)[:200]}, not an observation")
        if reward is None:
            return observation, 0.0, done
        if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
            raise EnvError(f"{where} answered a reward of {reward!r}; it must be a finite number or null")
        return observation, float(reward), done

    def _close(self, session: _Session) -> None:
        with self._lock:
            if session not in self._open:
                return
            self._open.discard(session)
        try:
            session.socket.send(json.dumps({"type": "close"}))
            session.socket.recv(timeout=1.0)  # the server closes the session: wait for it rather than race it
        except (ConnectionClosed, OSError, TimeoutError):
            pass
        finally:
            session.held.close()


def _why(data: Mapping[str, Any]) -> str:
    """An error answer's reason: its message and the first validation error, if any."""
    message = str(data.get("message") or "refused")
    errors = data.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], Mapping):
        first = errors[0]
        where = ".".join(str(part) for part in first.get("loc") or [])
        message += f": {where + ': ' if where else ''}{first.get('msg', '')}"
    return message
