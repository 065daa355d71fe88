"""The few API calls a worker makes, with its worker token, over the contract's client (rlplane.client)."""

from __future__ import annotations

import time
from typing import Any

from rlplane.client import ApiError, Client, Unreachable
from rlplane.wire import Heartbeat, Lease, NodeEnd, NodeJoin, NodeLease, Rendezvous, StatusUpdate


class LeaseRefused(Exception):
    """The run is not queued any more (a duplicate delivery, or it was cancelled)."""


class Superseded(Exception):
    """Our fencing token is stale: the run was marked lost or cancelled and may run elsewhere."""


class TokenRefused(Exception):
    """The worker's token is not one a worker can work with: said once at start, with the token it needs."""


CREATE_WORKER_TOKEN = "create one with `rlplane tokens create --name <node> --scope worker` (an admin's command)"


class WorkerApi:
    def __init__(self, client: Client) -> None:
        self.client = client

    @classmethod
    def connect(cls, api_url: str, token: str, timeout: float = 10.0) -> WorkerApi:
        return cls(Client(api_url, token, timeout=timeout, token_source="the worker's token (RLPLANE_TOKEN)"))

    def close(self) -> None:
        self.client.close()

    def lease(self, run_id: int, worker: str) -> Lease:
        try:
            return Lease.model_validate(self.client.json("POST", f"/runs/{run_id}/lease", json={"worker": worker}))
        except ApiError as exc:
            if exc.status in (404, 409):
                raise LeaseRefused(str(exc.detail)) from None
            raise

    def join(self, run_id: int, attempt: int, node_rank: int, body: NodeJoin) -> NodeLease:
        """Take the node slot the API granted this worker; a slot no longer to be had raises LeaseRefused."""
        path = f"/runs/{run_id}/attempts/{attempt}/nodes/{node_rank}/join"
        try:
            return NodeLease.model_validate(self.client.json("POST", path, json=body.model_dump(exclude_none=True)))
        except ApiError as exc:
            if exc.status in (403, 404, 409):
                raise LeaseRefused(str(exc.detail)) from None
            raise

    def rendezvous(self, run_id: int, attempt: int) -> Rendezvous:
        return Rendezvous.model_validate(self.client.json("GET", f"/runs/{run_id}/attempts/{attempt}/rendezvous"))

    def end_node(self, run_id: int, attempt: int, node_rank: int, body: NodeEnd) -> dict[str, Any]:
        path = f"/runs/{run_id}/attempts/{attempt}/nodes/{node_rank}/end"
        return self.client.json("POST", path, json=body.model_dump(mode="json", exclude_none=True))

    def status(self, run_id: int, update: StatusUpdate) -> dict[str, Any]:
        """Send one status of the attempt; the run after it (its status: a cancel). A stale attempt raises Superseded."""
        try:
            return self.client.json("POST", f"/runs/{run_id}/status", json=update.model_dump(mode="json", exclude_defaults=True))
        except ApiError as exc:
            if exc.status == 409:
                raise Superseded(str(exc.detail)) from None
            raise

    def check_token(self, api_wait_s: float = 30.0, retry_s: float = 2.0) -> None:
        """Raise TokenRefused unless the API takes this token with the worker scope. An API that cannot be
        reached yet (it may be starting beside this worker) is retried for `api_wait_s`, then left to the heartbeats."""
        deadline = time.monotonic() + api_wait_s
        while True:
            try:
                me = self.client.me()
                break
            except Unreachable:
                if time.monotonic() + retry_s > deadline:
                    return
                time.sleep(retry_s)
            except ApiError as exc:
                if exc.status != 401:
                    raise
                raise TokenRefused(
                    f"the API at {self.client.base} does not accept this token (unknown, revoked or expired); "
                    f"{CREATE_WORKER_TOKEN}"
                ) from None
        scopes = me.get("scopes", [])
        if "worker" not in scopes:
            raise TokenRefused(
                f"this token has the scopes {', '.join(scopes) or 'none'}, but a worker needs a token with the scope worker; "
                f"{CREATE_WORKER_TOKEN}"
            )

    def heartbeat(self, body: Heartbeat) -> dict[str, Any]:
        return self.client.json("POST", "/workers/heartbeat", json=body.model_dump(mode="json"))
