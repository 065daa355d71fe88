"""Real databases built by the migrations: SQLite and Postgres (127.0.0.1:5432, as in CI)."""

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from api.app import create_app
from api.auth.bootstrap import bootstrap_admin
from api.db import make_engine
from api.migrate import upgrade_to_head
from api.models import Base
from api.settings import Settings
from tests.factories import ADMIN_TOKEN

POSTGRES_ADMIN_URL = os.environ.get("RLPLANE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session")
def postgres_server() -> str:
    return POSTGRES_ADMIN_URL


def create_postgres_database(admin_url: str = POSTGRES_ADMIN_URL) -> str:
    name = f"rlplane_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return admin_url.rsplit("/", 1)[0] + "/" + name


def drop_postgres_database(url: str, admin_url: str = POSTGRES_ADMIN_URL) -> None:
    name = url.rsplit("/", 1)[1]
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def database_url(request, tmp_path_factory) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'rlplane.db'}"
    else:
        url = create_postgres_database()
    engine = make_engine(url)
    upgrade_to_head(engine)
    engine.dispose()
    yield url
    if request.param == "postgres":
        drop_postgres_database(url)


def clean_database(engine) -> None:
    tables = [t.name for t in reversed(Base.metadata.sorted_tables)]
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        else:
            for table in tables:
                conn.execute(text(f"DELETE FROM {table}"))
            conn.execute(text("DELETE FROM sqlite_sequence")) if _has_sequence(conn) else None


def _has_sequence(conn) -> bool:
    return conn.execute(text("SELECT 1 FROM sqlite_master WHERE name='sqlite_sequence'")).first() is not None


@pytest.fixture(scope="session")
def app_settings(database_url, tmp_path_factory) -> Settings:
    home = tmp_path_factory.mktemp("home")
    return Settings(
        home=home,
        database_url=database_url,
        artifacts=str(home / "artifacts"),
        bootstrap_token=ADMIN_TOKEN,
        max_body_bytes=1024 * 1024,
        max_upload_bytes=4 * 1024 * 1024,
        sse_poll_s=0.05,
        dispatch=False,  # API tests drive runs through the endpoints; tests/test_worker.py runs the dispatcher
    )


@pytest.fixture(scope="session")
def app(app_settings):
    application = create_app(app_settings)
    yield application
    application.state.engine.dispose()


@pytest.fixture
def db(app) -> Iterator[Session]:
    """A clean database with the bootstrap admin and the 'default' project, and a session to inspect it."""
    clean_database(app.state.engine)
    app.state.token_cache.clear()
    with app.state.sessionmaker() as session:
        bootstrap_admin(session, Path(app.state.settings.home), ADMIN_TOKEN)
    with app.state.sessionmaker() as session:
        yield session


@pytest.fixture
def client(app, db) -> Iterator[TestClient]:
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as test_client:
        yield test_client


@pytest.fixture
def anon(app, db) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def artifacts_root(app) -> Path:
    return Path(app.state.artifacts.root)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny models step fastest on one thread, and do not slow to a crawl beside other processes."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory) -> Path:
    """The output directory of tests.training.SFT_SPEC, trained once per session: the SFT test checks
    it, and the reward-model and DPO tests start from it, as the SFT -> RM -> DPO chain does."""
    import torch

    from tests.training import SFT_SPEC, run_spec

    tmp = tmp_path_factory.mktemp("sft-run")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_spec(tmp / "sft.yaml", SFT_SPEC, "--out", str(tmp / "out"))
    finally:
        torch.set_num_threads(threads)
    return tmp / "out"
