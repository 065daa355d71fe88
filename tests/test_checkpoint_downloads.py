"""Signed checkpoint download links: minted for a reader of the run, streamed by the browser without the bearer token,
voided by expiry, any change, a revoked token or lost access; the key they are signed with."""

import asyncio
import io
import logging
import os
import stat
import tarfile
import time
import uuid
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import pytest

from api import signed_urls
from api.checkpoints.archive import CHUNK
from api.logging_setup import HideSignatures
from api.settings import Settings
from tests.harness.checkpoints import MODEL_BYTES, OPTIM_BYTES, record, register
from tests.harness.factories import auth, create_run, create_user


def mint(client, run_id: int, step: int = 5, file: str | None = None, headers=None, kind: str = "checkpoint"):
    body = {"file": file} if file is not None else None
    return client.post(f"/api/v1/runs/{run_id}/checkpoints/{step}/download-url?kind={kind}", json=body, headers=headers)


def with_query(url: str, **changes) -> str:
    """The link with some of its query values replaced."""
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()} | {k: str(v) for k, v in changes.items()}
    return f"{parts.path}?{urlencode(query)}"


def token_id(client, headers) -> int:
    [token] = client.get("/api/v1/tokens", headers=headers).json()["data"]
    return token["id"]


class TestSignedDownloadLinks:
    def test_a_signed_link_downloads_the_same_bytes_without_a_token(self, client, anon, db, ckpt_dir):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        minted = mint(client, run["id"])
        assert minted.status_code == 200, minted.text
        link = minted.json()
        assert link["url"].startswith(f"/api/v1/runs/{run['id']}/checkpoints/5/archive?") and "rlp_" not in link["url"]
        expires = parse_qs(urlsplit(link["url"]).query)["expires"][0]
        assert 295 <= int(expires) - time.time() <= 301 and link["expires_at"].startswith(time.strftime("%Y-%m-%d"))

        signed = anon.get(link["url"])  # no Authorization header, no cookie
        bearer = client.get(f"/api/v1/runs/{run['id']}/checkpoints/5/archive")
        assert signed.status_code == bearer.status_code == 200, signed.text
        top = f"run-{run['id']}-checkpoint-step-5"
        assert signed.headers["content-disposition"] == f'attachment; filename="{top}.tar"'
        assert int(signed.headers["content-length"]) == len(signed.content) == len(bearer.content)
        with tarfile.open(fileobj=io.BytesIO(signed.content)) as tar:  # the same files (mtimes may differ by a second)
            assert tar.extractfile(f"{top}/model.safetensors").read() == MODEL_BYTES
            assert tar.extractfile(f"{top}/optim/state.json").read() == OPTIM_BYTES

        one = mint(client, run["id"], file="optim/state.json").json()
        assert one["url"].startswith(f"/api/v1/runs/{run['id']}/checkpoints/5/files/optim/state.json?")
        signed_file = anon.get(one["url"])
        assert signed_file.status_code == 200 and signed_file.content == OPTIM_BYTES
        assert signed_file.headers["content-disposition"] == 'attachment; filename="state.json"'
        assert signed_file.headers["content-length"] == str(len(OPTIM_BYTES))

    def test_an_expired_link_is_403_saying_how_to_get_a_new_one(self, client, anon, db, ckpt_dir, monkeypatch):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        url = mint(client, run["id"]).json()["url"]
        expires = int(parse_qs(urlsplit(url).query)["expires"][0])
        monkeypatch.setattr(signed_urls, "clock", lambda: expires - 1)
        assert anon.get(url).status_code == 200
        monkeypatch.setattr(signed_urls, "clock", lambda: expires)
        response = anon.get(url)
        assert response.status_code == 403 and response.headers["content-type"] == "application/json"
        detail = response.json()["detail"]
        assert "expired" in detail and f"POST /api/v1/runs/{run['id']}/checkpoints/5/download-url" in detail

    def test_the_lifetime_is_a_setting(self, client, db, ckpt_dir, app, monkeypatch):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        monkeypatch.setattr(app.state.settings, "download_url_ttl_s", 1)
        expires = int(parse_qs(urlsplit(mint(client, run["id"]).json()["url"]).query)["expires"][0])
        assert expires - time.time() <= 1

    @pytest.mark.parametrize(
        "change",
        [
            lambda url, run: url.replace("/checkpoints/5/", "/checkpoints/6/"),
            lambda url, run: url.replace(f"/runs/{run}/", f"/runs/{run + 1}/"),
            lambda url, run: url.replace("/archive?", "/files/model.safetensors?"),
            lambda url, run: with_query(url, kind="export"),
            lambda url, run: with_query(url, expires=int(parse_qs(urlsplit(url).query)["expires"][0]) + 3600),
            lambda url, run: with_query(url, token_id=int(parse_qs(urlsplit(url).query)["token_id"][0]) + 1),
            lambda url, run: with_query(url, sig=parse_qs(urlsplit(url).query)["sig"][0][:-2] + "AA"),
            lambda url, run: with_query(url, sig="x"),
        ],
        ids=["step", "run", "path", "kind", "expires", "token", "sig", "short-sig"],
    )
    def test_an_altered_link_is_403(self, client, anon, db, ckpt_dir, ckpt_file, change):
        first, second = create_run(client), create_run(client)
        for run in (first, second):  # every changed target exists: only the signature refuses it
            register(client, run["id"], record(ckpt_dir))
            register(client, run["id"], record(ckpt_dir, step=6))
            register(client, run["id"], record(ckpt_file, kind="export"))
        url = mint(client, first["id"]).json()["url"]
        response = anon.get(change(url, first["id"]))
        assert response.status_code == 403, response.text
        assert "does not match" in response.json()["detail"] and "download-url" in response.json()["detail"]

    def test_a_link_without_all_its_parts_is_403_and_without_any_is_401(self, client, anon, db, ckpt_dir):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        url = mint(client, run["id"]).json()["url"]
        sig = parse_qs(urlsplit(url).query)["sig"][0]
        assert anon.get(f"/api/v1/runs/{run['id']}/checkpoints/5/archive?sig={sig}").status_code == 403
        assert anon.get(f"/api/v1/runs/{run['id']}/checkpoints/5/archive").status_code == 401

    def test_revoking_the_token_voids_its_links(self, client, anon, db, ckpt_dir):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        viewer = auth(create_user(client, "vera", roles={"default": "viewer"}, scopes=("read",)))
        url = mint(client, run["id"], headers=viewer).json()["url"]
        assert anon.get(url).status_code == 200
        assert client.delete(f"/api/v1/tokens/{token_id(client, viewer)}").status_code == 200
        response = anon.get(url)
        assert response.status_code == 403 and "token revoked" in response.json()["detail"]

    def test_losing_read_access_voids_the_link(self, client, anon, db, ckpt_dir):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        viewer = auth(create_user(client, "vera", roles={"default": "viewer"}, scopes=("read",)))
        url = mint(client, run["id"], file="model.safetensors", headers=viewer).json()["url"]
        assert anon.get(url).content == MODEL_BYTES
        assert client.delete("/api/v1/projects/default/members/vera").status_code == 204
        assert anon.get(url).status_code == 403

    def test_only_a_reader_of_the_run_mints_and_only_for_what_exists(self, client, db, ckpt_dir):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        outsider = auth(create_user(client, "olga", scopes=("read",)))
        assert mint(client, run["id"], headers=outsider).status_code == 403
        assert mint(client, 999).status_code == 404
        assert mint(client, run["id"], step=6).status_code == 404
        assert mint(client, run["id"], kind="export").status_code == 404
        assert mint(client, run["id"], file="nope.bin").status_code == 404
        assert mint(client, run["id"], file="../outside").status_code == 400
        refused = client.post(f"/api/v1/runs/{run['id']}/checkpoints/5/download-url", json={"path": "x"})
        assert refused.status_code == 422

    def test_the_archive_streams_in_chunks_with_its_length(self, app, client, db, artifacts_root):
        """The body leaves in pieces of at most one read while the files are read: a tar built whole (in memory, or
        one file at a time) would leave in one piece, or in pieces the size of a file."""
        rel = f"ckpts/{uuid.uuid4().hex}/step-5"
        (artifacts_root / rel).mkdir(parents=True)
        big = os.urandom(3 * CHUNK + 100)
        (artifacts_root / rel / "model.safetensors").write_bytes(big)
        run = create_run(client)
        register(client, run["id"], record(rel, size=len(big)))
        url = mint(client, run["id"]).json()["url"]
        start, bodies = asgi_get(app, url)
        assert start["status"] == 200
        assert len(bodies) >= 4 and max(len(b) for b in bodies) <= CHUNK
        length = int(dict(start["headers"])[b"content-length"])
        assert length == sum(len(b) for b in bodies)
        with tarfile.open(fileobj=io.BytesIO(b"".join(bodies))) as tar:
            assert tar.extractfile(tar.getmembers()[0]).read() == big


