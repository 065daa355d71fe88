"""Checkpoint files under a test's artifact root and their registration through the API (tests/test_checkpoints.py,
tests/test_checkpoint_downloads.py)."""

import hashlib
import uuid

import pytest

JSON = {"Content-Type": "application/json"}
MODEL_BYTES = bytes(range(256)) * 16
OPTIM_BYTES = b'{"lr": 0.001, "betas": [0.9, 0.999]}'


@pytest.fixture
def ckpt_dir(artifacts_root) -> str:
    """A checkpoint directory under the artifact root (a fresh one per test: ids restart, files stay)."""
    rel = f"ckpts/{uuid.uuid4().hex}/step-5"
    (artifacts_root / rel / "optim").mkdir(parents=True)
    (artifacts_root / rel / "model.safetensors").write_bytes(MODEL_BYTES)
    (artifacts_root / rel / "optim" / "state.json").write_bytes(OPTIM_BYTES)
    return rel


@pytest.fixture
def ckpt_file(artifacts_root) -> str:
    rel = f"ckpts/{uuid.uuid4().hex}/final.safetensors"
    (artifacts_root / rel).parent.mkdir(parents=True)
    (artifacts_root / rel).write_bytes(MODEL_BYTES)
    return rel


def record(path: str, step: int = 5, **overrides) -> dict:
    body = {
        "step": step,
        "path": path,
        "size": len(MODEL_BYTES) + len(OPTIM_BYTES),
        "sha256": hashlib.sha256(MODEL_BYTES).hexdigest(),
        "metadata": {"rng_seed": 7, "data_position": 640},
    }
    body.update(overrides)
    return body


def register(client, run_id: int, body: dict):
    return client.post(f"/api/v1/runs/{run_id}/checkpoints", json=body)
