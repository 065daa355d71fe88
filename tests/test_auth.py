"""Auth on by default: every operation needs a token, and nothing crosses project lines."""

import hashlib
import io
import json
import os
import stat
import tarfile
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from api.app import create_app
from api.auth.bootstrap import bootstrap_admin
from api.models import ApiToken, User
from api.models.base import utcnow
from tests.harness.factories import auth, create_project, create_run, create_user, spec, worker_token

OPEN = {("GET", "/healthz"), ("GET", "/readyz")}
SHA = "0" * 64


def _operations(client) -> set[tuple[str, str]]:
    document = client.get("/api/v1/openapi.json").json()
    return {(method.upper(), path) for path, ops in document["paths"].items() for method in ops}


class TestBootstrap:
    def test_no_second_admin_when_users_exist(self, db, tmp_path):
        assert bootstrap_admin(db, tmp_path, None) is None  # a user exists: nothing created, nothing written
        assert not (tmp_path / "admin.token").exists()

    def test_first_start_creates_admin_and_token_file(self, tmp_path):
        from sqlalchemy.orm import Session

        from api.db import make_engine
        from api.migrate import upgrade_to_head

        engine = make_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
        upgrade_to_head(engine)
        with Session(engine) as session:
            secret = bootstrap_admin(session, tmp_path, None)
            token_file = tmp_path / "admin.token"
            assert secret and token_file.read_text().strip() == secret
            assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
            stored = session.scalar(select(ApiToken))
            assert stored.token_hash == hashlib.sha256(secret.encode()).hexdigest() and secret not in json.dumps(stored.scopes)
            assert session.scalar(select(User)).is_site_admin
            assert bootstrap_admin(session, tmp_path, None) is None  # second start: nothing new
        engine.dispose()

    def test_preset_token_is_used_and_not_written(self, client, app):
        assert client.get("/api/v1/me").json()["user"]["name"] == "admin"
        assert not (app.state.settings.home / "admin.token").exists()


class TestTokens:
    def test_missing_invalid_expired_revoked(self, client, anon, db):
        assert anon.get("/api/v1/runs").status_code == 401
        assert anon.get("/api/v1/runs", headers=auth("rlp_nope")).status_code == 401
        assert anon.get("/api/v1/runs").headers["www-authenticate"].startswith("Bearer")
        created = client.post("/api/v1/tokens", json={"name": "ci", "scopes": ["read"], "expires_in_days": 1}).json()
        secret = created["token"]
        assert anon.get("/api/v1/runs", headers=auth(secret)).status_code == 200
        listed = client.get("/api/v1/tokens").json()["data"]
        assert all("token" not in t for t in listed) and any(t["prefix"] == secret[:10] for t in listed)
        assert db.scalar(select(ApiToken).where(ApiToken.token_hash == secret)) is None  # never stored in clear
        db.execute(update(ApiToken).where(ApiToken.id == created["id"]).values(expires_at=utcnow() - timedelta(seconds=1)))
        db.commit()
        client.app.state.token_cache.clear()  # the clock moved in the database, not through the API
        assert "expired" in anon.get("/api/v1/runs", headers=auth(secret)).json()["detail"]
        other = client.post("/api/v1/tokens", json={"name": "tmp", "scopes": ["read"]}).json()
        assert client.delete(f"/api/v1/tokens/{other['id']}").json()["revoked_at"] is not None
        assert anon.get("/api/v1/runs", headers=auth(other["token"])).status_code == 401

    def test_other_processes_see_a_revocation_within_the_cache_ttl(self, client, app_settings, db):
        other_process = create_app(app_settings.model_copy(update={"auth_cache_s": 0.3}))
        created = client.post("/api/v1/tokens", json={"name": "short", "scopes": ["read"]}).json()
        with TestClient(other_process, headers=auth(created["token"])) as elsewhere:
            assert elsewhere.get("/api/v1/runs").status_code == 200  # now cached there
            client.delete(f"/api/v1/tokens/{created['id']}")
            time.sleep(0.4)
            assert elsewhere.get("/api/v1/runs").status_code == 401
        other_process.state.engine.dispose()

    def test_a_cached_token_still_expires_on_time(self, client, anon, db):
        created = client.post("/api/v1/tokens", json={"name": "soon", "scopes": ["read"], "expires_in_days": 1}).json()
        assert anon.get("/api/v1/runs", headers=auth(created["token"])).status_code == 200
        entries = client.app.state.token_cache._entries
        [key] = [key for key, entry in entries.items() if entry.expires_at is not None]
        entries[key] = replace(entries[key], expires_at=utcnow() - timedelta(seconds=1))  # time passes, cache stays
        assert "expired" in anon.get("/api/v1/runs", headers=auth(created["token"])).json()["detail"]

    def test_scopes_limit_what_a_token_does(self, client, anon, db):
        reader = create_user(client, "reader", roles={"default": "admin"}, scopes=("read",))
        assert anon.get("/api/v1/runs", headers=auth(reader)).status_code == 200
        assert anon.post("/api/v1/runs", json=spec(), headers=auth(reader)).status_code == 403
        # A token cannot mint a stronger one.
        assert anon.post("/api/v1/tokens", json={"name": "x", "scopes": ["write"]}, headers=auth(reader)).status_code == 403

    def test_worker_scope_stands_alone_and_needs_site_admin(self, client, anon, db):
        mixed = client.post("/api/v1/tokens", json={"name": "w", "scopes": ["worker", "read"]})
        assert mixed.status_code == 422
        member = create_user(client, "mem", roles={"default": "member"})
        assert anon.post("/api/v1/tokens", json={"name": "w", "scopes": ["worker"]}, headers=auth(member)).status_code == 403

    def test_users_cannot_see_or_revoke_others_tokens(self, client, anon, db):
        token = create_user(client, "carol", roles={"default": "member"})
        admin_token_id = db.scalar(select(ApiToken.id).where(ApiToken.name == "bootstrap"))
        assert anon.delete(f"/api/v1/tokens/{admin_token_id}", headers=auth(token)).status_code == 404
        assert [t["user"] for t in anon.get("/api/v1/tokens", headers=auth(token)).json()["data"]] == ["carol"]
        assert anon.get("/api/v1/tokens", params={"all_users": True}, headers=auth(token)).status_code == 403


