"""The migrations build the schema the models describe, and /readyz knows when they have not run."""

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.db import make_engine
from api.migrate import current_revision, head_revision
from api.models import Base
from api.settings import Settings


def test_migrated_schema_matches_the_models(database_url):
    engine = make_engine(database_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == [], f"models and migrations differ; add a migration: {diff}"


def test_database_is_at_head(database_url):
    engine = make_engine(database_url)
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_readyz_reports_an_unmigrated_database(tmp_path):
    settings = Settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'empty.db'}", bootstrap_token=None)
    app = create_app(settings)
    with TestClient(app) as client:
        response = client.get("/readyz")
        assert response.status_code == 503 and "schema at None" in response.json()["detail"]
        assert client.get("/healthz").json() == {"status": "ok", "detail": ""}
    with app.state.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sqlite_master WHERE type='table'")).scalar() == 0
    app.state.engine.dispose()


def test_readyz_reports_an_unreachable_database(tmp_path):
    settings = Settings(home=tmp_path, database_url="postgresql://nobody@127.0.0.1:1/none")
    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
        assert response.status_code == 503 and "unreachable" in response.json()["detail"]
