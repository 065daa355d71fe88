"""First start: with no user in the database, create the site admin and its token."""

import os
import sys
from pathlib import Path

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from api.auth.tokens import display_prefix, hash_token, new_token
from api.models import ApiToken, Membership, Project, User

ADMIN_NAME = "admin"
DEFAULT_PROJECT = "default"
_BOOTSTRAP_LOCK_KEY = 727_002


def bootstrap_admin(session: Session, home: Path, preset_token: str | None) -> str | None:
    """Create the admin once; return the generated secret (None when nothing was created or it was preset)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _BOOTSTRAP_LOCK_KEY})
    if session.scalar(select(User.id).limit(1)) is not None:
        return None
    secret = preset_token or new_token()
    admin = User(name=ADMIN_NAME, is_site_admin=True)
    project = Project(name=DEFAULT_PROJECT, description="Created at first start")
    session.add_all([admin, project])
    session.flush()
    session.add(Membership(user_id=admin.id, project_id=project.id, role="admin"))
    session.add(
        ApiToken(
            user_id=admin.id,
            name="bootstrap",
            token_hash=hash_token(secret),
            prefix=display_prefix(secret),
            scopes=["admin"],
        )
    )
    session.commit()
    if preset_token:
        return None
    write_private(home / "admin.token", secret + "\n")
    return secret


def write_private(path: Path, text: str) -> None:
    """`text` in a file only this user can read (mode 0600, also when it existed with another mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


def announce(secret: str, path: Path) -> None:
    print(
        f"rlplane: created site admin '{ADMIN_NAME}'. Its token (shown once, also in {path}, mode 0600):\n  {secret}",
        file=sys.stderr,
        flush=True,
    )


LOCAL_WORKER = "local-worker"


def service_user(session: Session, name: str) -> User:
    """The user `name` that the control plane's own worker tokens belong to (not a site admin), made if missing."""
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        user = User(name=name, is_site_admin=False)
        session.add(user)
        session.flush()
    return user


def local_worker_token(session: Session, home: Path) -> str:
    """The worker token of `rlplane up`'s own workers: kept in $RLPLANE_HOME/worker.token (0600) and
    reused while it is valid; a new one (for the user local-worker) otherwise."""
    path = home / "worker.token"
    if path.exists():
        secret = path.read_text().strip()
        token = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(secret)))
        if token is not None and token.revoked_at is None and token.expires_at is None and token.scopes == ["worker"]:
            return secret
    user = service_user(session, LOCAL_WORKER)
    secret = new_token()
    digest, prefix = hash_token(secret), display_prefix(secret)
    session.add(ApiToken(user_id=user.id, name="rlplane up", token_hash=digest, prefix=prefix, scopes=["worker"]))
    session.commit()
    write_private(path, secret + "\n")
    return secret