class TestRoles:
    def test_viewer_member_admin(self, client, anon, db):
        run = create_run(client)
        viewer = create_user(client, "vic", roles={"default": "viewer"})
        member = create_user(client, "meg", roles={"default": "member"}, scopes=("admin",))
        assert anon.get(f"/api/v1/runs/{run['id']}", headers=auth(viewer)).status_code == 200
        assert anon.post(f"/api/v1/runs/{run['id']}/cancel", headers=auth(viewer)).status_code == 403
        assert anon.post("/api/v1/runs", json=spec(), headers=auth(member)).status_code == 201
        assert anon.put("/api/v1/projects/default/members/vic", json={"role": "admin"}, headers=auth(member)).status_code == 403
        client.post(f"/api/v1/runs/{run['id']}/cancel")
        assert anon.delete(f"/api/v1/runs/{run['id']}", headers=auth(member)).status_code == 403  # deleting needs project admin
        assert client.put("/api/v1/projects/default/members/meg", json={"role": "admin"}).status_code == 200
        assert anon.delete(f"/api/v1/runs/{run['id']}", headers=auth(member)).status_code == 204

    def test_me_lists_roles(self, client, anon, db):
        token = create_user(client, "dan", roles={"default": "viewer"})
        me = anon.get("/api/v1/me", headers=auth(token)).json()
        assert me["roles"] == {"default": "viewer"} and me["scopes"] == ["write"]


@pytest.fixture
def world(client, db, artifacts_root):
    """A project 'secret' with one of everything, and an outsider who belongs to no project."""
    create_project(client, "secret")
    run = create_run(client, project="secret", name="hidden-run")
    (artifacts_root / "ck").mkdir(exist_ok=True)
    (artifacts_root / "ck" / "f.bin").write_bytes(b"x")
    registered = client.post(f"/api/v1/runs/{run['id']}/checkpoints", json={"step": 5, "path": "ck", "size": 1, "sha256": SHA})
    assert registered.status_code == 201, registered.text
    dataset = client.post(
        "/api/v1/datasets", data={"kind": "prompts", "project": "secret"}, files={"file": ("p.jsonl", b'{"prompt": "hi"}\n')}
    )
    assert dataset.status_code == 201, dataset.text
    stage = {k: v for k, v in spec().items() if k != "name"}
    pipeline = client.post("/api/v1/pipelines", json={"name": "p", "project": "secret", "stages": {"a": {"spec": stage}}})
    assert pipeline.status_code == 201, pipeline.text
    space = {"train.lr": {"type": "categorical", "choices": [1e-4]}}
    sweep = client.post(
        "/api/v1/sweeps", json={"name": "s", "project": "secret", "spec": stage, "space": space, "metric": "eval/loss"}
    )
    assert sweep.status_code == 201, sweep.text
    rule = client.post("/api/v1/alert-rules", json={"name": "r", "project": "secret", "condition": {"kind": "nonfinite"}})
    assert rule.status_code == 201, rule.text
    code = client.post("/api/v1/code", data={"project": "secret"}, files={"file": ("code.tar.gz", CODE)})
    assert code.status_code == 201, code.text
    command = {**SCRIPT, "command": {"argv": ["python", "t.py"], "code": {"snapshot": code.json()["snapshot"]}}}
    assert client.post("/api/v1/runs", json=command).status_code == 201
    outsider = create_user(client, "outsider", scopes=("admin",))
    token_id = db.scalar(select(ApiToken.id).where(ApiToken.name == "bootstrap"))
    params = {
        "run_id": run["id"],
        "step": 5,
        "file_path": "f.bin",
        "name": "secret",
        "user": "admin",
        "dataset_id": dataset.json()["id"],
        "token_id": token_id,
        "attempt": 1,
        "node_rank": 0,
        "pipeline_id": pipeline.json()["id"],
        "sweep_id": sweep.json()["id"],
        "rule_id": rule.json()["id"],
        "sha256": code.json()["snapshot"],
        "queue": "cpu",
    }
    return params, outsider


