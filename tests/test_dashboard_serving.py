"""The API serves the built dashboard at `/`: files as they are, client-side routes as index.html,
while everything under /api keeps the API's own answers."""

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings


def _client(tmp_path: Path, dist: Path) -> TestClient:
    settings = Settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", dispatch=False, frontend_dir=dist)
    return TestClient(create_app(settings))


@pytest.fixture
def dist(tmp_path: Path) -> Path:
    root = tmp_path / "dist"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text("<!doctype html><div id=root></div>")
    (root / "assets" / "index-abc123.js").write_text("console.log('rlplane')")
    (root / "favicon.svg").write_text("<svg/>")
    (tmp_path / "secret.txt").write_text("outside the dist folder")
    return root


def test_client_side_routes_get_the_index_and_files_are_served(tmp_path, dist):
    with _client(tmp_path, dist) as client:
        for path in ("/", "/runs", "/runs/12/logs", "/compare?runs=1,2", "/pipelines", "/pipelines/3", "/signin"):
            page = client.get(path)
            assert page.status_code == 200 and "id=root" in page.text and page.headers["cache-control"] == "no-cache"
        asset = client.get("/assets/index-abc123.js")
        assert asset.status_code == 200 and "rlplane" in asset.text and "immutable" in asset.headers["cache-control"]
        assert client.get("/favicon.svg").headers["cache-control"] == "no-cache"
        assert "outside" not in client.get("/../secret.txt").text and "outside" not in client.get("/%2e%2e/secret.txt").text


def test_the_api_keeps_its_own_answers(tmp_path, dist):
    with _client(tmp_path, dist) as client:
        missing = client.get("/api/v1/no-such-thing")
        assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}
        assert client.get("/api/v1/runs").status_code == 401
        assert client.delete("/api/v1/runs/1/logs").status_code == 405
        assert client.post("/runs").status_code in (404, 405) and "id=root" not in client.post("/runs").text
        assert client.get("/healthz").json()["status"] == "ok"


def test_without_a_build_the_root_says_how_to_build_it(tmp_path):
    with _client(tmp_path, tmp_path / "no-dist") as client:
        page = client.get("/runs")
        assert page.status_code == 404 and "make up" in page.text and "npm run build" in page.text
