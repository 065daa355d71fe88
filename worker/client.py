"""The few API calls a worker makes, over HTTP with its worker token."""

from __future__ import annotations

import time
from typing import Any

import httpx


class LeaseRefused(Exception):
    """The run is not queued any more (a duplicate delivery, or it was cancelled)."""


class Superseded(Exception):
    """Our fencing token is stale: the run was marked lost or cancelled and may run elsewhere."""


class TokenRefused(Exception):
    """The worker's token is not one a worker can work with: said once at start, with the token it needs."""


CREATE_WORKER_TOKEN = "create one with `rlplane tokens create --name <node> --scope worker` (an admin's command)"


class ApiClient:
    def __init__(self, api_url: str, token: str, timeout: float = 10.0) -> None:
        base = api_url.rstrip("/")
        self.base = base if base.endswith("/api/v1") else f"{base}/api/v1"
        self.http = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {token}"})

    def close(self) -> None:
        self.http.close()

    def lease(self, run_id: int, worker: str) -> dict[str, Any]:
        response = self.http.post(f"{self.base}/runs/{run_id}/lease", json={"worker": worker})
        if response.status_code in (404, 409):
            raise LeaseRefused(response.json().get("detail", response.text))
        response.raise_for_status()
        return response.json()

    def status(
        self,
        run_id: int,
        attempt: int,
        status: str,
        reason: str = "",
        last_step: int | None = None,
        handed_back: bool = False,
        failure: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"attempt": attempt, "status": status, "reason": reason[-2000:]}
        if handed_back:
            body["handed_back"] = True
        if failure is not None:
            body["failure"] = failure
        if last_step is not None:
            body["last_step"] = last_step
        response = self.http.post(f"{self.base}/runs/{run_id}/status", json=body)
        if response.status_code == 409:
            raise Superseded(response.json().get("detail", response.text))
        response.raise_for_status()
        return response.json()

    def check_token(self, tries: int = 10, wait_s: float = 2.0) -> None:
        """Raise TokenRefused unless the API takes this token with the worker scope. An API that cannot be
        reached yet (it may be starting beside this worker) is tried `tries` times, then left to the heartbeats."""
        for attempt in range(tries):
            try:
                response = self.http.get(f"{self.base}/me")
                break
            except httpx.TransportError:
                if attempt == tries - 1:
                    return
                time.sleep(wait_s)
        if response.status_code == 401:
            raise TokenRefused(
                f"the API at {self.base} does not accept this token (unknown, revoked or expired); {CREATE_WORKER_TOKEN}"
            )
        response.raise_for_status()
        scopes = response.json().get("scopes", [])
        if "worker" not in scopes:
            raise TokenRefused(
                f"this token has the scopes {', '.join(scopes) or 'none'}, but a worker needs a token with the scope worker; "
                f"{CREATE_WORKER_TOKEN}"
            )

    def heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(f"{self.base}/workers/heartbeat", json=body)
        response.raise_for_status()
        return response.json()