def _code_snapshot() -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        info = tarfile.TarInfo("t.py")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"1\n"))
    return raw.getvalue()


CODE = _code_snapshot()
SCRIPT = {"name": "script", "project": "secret", "algorithm": "command", "train": {"steps": 1}, "command": {"argv": ["x"]}}

# Bodies that are valid, so that an answer of 403 proves the permission check (not validation) refused.
BODIES = {
    ("POST", "/api/v1/runs/external"): {"json": {"spec": SCRIPT}},
    ("POST", "/api/v1/runs/{run_id}/environment"): {"json": {"python": "3.11.9"}},
    ("PUT", "/api/v1/runs/{run_id}/checkpoints/{step}/files/{file_path}"): {"content": b"x"},
    ("POST", "/api/v1/code"): {"data": {"project": "secret"}, "files": {"file": ("code.tar.gz", CODE)}},
    ("POST", "/api/v1/users"): {"json": {"name": "zed"}},
    ("POST", "/api/v1/projects"): {"json": {"name": "p2"}},
    ("PUT", "/api/v1/projects/{name}/members/{user}"): {"json": {"role": "viewer"}},
    ("PATCH", "/api/v1/projects/{name}/scheduling"): {"json": {"default_priority": 75}},
    ("PUT", "/api/v1/projects/{name}/quotas/{queue}"): {"json": {"max_gpus": 8}},
    ("GET", "/api/v1/samples"): {"params": {"runs": "{run_id}"}},
    ("GET", "/api/v1/compare"): {"params": {"runs": "{run_id}"}},
    ("POST", "/api/v1/compare/series"): {"json": {"series": [{"run_id": 1, "key": "train/loss"}]}},
    ("POST", "/api/v1/tokens"): {"json": {"name": "mine", "scopes": ["read"]}},
    ("POST", "/api/v1/runs"): {"json": {**spec(), "project": "secret"}},
    ("POST", "/api/v1/runs/validate"): {"json": {**spec(), "project": "secret"}},
    ("POST", "/api/v1/runs/{run_id}/lease"): {"json": {"worker": "w"}},
    ("POST", "/api/v1/runs/{run_id}/status"): {"json": {"attempt": 1, "status": "running"}},
    ("POST", "/api/v1/runs/{run_id}/attempts/{attempt}/nodes/{node_rank}/join"): {"json": {"worker": "w"}},
    ("POST", "/api/v1/runs/{run_id}/attempts/{attempt}/nodes/{node_rank}/end"): {"json": {"exit_code": 0}},
    ("POST", "/api/v1/runs/{run_id}/metrics"): {"json": [{"key": "a", "step": 1, "value": 1.0}]},
    ("POST", "/api/v1/runs/{run_id}/logs"): {"json": [{"seq": 1, "text": "x"}]},
    ("POST", "/api/v1/runs/{run_id}/samples"): {"json": [{"step": 1, "prompt": "p", "response": "r"}]},
    ("POST", "/api/v1/runs/{run_id}/reports"): {"json": {"logs": [{"seq": 1, "text": "x"}]}},
    ("POST", "/api/v1/runs/{run_id}/checkpoints"): {"json": {"step": 6, "path": "ck", "size": 1, "sha256": SHA}},
    ("POST", "/api/v1/datasets"): {
        "data": {"kind": "prompts", "project": "secret"},
        "files": {"file": ("p.jsonl", b'{"prompt": "x"}\n')},
    },
    ("POST", "/api/v1/workers/heartbeat"): {"json": {"name": "w", "queues": ["cpu"]}},
    ("POST", "/api/v1/pipelines"): {"json": {"name": "p2", "project": "secret", "stages": {"a": {"spec": spec()}}}},
    ("POST", "/api/v1/pipelines/{pipeline_id}/stages/{name}/retry"): {"json": {}},
    ("POST", "/api/v1/pipelines/validate"): {"json": {"name": "p3", "project": "secret", "stages": {"a": {"spec": spec()}}}},
    ("POST", "/api/v1/sweeps"): {
        "json": {
            "name": "s2",
            "project": "secret",
            "spec": spec(),
            "space": {"train.lr": {"type": "categorical", "choices": [1e-4]}},
            "metric": "m",
        }
    },
    ("POST", "/api/v1/alert-rules"): {"json": {"name": "r2", "project": "secret", "condition": {"kind": "nonfinite"}}},
    ("POST", "/api/v1/alert-rules/{rule_id}/mute"): {"json": {"muted": True}},
}
# Operations on the caller's own things: they answer, but show nothing of project 'secret'.
OWN = {
    ("GET", "/api/v1/me"),
    ("GET", "/api/v1/projects"),
    ("GET", "/api/v1/runs"),
    ("GET", "/api/v1/datasets"),
    ("GET", "/api/v1/tokens"),
    ("POST", "/api/v1/tokens"),
    ("GET", "/api/v1/workers"),
    ("GET", "/api/v1/pipelines"),
    ("GET", "/api/v1/sweeps"),
    ("GET", "/api/v1/alerts"),
    ("GET", "/api/v1/alert-rules"),
    ("GET", "/api/v1/alert-detectors"),
    ("GET", "/api/v1/queues"),  # other projects' waiting runs without their ids, names or reasons
    ("GET", "/api/v1/usage"),
    ("GET", "/api/v1/compare"),  # the run comes back as its own 403, nothing of it shown
}
# Other users' tokens, and code snapshots no run of yours runs, do not exist for you.
HIDDEN_AS_404 = {("DELETE", "/api/v1/tokens/{token_id}"), ("GET", "/api/v1/code/{sha256}")}


