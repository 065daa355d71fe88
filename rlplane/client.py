"""The one Python client of the rlplane REST API: the CLI, the worker (worker/client.py) and the trainer's
report sender (rlplane.reports) are built on it, and scripts can import it.

    from rlplane.client import Client
    client = Client.from_environment()           # RLPLANE_URL / RLPLANE_TOKEN, or the saved login
    run = client.submit({"name": "sft", ...})    # or client.submit(Path("examples/sft.yaml").read_text())
    run = client.wait(run["id"])                 # polls until the run ends
    client.metrics(run["id"], keys=["train/loss"])

Every method returns the API's JSON body (dicts and lists, as documented at /api/docs). Failures
raise `ApiError` (the server answered 4xx/5xx) or `Unreachable` (no answer), both with a one-line
message that says how to fix it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from rlplane import config
from rlplane.status import TERMINAL

API_PREFIX = "/api/v1"
_RETRIED = (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.ConnectTimeout, httpx.ReadTimeout)


class ClientError(Exception):
    """Base of the client's failures; str() is the one line to show a user."""


class Unreachable(ClientError):
    pass


class RangeIgnored(ClientError):
    """The server sent a whole file where a range was asked for (it cannot resume downloads)."""


class ApiError(ClientError):
    def __init__(self, status: int, detail: Any, message: str):
        super().__init__(message)
        self.status = status
        self.detail = detail

    @property
    def field_errors(self) -> list[tuple[str, str]]:
        """(field path, message) pairs of a 422 answer."""
        if not isinstance(self.detail, list):
            return []
        return [(_loc(err.get("loc", [])), str(err.get("msg", ""))) for err in self.detail if isinstance(err, dict)]


def api_base(url: str) -> str:
    """The API's base URL from a server's URL (with or without /api/v1)."""
    base = url.rstrip("/")
    return base if base.endswith(API_PREFIX) else base + API_PREFIX


def _loc(loc: list) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "(spec)"


