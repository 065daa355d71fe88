"""Real databases built by the migrations: SQLite and Postgres (127.0.0.1:5432, as in CI)."""

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.nodeid import NodeId
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.orm import Session

from api.app import create_app
from api.auth.bootstrap import bootstrap_admin
from api.db import make_engine
from api.migrate import upgrade_to_head
from api.models import Base
from api.settings import Settings
from tests.harness.baselines import one_torch_thread, sft_run, walker  # noqa: F401 - session fixtures
from tests.harness.checkpoints import ckpt_dir, ckpt_file  # noqa: F401 - checkpoint files under the artifact root
from tests.harness.databases import create_postgres_database, drop_postgres_database, postgres_admin_url
from tests.harness.factories import ADMIN_TOKEN
from tests.harness.launch import OPS_ENV
from tests.harness.worker_stack import stack  # noqa: F401 - the worker tests' fixture (a module's own `stack` wins)

pytest_plugins = ["tests.harness.module_times"]

# Every trainer the suite starts (through a worker, the CLI or Slurm as much as tests/harness/launch.py) loads the
# DeepSpeed ops that `make test` built, with the same compile command, instead of building its own.
os.environ.update(OPS_ENV)


@pytest.fixture(scope="session")
def postgres_server() -> str:
    return postgres_admin_url()


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
    with one_torch_thread():
        yield


# pytest-xdist (make test: -n 2 --dist loadgroup): each module is one group, so its module fixtures are set up
# once; the modules that launch several ranks make two groups of about equal length (one with Megatron's and
# DeepSpeed's, one with the multi-node runs and the rest), so with two workers at most two multi-rank trainers share
# the 2 cores, and neither group alone is most of the suite (one group of all but Megatron's was: its worker ran it
# to the end while the other ran out of work); the users of the SFT chain's baseline share one group, so it is
# trained once.
GROUPS = {
    "ranks-megatron-deepspeed": {
        "test_backend_megatron",
        "test_backend_megatron_heads",
        "test_megatron_virtual_pipeline",
        "test_megatron_tp",
        "test_megatron_dist_checkpoint",
        "test_backend_deepspeed",
    },
    "ranks": {
        "test_backend_fsdp2",
        "test_sharded_recipes",
        "test_multiprocess",
        "test_dcp_checkpoint",
        "test_ppo",
        "test_divergence",
        "test_multinode",
    },
    "sft-chain": {"test_sft", "test_reward", "test_dpo", "test_spin", "test_steerlm", "test_grpo", "test_async_grpo"},
}
# The groups handed out first, longest first: a long group that started last would run on alone at the end.
FIRST = (
    "ranks",
    "ranks-megatron-deepspeed",
    "sft-chain",
    "test_cli_runs",
    "test_worker_runs",
    "test_dashboard",
    "test_workflows",
    "test_worker_remote_artifacts",
    "test_prometheus",
)


def pytest_collection_modifyitems(config, items) -> None:
    fast = config.getoption("--fast")
    config.hook.pytest_deselected(items=[item for item in items if _deselected(item, fast)])
    items[:] = [item for item in items if not _deselected(item, fast)]
    if not getattr(config.option, "loadgroup", False):
        return
    groups = {}
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1]
        groups[item] = next((name for name, modules in GROUPS.items() if module in modules), module)
        # --dist loadgroup schedules by the "@group" ending of a test's id. pytest-xdist 3.8 writes it for the
        # xdist_group mark into item._nodeid, which pytest 9 no longer reads (ids are NodeId objects), so the
        # groups are written here, where the workers report their ids to the scheduler.
        item._id = NodeId.parse(f"{item.nodeid}@{groups[item]}")
    # The scheduler hands out groups in the order their first test comes (a stable sort keeps each group's order).
    items.sort(key=lambda item: FIRST.index(groups[item]) if groups[item] in FIRST else len(FIRST))


# make test-fast (--fast): the edit-test loop. Unit tests and the API on Postgres only, no process launches: the
# modules below start processes (or train a session baseline) and are left to make test. A test in the fast tier
# that starts a process fails, naming this list, so the tier stays what it says.
LAUNCHING = (
    GROUPS["ranks"]
    | GROUPS["ranks-megatron-deepspeed"]
    | GROUPS["sft-chain"]
    | {
        "test_backends",
        "test_cli",
        "test_cli_admin",
        "test_cli_runs",
        "test_command_runs",
        "test_dashboard",
        "test_deploy",
        "test_engines",
        "test_environments",
        "test_episodes",
        "test_events",
        "test_generate",
        "test_gpu",
        "test_ilql",
        "test_layering",
        "test_lint",
        "test_doc_paths",
        "test_megatron_cpu_shim",
        "test_model_speed",
        "test_nemo_checkpoint",
        "test_prometheus",
        "test_rewards",
        "test_slurm",
        "test_preemption",
        "test_torchrun",
        "test_sandbox",
        "test_services",
        "test_vllm",
        "test_up",
        "test_worker_fence",
        "test_worker_remote_artifacts",
        "test_worker_runs",
        "test_worker_shutdown",
        "test_workflows",
    }
)


# The API's tests run on Postgres (production's database); these also on SQLite (rlplane up's), because what
# they hold differs by dialect: inserts and their idempotency, rollups, SSE cursors, migrations, number and NUL
# bounds. (Every end-to-end test through `rlplane up` runs on SQLite too.)
BOTH_DIALECTS = {
    "test_bad_input",
    "test_metrics",
    "test_logs_samples",
    "test_samples_across",
    "test_compare_api",
    "test_reports",
    "test_metric_rollups",
    "test_run_headlines",
    "test_events",
    "test_migrations",
    "test_schemathesis",
}


def pytest_addoption(parser) -> None:
    parser.addoption("--fast", action="store_true", help="the fast tier: no process launches, the API on Postgres only")


def _deselected(item, fast: bool) -> bool:
    module = item.module.__name__.rsplit(".", 1)[-1]
    callspec = getattr(item, "callspec", None)
    on_sqlite = callspec is not None and callspec.params.get("database_url") == "sqlite"
    return (on_sqlite and (fast or module not in BOTH_DIALECTS)) or (fast and module in LAUNCHING)


@pytest.fixture(autouse=True)
def _no_launches_in_the_fast_tier(request, monkeypatch) -> None:
    if not request.config.getoption("--fast"):
        return

    def refuse(*args, **kwargs):
        raise AssertionError(f"{request.node.nodeid} starts a process: add its module to LAUNCHING in tests/conftest.py")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
