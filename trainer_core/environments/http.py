"""grpo.environment {kind: http, url: ...}: episodes played by a service. The protocol (docs/rl.md):

    POST <url>/reset   {"episode": id, "row": {...}}                      -> {"text": "...", "tools": [...]}  (both optional)
    POST <url>/step    {"episode": id, "turn": n, "message": "..."}       -> {"text": "..."}        the episode goes on
                                                                          or {"done": true, "reward": r, ...}
    POST <url>/cutoff  {"episode": id, "why": "max_turns"|"max_tokens"}   -> {"reward": r, ...}     the limits ended it

A reply may also carry "components" ({name: number}), "reason" (text), "tool_call" and "error" (booleans). The
trainer names each episode (a fresh hex id) and numbers its turns from 1, so a retried request is the same
request: a service must answer a repeated (episode, turn) as it did the first time. Retries and timeouts as the
http reward's (trainer_core/rewards/http.py); an answer that breaks the protocol fails the run, naming the field.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from typing import Any

import httpx

from rlplane.spec.environments import HttpEnvironment as HttpSpec
from trainer_core.environments.base import EnvError, Episode, Reply
from trainer_core.environments.tool_calls import functions_of, with_call_stop
from trainer_core.rewards.http import jsonable, post_with_retries


def parse_reply(body: Any, source: str, *, ended: bool = False) -> Reply:
    """A service's answer as a Reply; EnvError says what `source` got wrong. `ended`: it must be an end (cutoff)."""
    shape = '{"text": "..."} or {"done": true, "reward": <number>}'
    if not isinstance(body, Mapping):
        raise EnvError(f"{source} answered {body!r:.200}; it must answer a JSON object, {shape}")
    done = ended or body.get("done", False)
    if not isinstance(done, bool):
        raise EnvError(f'{source} answered "done": {done!r}; it must be true or false')
    flags = {}
    for name in ("tool_call", "error"):
        flags[name] = body.get(name, False)
        if not isinstance(flags[name], bool):
            raise EnvError(f'{source} answered "{name}": {flags[name]!r}; it must be true or false')
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise EnvError(f'{source} answered "reason": {reason!r}; it must be text or absent')
    if not done:
        text = body.get("text")
        if not isinstance(text, str):
            raise EnvError(f"{source} answered {json.dumps(body)[:200]}; an episode that goes on needs a text: {shape}")
        return Reply(text=text, reason=reason, **flags)
    reward = body.get("reward")
    if not _number(reward):
        raise EnvError(f'{source} ended an episode with "reward": {reward!r}; it must be a number')
    components = body.get("components") or {}
    if not isinstance(components, Mapping) or not all(_number(v) for v in components.values()):
        raise EnvError(f'{source} answered "components": {components!r:.200}; it must map names to numbers')
    parts = {str(k): float(v) for k, v in components.items()}
    return Reply(done=True, reward=float(reward), components=parts, reason=reason, **flags)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


class HttpEnvironment:
    def __init__(self, spec: HttpSpec, field: str) -> None:
        self.spec, self.field = spec, field
        self.stop = tuple(spec.stop) if spec.tool_format is None else with_call_stop(tuple(spec.stop), spec.tool_format)
        self.concurrency = spec.concurrency
        headers = {"Content-Type": "application/json", **spec.headers}
        self.client = httpx.Client(timeout=spec.timeout_s, headers=headers, limits=httpx.Limits(max_connections=spec.concurrency))
        self.base = spec.url.rstrip("/")

    def reset(self, episode: Episode) -> str:
        episode.state = uuid.uuid4().hex
        body = self._post("reset", {"episode": episode.state, "row": dict(episode.row)})
        text = body.get("text", "") if isinstance(body, Mapping) else None
        if not isinstance(text, str):
            raise EnvError(f'{self.base}/reset answered {body!r:.200}; it must answer {{"text": "..."}} or {{}}')
        if body.get("tools") is not None:
            try:
                episode.tools = functions_of(body["tools"])
            except ValueError as exc:
                raise EnvError(f"{self.base}/reset answered {exc}") from None
        return text

    def step(self, episode: Episode, message: str) -> Reply:
        body = self._post("step", {"episode": episode.state, "turn": episode.turns, "message": message})
        return parse_reply(body, f"{self.base}/step")

    def cut_off(self, episode: Episode, why: str) -> Reply:
        body = self._post("cutoff", {"episode": episode.state, "why": why})
        return parse_reply(body, f"{self.base}/cutoff", ended=True)

    def _post(self, path: str, payload: dict) -> Any:
        url, spec = f"{self.base}/{path}", self.spec
        content = json.dumps(payload, default=jsonable).encode()
        reply = post_with_retries(
            self.client, url, content, attempts=spec.attempts, backoff_s=spec.backoff_s, field=self.field,
            what="environment service", error=EnvError,
        )  # fmt: skip
        try:
            return reply.json()
        except ValueError:
            raise EnvError(f"environment service {url} answered {reply.text[:200]!r}, which is not JSON") from None

    def close(self) -> None:
        self.client.close()
