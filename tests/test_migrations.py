"""The migrations build the schema the models describe, and /readyz knows when they have not run."""

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.db import make_engine
from api.migrate import current_revision, head_revision
from api.models import Base
from api.settings import Settings
from tests.harness.databases import create_postgres_database, drop_postgres_database


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


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_data_migrations_fill_what_they_add_from_the_stored_runs(tmp_path, dialect):
    """0013 and 0015 read stored specs (SQLite's JSON, Postgres' JSONB): a scripted run is marked so, and an eval
    run's and a script's lr and batch size are what they have."""
    if dialect == "postgres":
        url = create_postgres_database()
        try:
            _migrate_stored_runs(url)
        finally:
            drop_postgres_database(url)
    else:
        _migrate_stored_runs(f"sqlite:///{tmp_path / 'old.db'}")


def _migrate_stored_runs(url: str) -> None:
    import json

    from alembic import command

    from api.migrate import alembic_config

    engine = make_engine(url)
    with engine.begin() as conn:
        config = alembic_config(url)
        config.attributes["connection"] = conn
        command.upgrade(config, "0012")
        conn.execute(text("INSERT INTO projects (id, name, description, created_at) VALUES (1, 'p', '', '2026-11-01')"))
        runs = {
            1: {"algorithm": "eval", "train": {"lr": 1e-5, "batch_size": 8, "steps": 1}, "model": {"path": "run:1"}},
            2: {"algorithm": "command", "train": {"lr": 1e-5, "batch_size": 8, "steps": 9},
                "command": {"argv": ["loop.py"], "config": {"lr": 3e-4}, "external": True}},
        }  # fmt: skip
        for run_id, spec in runs.items():
            conn.execute(
                text(
                    "INSERT INTO runs (id, project_id, name, algorithm, backend, queue, status, status_reason, spec, config, "
                    "total_steps, archived, created_at, updated_at, attempt_count) VALUES (:id, 1, 'r', :algorithm, 'torch', "
                    "'cpu', 'succeeded', '', :spec, :config, 1, false, '2026-11-01', '2026-11-01', 0)"
                ),
                {"id": run_id, "algorithm": spec["algorithm"], "spec": json.dumps(spec), "config": json.dumps({"lr": 1e-5})},
            )
        command.upgrade(config, "head")
        rows = conn.execute(text("SELECT id, scripted, config FROM runs ORDER BY id")).all()
    engine.dispose()
    configs = {run_id: json.loads(config) if isinstance(config, str) else config for run_id, _, config in rows}
    found = {run_id: (bool(scripted), configs[run_id]["lr"], configs[run_id]["batch_size"]) for run_id, scripted, _ in rows}
    assert found == {1: (False, None, None), 2: (True, 3e-4, None)}
