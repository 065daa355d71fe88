"""The artifact root may be an fsspec URL (s3://... in production); memory:// stands in for it here."""

import uuid

import fsspec
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from tests.harness.factories import ADMIN_TOKEN, create_run

SHA = "a" * 64


@pytest.fixture
def remote_client(app_settings, db):
    root = f"memory://rlplane-{uuid.uuid4().hex[:8]}"
    app = create_app(app_settings.model_copy(update={"artifacts": root}))
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as client:
        yield client, fsspec.filesystem("memory"), root.removeprefix("memory://")
    app.state.engine.dispose()


def test_checkpoints_on_an_fsspec_root(remote_client):
    client, fs, base = remote_client
    fs.pipe(f"/{base}/runs/1/step-10/model.safetensors", b"weights")
    fs.pipe(f"/{base}/runs/1/step-10/state/optimizer.safetensors", b"optim")
    run = create_run(client)
    body = {"step": 10, "path": "runs/1/step-10", "size": 12, "sha256": SHA}
    assert client.post(f"/api/v1/runs/{run['id']}/checkpoints", json=body).status_code == 201
    missing = client.post(f"/api/v1/runs/{run['id']}/checkpoints", json={**body, "step": 11, "path": "runs/1/nope"})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "path"]
    files = client.get(f"/api/v1/runs/{run['id']}/checkpoints/10/files").json()["data"]
    assert {(f["name"], f["size"]) for f in files} == {("model.safetensors", 7), ("state/optimizer.safetensors", 5)}
    download = client.get(f"/api/v1/runs/{run['id']}/checkpoints/10/files/state/optimizer.safetensors")
    assert download.status_code == 200 and download.content == b"optim"
    assert client.get(f"/api/v1/runs/{run['id']}/checkpoints/10/files/nope.bin").status_code == 404


def test_datasets_on_an_fsspec_root(remote_client):
    client, fs, base = remote_client
    rows = b'{"prompt": "2+2="}\n{"prompt": "3+5="}\n'
    created = client.post("/api/v1/datasets", data={"kind": "prompts"}, files={"file": ("math.jsonl", rows)})
    assert created.status_code == 201, created.text
    dataset = created.json()
    assert fs.cat(f"/{base}/datasets/{dataset['id']}/math.jsonl") == rows
    preview = client.get(f"/api/v1/datasets/{dataset['id']}/preview", params={"rows": 1}).json()
    assert preview["rows"] == [{"prompt": "2+2="}]
