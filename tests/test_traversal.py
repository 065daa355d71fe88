"""Checkpoint downloads refuse every path-traversal form known from other tools' CVEs.

httpx (and so TestClient) normalises `../` before sending, so the raw forms go over a socket to a real
uvicorn server running the same app. A secret file lies next to (outside) the artifact root; no response
may contain it, and every attempt must end in 400 or 404.
"""

import hashlib
import shutil
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest
import uvicorn

from tests.harness.factories import ADMIN_TOKEN, create_run

SECRET = f"TOP-SECRET-{uuid.uuid4().hex}"
PASSWD_MARK = b"root:x:0:0"
MODEL_BYTES = b"weights " * 64


@pytest.fixture(scope="module")
def server_port(app):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(timeout=15)
    sock.close()


def raw_get(port: int, target: str, token: str = ADMIN_TOKEN) -> tuple[int, bytes]:
    """Send `GET <target>` exactly as written (no client-side normalisation); return the status and the whole reply."""
    request = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request.encode())
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    return int(reply.split(b" ", 2)[1]), reply


@pytest.fixture
def secret_file(artifacts_root) -> Path:
    path = artifacts_root.parent / f"secret-{uuid.uuid4().hex[:8]}.txt"
    path.write_text(SECRET)
    assert artifacts_root not in path.parents
    yield path
    path.unlink()


@pytest.fixture
def checkpoint(client, db, artifacts_root, secret_file):
    """A registered checkpoint dir, four levels below the root's parent, with symlinks that lead outside the root."""
    rel = f"ckpts/{uuid.uuid4().hex}/step-5"
    directory = artifacts_root / rel
    directory.mkdir(parents=True)
    (directory / "model.bin").write_bytes(MODEL_BYTES)
    (directory / "escape.txt").symlink_to(secret_file)
    (directory / "escape_dir").symlink_to(secret_file.parent, target_is_directory=True)
    (directory / "passwd").symlink_to("/etc/passwd")
    run = create_run(client)
    body = {"step": 5, "path": rel, "size": len(MODEL_BYTES), "sha256": hashlib.sha256(MODEL_BYTES).hexdigest()}
    assert client.post(f"/api/v1/runs/{run['id']}/checkpoints", json=body).status_code == 201
    yield {"run_id": run["id"], "rel": rel, "dir": directory, "prefix": f"/api/v1/runs/{run['id']}/checkpoints/5/files/"}
    remove(directory)


def remove(path: Path) -> None:
    """Leave no link to the root's parent behind: it would make a loop for anything that walks the root."""
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path)


def assert_refused(status: int, reply: bytes) -> None:
    assert status in (400, 404), reply[:500]
    assert SECRET.encode() not in reply
    assert PASSWD_MARK not in reply


UP = "../../../../"  # from the checkpoint dir to the directory that holds the secret

LITERAL = [
    UP + "{secret}",
    UP + UP + "etc/passwd",
    "model.bin/../" + UP + "{secret}",
    "..\\..\\..\\..\\{secret}",
    "..;/..;/..;/..;/{secret}",
    "..;/" * 8 + "etc/passwd",
    "/etc/passwd",
    "/{secret_abs}",
    "//proc/self/root/etc/passwd",
    "//proc/self/root{secret_abs}",
    "....//....//....//....//{secret}",
    "./" + UP + "{secret}",
    "escape.txt",
    "escape_dir/{secret}",
    "passwd",
]

ENCODED = [
    "..%2f..%2f..%2f..%2f{secret}",
    "%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2f{secret}",
    "%2E%2E/%2E%2E/%2E%2E/%2E%2E/{secret}",
    ".%2e/.%2e/.%2e/.%2e/{secret}",
    "..%5c..%5c..%5c..%5c{secret}",
    "%252e%252e%252f%252e%252e%252f%252e%252e%252f%252e%252e%252f{secret}",
    "..%252f..%252f..%252f..%252f{secret}",
    "%2fetc%2fpasswd",
    "%2f%2fproc%2fself%2froot%2fetc%2fpasswd",
    "..%3b/..%3b/..%3b/..%3b/{secret}",
    "..%00/..%00/{secret}",
    "model.bin%00.txt",
    "%c0%ae%c0%ae%c0%af%c0%ae%c0%ae%c0%af%c0%ae%c0%ae%c0%af%c0%ae%c0%ae%c0%af{secret}",
    "..%c0%af..%c0%af..%c0%af..%c0%af{secret}",
    "%u002e%u002e%u2215%u002e%u002e%u2215{secret}",
    "%e2%80%a4%e2%80%a4%2f%e2%80%a4%e2%80%a4%2f{secret}",
    "escape%5fdir/{secret}",
    "escape_dir%2f{secret}",
]


