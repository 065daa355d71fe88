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
