"""Start the API: migrate, bootstrap the admin on first start, then serve with uvicorn."""

import sys

import uvicorn
from pydantic import ValidationError
from sqlalchemy.exc import OperationalError

from api.auth.bootstrap import announce, bootstrap_admin
from api.db import make_engine, make_sessionmaker
from api.migrate import upgrade_to_head
from api.settings import Settings


def prepare(settings: Settings) -> None:
    settings.home.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.resolved_database_url)
    try:
        upgrade_to_head(engine)
        with make_sessionmaker(engine)() as session:
            secret = bootstrap_admin(session, settings.home, settings.bootstrap_token)
    finally:
        engine.dispose()
    token_file = settings.home / "admin.token"
    if secret:
        announce(secret, token_file)
    elif token_file.exists():
        print(f"rlplane: the admin token is in {token_file}", file=sys.stderr, flush=True)


class StartupError(Exception):
    """A configuration or database problem, said in one paragraph."""


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(f"RLPLANE_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        raise StartupError(f"invalid configuration: {problems}") from None


def serve(host: str, port: int, workers: int, log_level: str) -> None:
    settings = load_settings()
    try:
        prepare(settings)
    except OperationalError as exc:
        raise StartupError(
            f"cannot reach the database at {_redacted(settings.resolved_database_url)}: {str(exc.orig).strip().splitlines()[0]}. "
            "Check RLPLANE_DATABASE_URL and that the server is running."
        ) from None
    print(
        f"rlplane API on http://{host}:{port} (docs: /api/docs), database: {_redacted(settings.resolved_database_url)}",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        "api.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        proxy_headers=False,
        timeout_graceful_shutdown=10,
    )


def _redacted(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return scheme + sep + rest