def asgi_get(app, url: str) -> tuple[dict, list[bytes]]:
    """GET through the ASGI interface itself (the test client joins the body): the start message and each body piece."""
    path, _, query = url.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": unquote(path),
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    messages: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        messages.append(message)

    asyncio.run(app(scope, receive, send))
    [start] = [m for m in messages if m["type"] == "http.response.start"]
    return start, [m["body"] for m in messages if m["type"] == "http.response.body" and m.get("body")]


class TestSigningKey:
    def test_a_key_file_is_made_once_private_and_reused(self, tmp_path):
        settings = Settings(home=tmp_path, bootstrap_token=None, signing_key=None)
        key = signed_urls.signing_key(settings)
        assert len(key) == 64 and stat.S_IMODE((tmp_path / signed_urls.KEY_FILE).stat().st_mode) == 0o600
        signed_urls._key_file.cache_clear()
        assert signed_urls.signing_key(settings) == key
        assert [p.name for p in tmp_path.iterdir()] == [signed_urls.KEY_FILE]

    def test_replicas_share_a_key_through_their_settings(self, tmp_path):
        one, other = tmp_path / "one", tmp_path / "other"
        token = "t" * 24
        assert signed_urls.signing_key(Settings(home=one, bootstrap_token=token)) == signed_urls.signing_key(
            Settings(home=other, bootstrap_token=token)
        )
        chosen = Settings(home=one, bootstrap_token=token, signing_key="k" * 32)
        assert signed_urls.signing_key(chosen) == b"k" * 32
        assert not one.exists() and not other.exists()
        with pytest.raises(ValueError, match="RLPLANE_SIGNING_KEY must be at least 32 characters"):
            Settings(signing_key="short")

    def test_the_access_log_hides_signatures(self):
        record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d', None, None)
        path = "/api/v1/runs/1/checkpoints/5/archive?kind=checkpoint&sig=SECRET&expires=9"
        record.args = ("127.0.0.1:1", "GET", path, "1.1", 200)
        assert HideSignatures().filter(record)
        assert "SECRET" not in record.getMessage() and "sig=...&expires=9" in record.getMessage()