class Client:
    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout: float = 30.0,
        token_source: str = "the token given",
        http: httpx.Client | None = None,
    ):
        """`http`: the transport to use instead of a new one (tests pass an in-process TestClient); it is used as it
        is, with this client's token on each request."""
        self.url = url.rstrip("/").removesuffix(API_PREFIX)
        self.base = api_base(self.url)
        self.token_source = token_source
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._headers = headers if http is not None else {}
        self._http = http or httpx.Client(base_url=self.base, headers=headers, timeout=timeout)
        self._owns_http = http is None

    @classmethod
    def from_environment(cls, url: str | None = None, token: str | None = None, **kwargs: Any) -> Client:
        profile = config.resolve(url, token)
        return cls(profile.url, profile.token, token_source=profile.token_source, **kwargs)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- transport -------------------------------------------------------------------------

    def request(self, method: str, path: str, *, retries: int = 2, **kwargs: Any) -> httpx.Response:
        """Send one request; connection failures of idempotent reads are retried briefly."""
        attempts = retries + 1 if method == "GET" else 1
        for attempt in range(attempts):
            try:
                response = self._http.request(method, self.base + path, **self._with_token(kwargs))
                break
            except _RETRIED as exc:
                if attempt + 1 == attempts:
                    raise Unreachable(self._unreachable(exc)) from None
                time.sleep(0.5 * (attempt + 1))
            except httpx.HTTPError as exc:
                raise Unreachable(self._unreachable(exc)) from None
        if response.status_code >= 400:
            raise self._error(response)
        return response

    def _with_token(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self._headers:
            kwargs = {**kwargs, "headers": {**self._headers, **(kwargs.get("headers") or {})}}
        return kwargs

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        return None if response.status_code == 204 else response.json()

    def _unreachable(self, exc: Exception) -> str:
        return (
            f"cannot reach the rlplane server at {self.url} ({type(exc).__name__}): start one with `rlplane up`, "
            "or point the CLI at yours with --url, RLPLANE_URL or `rlplane login --url URL`"
        )

    def _error(self, response: httpx.Response) -> ApiError:
        try:
            detail = response.json().get("detail")
        except (ValueError, AttributeError):
            detail = response.text[:500]
        code = response.status_code
        if code == 401:
            how = (
                "no token: run `rlplane login --url URL --token TOKEN` or set RLPLANE_TOKEN"
                if self.token_source == "none"
                else f"the server refused the token from {self.token_source}: pass a valid one with "
                "`rlplane login --token TOKEN` or RLPLANE_TOKEN"
            )
            return ApiError(code, detail, f"401 unauthorized - {how}")
        if isinstance(detail, list):
            fields = "; ".join(f"{_loc(e.get('loc', []))}: {e.get('msg', '')}" for e in detail if isinstance(e, dict))
            return ApiError(code, detail, f"{code} invalid request - {fields}")
        label = {403: "forbidden", 404: "not found", 409: "conflict", 413: "too large"}.get(code, "error")
        return ApiError(code, detail, f"{code} {label} - {detail}")

    # --- identity and administration -------------------------------------------------------

    def me(self) -> dict:
        return self.json("GET", "/me")

    def users(self) -> dict:
        return self.json("GET", "/users")

    def create_user(self, name: str, email: str | None = None, is_site_admin: bool = False) -> dict:
        return self.json("POST", "/users", json={"name": name, "email": email, "is_site_admin": is_site_admin})

    def projects(self) -> dict:
        return self.json("GET", "/projects")

    def project(self, name: str) -> dict:
        return self.json("GET", f"/projects/{name}")

    def create_project(self, name: str, description: str = "") -> dict:
        return self.json("POST", "/projects", json={"name": name, "description": description})

    def set_member(self, project: str, user: str, role: str) -> dict:
        return self.json("PUT", f"/projects/{project}/members/{user}", json={"role": role})

    def set_scheduling(self, project: str, **fields: int | str | float) -> dict:
        """A site admin sets a project's default_priority and member_max_priority (names or 0-100) and share."""
        return self.json("PATCH", f"/projects/{project}/scheduling", json=fields)

    def set_quota(self, project: str, queue: str, max_gpus: int | None, max_runs: int | None) -> dict:
        """A site admin sets what `project` may hold of `queue` at once (None: no limit on that)."""
        return self.json("PUT", f"/projects/{project}/quotas/{queue}", json={"max_gpus": max_gpus, "max_runs": max_runs})

    def remove_quota(self, project: str, queue: str) -> None:
        self.json("DELETE", f"/projects/{project}/quotas/{queue}")

    def queues(self) -> dict:
        return self.json("GET", "/queues")

    def usage(self, **params: str) -> dict:
        """GPU-seconds and worker-slot-seconds over a period: since, until, by, interval (GET /usage)."""
        return self.json("GET", "/usage", params=params)

    def usage_csv(self, **params: str) -> str:
        return self.request("GET", "/usage", params={**params, "format": "csv"}).text

    def remove_member(self, project: str, user: str) -> None:
        self.json("DELETE", f"/projects/{project}/members/{user}")

    def tokens(self, all_users: bool = False) -> dict:
        return self.json("GET", "/tokens", params={"all_users": "true"} if all_users else None)

    def create_token(self, name: str, scopes: list[str], expires_in_days: int | None = None, user: str | None = None) -> dict:
        body = {"name": name, "scopes": scopes, "expires_in_days": expires_in_days, "user": user}
        return self.json("POST", "/tokens", json=body)

    def revoke_token(self, token_id: int) -> dict:
        return self.json("DELETE", f"/tokens/{token_id}")

    def workers(self) -> dict:
        return self.json("GET", "/workers")

    # --- runs --------------------------------------------------------------------------------

    def submit(self, spec: dict | str) -> dict:
        """Submit a spec given as a dict (sent as JSON) or as YAML text."""
        if isinstance(spec, str):
            return self.json("POST", "/runs", content=spec.encode(), headers={"Content-Type": "application/yaml"})
        return self.json("POST", "/runs", json=spec)

    def runs(self, **filters: Any) -> dict:
        params = {k: v for k, v in filters.items() if v is not None and v != []}
        return self.json("GET", "/runs", params=params)

    def run(self, run_id: int) -> dict:
        return self.json("GET", f"/runs/{run_id}")

    def lineage(self, run_id: int) -> dict:
        return self.json("GET", f"/runs/{run_id}/lineage")

    def action(self, run_id: int, name: str) -> dict:
        """cancel, resume, archive or unarchive."""
        return self.json("POST", f"/runs/{run_id}/{name}")

    def wait(
        self, run_id: int, *, poll_s: float = 1.0, timeout_s: float | None = None, on_update: Callable[[dict], None] | None = None
    ) -> dict:
        """Poll until the run succeeded, failed or was cancelled; returns its final detail."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            run = self.run(run_id)
            if on_update is not None:
                on_update(run)
            if run["status"] in TERMINAL:
                return run
            if deadline is not None and time.monotonic() > deadline:
                raise ClientError(f"run {run_id} is still {run['status']} after {timeout_s:g} s")
            time.sleep(poll_s)

    # --- pipelines ---------------------------------------------------------------------------

    def submit_pipeline(self, document: dict | str) -> dict:
        """Submit a pipeline document given as a dict (sent as JSON) or as YAML text."""
        if isinstance(document, str):
            return self.json("POST", "/pipelines", content=document.encode(), headers={"Content-Type": "application/yaml"})
        return self.json("POST", "/pipelines", json=document)

    def pipelines(self, project: str | None = None, limit: int = 100) -> dict:
        return self.json("GET", "/pipelines", params={k: v for k, v in {"project": project, "limit": limit}.items() if v})

    def pipeline(self, pipeline_id: int) -> dict:
        return self.json("GET", f"/pipelines/{pipeline_id}")

    def cancel_pipeline(self, pipeline_id: int) -> dict:
        return self.json("POST", f"/pipelines/{pipeline_id}/cancel")

    def retry_stage(self, pipeline_id: int, stage: str, spec: dict | None = None) -> dict:
        return self.json("POST", f"/pipelines/{pipeline_id}/stages/{stage}/retry", json={} if spec is None else {"spec": spec})

    # --- sweeps ------------------------------------------------------------------------------

    def submit_sweep(self, document: dict | str) -> dict:
        if isinstance(document, str):
            return self.json("POST", "/sweeps", content=document.encode(), headers={"Content-Type": "application/yaml"})
        return self.json("POST", "/sweeps", json=document)

    def sweeps(self, project: str | None = None, limit: int = 100) -> dict:
        return self.json("GET", "/sweeps", params={k: v for k, v in {"project": project, "limit": limit}.items() if v})

    def sweep(self, sweep_id: int) -> dict:
        return self.json("GET", f"/sweeps/{sweep_id}")

    def cancel_sweep(self, sweep_id: int) -> dict:
        return self.json("POST", f"/sweeps/{sweep_id}/cancel")

    # --- alerts ------------------------------------------------------------------------------

    def alerts(self, **filters: Any) -> dict:
        return self.json("GET", "/alerts", params={k: v for k, v in filters.items() if v is not None})

    def alert_rules(self, project: str | None = None) -> dict:
        return self.json("GET", "/alert-rules", params={"project": project} if project else {})

    def create_alert_rule(self, rule: dict) -> dict:
        return self.json("POST", "/alert-rules", json=rule)

    def mute_alert_rule(self, rule_id: int, muted: bool = True) -> dict:
        return self.json("POST", f"/alert-rules/{rule_id}/mute", json={"muted": muted})

    def alert_detectors(self) -> dict:
        return self.json("GET", "/alert-detectors")

    # --- what runs report --------------------------------------------------------------------

    def logs(self, run_id: int, **params: Any) -> dict:
        return self.json("GET", f"/runs/{run_id}/logs", params={k: v for k, v in params.items() if v is not None})

    def metric_keys(self, run_id: int) -> dict:
        return self.json("GET", f"/runs/{run_id}/metrics/keys")

    def metrics(self, run_id: int, keys: list[str] | None = None, max_points: int = 1000) -> dict:
        return self.json("GET", f"/runs/{run_id}/metrics", params={"keys": keys or [], "max_points": max_points})

    def samples(self, run_id: int, **params: Any) -> dict:
        return self.json("GET", f"/runs/{run_id}/samples", params={k: v for k, v in params.items() if v is not None})

    def checkpoints(self, run_id: int) -> dict:
        return self.json("GET", f"/runs/{run_id}/checkpoints")

    def checkpoint_files(self, run_id: int, step: int, kind: str = "checkpoint") -> dict:
        return self.json("GET", f"/runs/{run_id}/checkpoints/{step}/files", params={"kind": kind})

    def stream_file(self, run_id: int, step: int, name: str, *, kind: str = "checkpoint", start: int = 0) -> Iterator[bytes]:
        """The bytes of one checkpoint file from byte `start` on (an HTTP range request when start > 0)."""
        headers = {"Range": f"bytes={start}-"} if start else {}
        path = f"/runs/{run_id}/checkpoints/{step}/files/{name}"
        try:
            with self._http.stream(
                "GET", self.base + path, **self._with_token({"params": {"kind": kind}, "headers": headers})
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self._error(response)
                if start and response.status_code != 206:
                    raise RangeIgnored(f"answered {response.status_code} to a range request")
                yield from response.iter_bytes(1 << 20)
        except httpx.HTTPError as exc:
            raise Unreachable(self._unreachable(exc)) from None

    # --- code snapshots (command runs) --------------------------------------------------------

    def upload_code(self, archive: Path, project: str | None = None) -> dict:
        """Store a .tar.gz of a command run's code; returns {snapshot (its sha256), size, files}."""
        with archive.open("rb") as handle:
            files = {"file": ("code.tar.gz", handle, "application/gzip")}
            return self.json("POST", "/code", data={"project": project or "default"}, files=files, timeout=600)

    # --- datasets ----------------------------------------------------------------------------

    def upload_dataset(self, path: Path, kind: str, project: str | None = None, name: str | None = None) -> dict:
        data = {"kind": kind, **({"project": project} if project else {}), **({"name": name} if name else {})}
        with path.open("rb") as handle:
            return self.json("POST", "/datasets", data=data, files={"file": (path.name, handle)}, timeout=600)

    def datasets(self, **filters: Any) -> dict:
        return self.json("GET", "/datasets", params={k: v for k, v in filters.items() if v is not None})

    def dataset(self, dataset_id: int) -> dict:
        return self.json("GET", f"/datasets/{dataset_id}")

    def dataset_preview(self, dataset_id: int) -> dict:
        return self.json("GET", f"/datasets/{dataset_id}/preview")
