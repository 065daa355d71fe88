"""Helpers that build users, tokens and runs through the API itself."""

import copy
from typing import Any

from fastapi.testclient import TestClient

ADMIN_TOKEN = "rlp_test-admin-token-0123456789abcdef"

SFT_SPEC: dict[str, Any] = {
    "name": "sft-tiny",
    "algorithm": "sft",
    "model": {"path": "builtin:tiny-gpt2"},
    "data": {"source": "builtin:tiny-sft"},
    "train": {"steps": 20, "batch_size": 4, "lr": 1e-4},
}


def spec(**overrides: Any) -> dict[str, Any]:
    body = copy.deepcopy(SFT_SPEC)
    body.update(overrides)
    return body


def create_run(client: TestClient, **overrides: Any) -> dict[str, Any]:
    response = client.post("/api/v1/runs", json=spec(**overrides))
    assert response.status_code == 201, response.text
    return response.json()


def create_project(client: TestClient, name: str) -> dict[str, Any]:
    response = client.post("/api/v1/projects", json={"name": name})
    assert response.status_code == 201, response.text
    return response.json()


def create_user(
    client: TestClient,
    name: str,
    *,
    roles: dict[str, str] | None = None,
    scopes: tuple[str, ...] = ("write",),
    site_admin: bool = False,
) -> str:
    """Create a user with project roles; return a token for them."""
    assert client.post("/api/v1/users", json={"name": name, "is_site_admin": site_admin}).status_code == 201
    for project, role in (roles or {}).items():
        assert client.put(f"/api/v1/projects/{project}/members/{name}", json={"role": role}).status_code == 200
    response = client.post("/api/v1/tokens", json={"name": f"{name}-token", "scopes": list(scopes), "user": name})
    assert response.status_code == 201, response.text
    return response.json()["token"]


def worker_token(client: TestClient, name: str = "worker-bot") -> str:
    assert client.post("/api/v1/users", json={"name": name}).status_code == 201
    response = client.post("/api/v1/tokens", json={"name": "worker", "scopes": ["worker"], "user": name})
    assert response.status_code == 201, response.text
    return response.json()["token"]


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class ApiWorker:
    """Drives runs as a worker does, through the API: lease and report running, log metrics, end."""

    def __init__(self, client: TestClient, name: str = "worker-bot") -> None:
        self.client, self.headers = client, auth(worker_token(client, name))

    def start(self, run_id: int) -> None:
        assert self.client.post(f"/api/v1/runs/{run_id}/lease", json={"worker": "w1"}, headers=self.headers).status_code == 200
        running = {"attempt": 1, "status": "running"}
        assert self.client.post(f"/api/v1/runs/{run_id}/status", json=running, headers=self.headers).status_code == 200

    def log(self, run_id: int, key: str, values: dict[int, float | str]) -> None:
        rows = [{"key": key, "step": step, "value": value} for step, value in values.items()]
        assert self.client.post(f"/api/v1/runs/{run_id}/metrics", json=rows, headers=self.headers).status_code == 200

    def end(self, run_id: int, status: str = "succeeded") -> None:
        ended = {"attempt": 1, "status": status, "reason": "" if status == "succeeded" else "exit code 1"}
        assert self.client.post(f"/api/v1/runs/{run_id}/status", json=ended, headers=self.headers).status_code == 200

    def finish(self, run_id: int, status: str = "succeeded", points: dict[str, dict[int, float]] | None = None) -> None:
        self.start(run_id)
        for key, series in (points or {}).items():
            self.log(run_id, key, series)
        self.end(run_id, status)