def _target(checkpoint: dict, form: str, secret_file: Path) -> str:
    return checkpoint["prefix"] + form.format(secret=secret_file.name, secret_abs=str(secret_file).lstrip("/"))


class TestRawTraversal:
    def test_the_server_serves_a_legitimate_file(self, server_port, checkpoint, secret_file):
        status, reply = raw_get(server_port, checkpoint["prefix"] + "model.bin")
        assert status == 200 and reply.endswith(MODEL_BYTES)

    @pytest.mark.parametrize("form", LITERAL)
    def test_literal_forms_are_refused(self, server_port, checkpoint, secret_file, form):
        assert_refused(*raw_get(server_port, _target(checkpoint, form, secret_file)))

    @pytest.mark.parametrize("form", ENCODED)
    def test_percent_encoded_forms_are_refused(self, server_port, checkpoint, secret_file, form):
        assert_refused(*raw_get(server_port, _target(checkpoint, form, secret_file)))

    def test_decoded_traversal_reaches_the_handler_and_is_400(self, server_port, checkpoint, secret_file):
        """Not a routing accident: the handler sees '../' and says why it refuses."""
        status, reply = raw_get(server_port, _target(checkpoint, "..%2f..%2f..%2f..%2f{secret}", secret_file))
        assert status == 400 and b"file path rejected" in reply
        status, reply = raw_get(server_port, _target(checkpoint, UP + "{secret}", secret_file))
        assert status == 400 and b"file path rejected" in reply

    def test_symlinks_out_of_the_checkpoint_are_not_listed(self, client, checkpoint):
        listing = client.get(f"/api/v1/runs/{checkpoint['run_id']}/checkpoints/5/files")
        assert listing.status_code == 200
        assert [f["name"] for f in listing.json()["data"]] == ["model.bin"]
        assert SECRET not in listing.text


class TestCheckpointPathIsASymlink:
    def test_registering_a_symlink_to_outside_is_422(self, client, db, artifacts_root, secret_file):
        link = artifacts_root / "ckpts" / uuid.uuid4().hex
        link.parent.mkdir(exist_ok=True)
        link.symlink_to(secret_file.parent, target_is_directory=True)
        run = create_run(client)
        body = {"step": 1, "path": link.relative_to(artifacts_root).as_posix(), "size": 1, "sha256": "a" * 64}
        response = client.post(f"/api/v1/runs/{run['id']}/checkpoints", json=body)
        remove(link)
        assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "path"]
        assert client.get(f"/api/v1/runs/{run['id']}/checkpoints").json()["count"] == 0

    def test_a_directory_swapped_for_a_symlink_after_registration_serves_nothing(
        self,
        client,
        server_port,
        checkpoint,
        secret_file,
    ):
        shutil.rmtree(checkpoint["dir"])
        checkpoint["dir"].symlink_to(secret_file.parent, target_is_directory=True)
        listing = client.get(f"/api/v1/runs/{checkpoint['run_id']}/checkpoints/5/files")
        assert listing.status_code == 404 and SECRET not in listing.text
        for name in (secret_file.name, "model.bin"):
            assert_refused(*raw_get(server_port, checkpoint["prefix"] + name))
        response = client.get(checkpoint["prefix"] + secret_file.name)
        assert response.status_code == 400 and SECRET not in response.text

    def test_a_single_file_checkpoint_swapped_for_a_symlink_serves_nothing(
        self,
        client,
        server_port,
        artifacts_root,
        secret_file,
    ):
        rel = f"ckpts/{uuid.uuid4().hex}/final.bin"
        target = artifacts_root / rel
        target.parent.mkdir(parents=True)
        target.write_bytes(MODEL_BYTES)
        run = create_run(client)
        body = {"step": 9, "path": rel, "size": len(MODEL_BYTES), "sha256": hashlib.sha256(MODEL_BYTES).hexdigest()}
        assert client.post(f"/api/v1/runs/{run['id']}/checkpoints", json=body).status_code == 201
        target.unlink()
        target.symlink_to(secret_file)
        assert_refused(*raw_get(server_port, f"/api/v1/runs/{run['id']}/checkpoints/9/files/final.bin"))
        listing = client.get(f"/api/v1/runs/{run['id']}/checkpoints/9/files")
        remove(target)
        assert listing.status_code == 404 and SECRET not in listing.text