def _call(anon, method, path, params, headers):
    url = path.format(**params)
    kwargs = dict(BODIES.get((method, path), {}))
    if "params" in kwargs:  # a query naming the world's things: {run_id} and the like
        kwargs["params"] = {key: value.format(**params) for key, value in kwargs["params"].items()}
    return anon.request(method, url, headers=headers, **kwargs)


class TestEveryOperation:
    def test_no_token_is_401_everywhere_but_health(self, anon, world):
        params, _ = world
        operations = _operations(anon)
        assert len(operations) > 30
        for method, path in sorted(operations - OPEN):
            response = _call(anon, method, path, params, {})
            assert response.status_code == 401, (method, path, response.status_code, response.text)
            assert response.json()["detail"]
        for method, path in OPEN:
            assert anon.request(method, path).status_code == 200

    def test_outsider_is_403_outside_their_projects(self, anon, world, db):
        params, outsider = world
        operations = _operations(anon) - OPEN
        assert set(BODIES) <= operations, "a body is listed for an operation that no longer exists"
        for method, path in sorted(operations):
            response = _call(anon, method, path, params, auth(outsider))
            expected = 200 if (method, path) in OWN else 404 if (method, path) in HIDDEN_AS_404 else 403
            if (method, path) == ("POST", "/api/v1/tokens"):
                expected = 201
            assert response.status_code == expected, (method, path, response.status_code, response.text)
            if (method, path) in OWN:
                assert "secret" not in response.text and "hidden-run" not in response.text, (method, path)

    def test_worker_token_reports_only_for_its_lease(self, client, anon, world):
        params, _ = world
        token = worker_token(client)
        run_id = params["run_id"]
        other = create_run(client, project="secret")
        assert anon.post(f"/api/v1/runs/{run_id}/metrics", json=[], headers=auth(token)).status_code == 403
        assert anon.post(f"/api/v1/runs/{run_id}/lease", json={"worker": "w"}, headers=auth(token)).status_code == 200
        assert (
            anon.post(
                f"/api/v1/runs/{run_id}/metrics", json=[{"key": "a", "step": 1, "value": 1}], headers=auth(token)
            ).status_code
            == 200
        )
        assert anon.get(f"/api/v1/runs/{run_id}", headers=auth(token)).status_code == 403  # reading needs the read scope
        assert anon.post(f"/api/v1/runs/{other['id']}/logs", json=[], headers=auth(token)).status_code == 403
        assert anon.get("/api/v1/runs", headers=auth(token)).status_code == 403
