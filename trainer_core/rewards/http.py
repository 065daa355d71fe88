"""reward: {kind: http, url: ...}: a scoring service. The protocol (docs/rewards.md):

    POST <url>  {"prompts": [...], "responses": [...], "metadata": [{...}, ...]}   (batch_size rows at most)
    200         {"rewards": [r0, r1, ...]}                                         (one finite number per row)

An unreachable service, a timeout, 429 or 5xx is tried `attempts` times in all, waiting
backoff_s, 2·backoff_s, ... between tries; any other answer fails at once, since trying again
would get the same one.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from rlplane.spec.sections import HttpReward
from trainer_core.rewards.base import RewardError, checked_scores

_RETRIED_STATUS = {408, 429, 500, 502, 503, 504}


class HttpScorer:
    def __init__(self, spec: HttpReward, field: str) -> None:
        self.spec, self.field = spec, field
        headers = {"Content-Type": "application/json", **spec.headers}
        self.client = httpx.Client(timeout=spec.timeout_s, headers=headers)

    def __call__(self, prompts: list[str], responses: list[str], metadata: list[dict]) -> list[float]:
        size, scores = self.spec.batch_size, []
        for start in range(0, len(responses), size):
            end = start + size
            scores += self._batch(prompts[start:end], responses[start:end], metadata[start:end])
        return scores

    def _batch(self, prompts: list[str], responses: list[str], metadata: list[dict]) -> list[float]:
        body = json.dumps({"prompts": prompts, "responses": responses, "metadata": metadata}, default=jsonable)
        reply = self._post(body.encode())
        try:
            rewards = reply.json()["rewards"]
        except (ValueError, KeyError, TypeError):
            raise RewardError(
                f'reward service {self.spec.url} answered {reply.text[:200]!r}; it must answer {{"rewards": [...]}}'
            ) from None
        return checked_scores(rewards, len(responses), f"reward service {self.spec.url}")

    def _post(self, body: bytes) -> httpx.Response:
        spec = self.spec
        return post_with_retries(
            self.client, spec.url, body, attempts=spec.attempts, backoff_s=spec.backoff_s, field=self.field,
            what="reward service", error=RewardError,
        )  # fmt: skip

    def close(self) -> None:
        self.client.close()


def jsonable(value: Any) -> Any:
    """numpy scalars and arrays from parquet rows as plain JSON; anything else as its text."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def post_with_retries(
    client: httpx.Client,
    url: str,
    body: bytes,
    *,
    attempts: int,
    backoff_s: float,
    field: str,
    what: str,
    error: type[Exception],
) -> httpx.Response:
    """POST `body` until a 200: an unreachable service, a timeout, 429 or 5xx is tried `attempts` times in all, waiting
    backoff_s, 2·backoff_s, ... between tries; any other status raises `error` at once (trying again would get the
    same answer). `what` and `field` name the service and its spec section in the messages."""
    problem = ""
    for attempt in range(attempts):
        if attempt:
            time.sleep(backoff_s * 2 ** (attempt - 1))
        try:
            reply = client.post(url, content=body)
        except httpx.TransportError as exc:  # refused, reset, DNS, timeout
            problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            continue
        if reply.status_code in _RETRIED_STATUS:
            problem = f"HTTP {reply.status_code}"
            continue
        if reply.status_code != 200:
            raise error(
                f"{what} {url} answered HTTP {reply.status_code}: {reply.text[:200]!r}; check {field}.url and {field}.headers"
            )
        return reply
    raise error(
        f"{what} {url} failed {attempts} attempts (last: {problem}); check that it is running and reachable from the "
        f"workers, or raise {field}.timeout_s or {field}.attempts"
    )
