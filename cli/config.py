"""Which server and token the CLI uses.

Resolution order, first found wins: the --url/--token flags, RLPLANE_URL/RLPLANE_TOKEN, the saved
login (`rlplane login`, in $XDG_CONFIG_HOME/rlplane/config.json, mode 0600), and last the admin
token that `rlplane up` keeps in $RLPLANE_HOME/admin.token, so that a local server needs no login.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class Profile:
    url: str
    token: str | None
    token_source: str  # where the token came from, said in 401 messages


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "rlplane"


def config_file() -> Path:
    return config_dir() / "config.json"


def _saved() -> dict[str, str]:
    try:
        data = json.loads(config_file().read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _local_admin_token() -> str | None:
    home = Path(os.environ.get("RLPLANE_HOME") or Path.home() / ".rlplane").expanduser()
    try:
        return (home / "admin.token").read_text().strip() or None
    except OSError:
        return None


def resolve(url: str | None = None, token: str | None = None) -> Profile:
    saved = _saved()
    url = url or os.environ.get("RLPLANE_URL") or saved.get("url") or DEFAULT_URL
    for value, source in (
        (token, "--token"),
        (os.environ.get("RLPLANE_TOKEN"), "RLPLANE_TOKEN"),
        (saved.get("token"), f"the saved login ({config_file()})"),
    ):
        if value:
            return Profile(url.rstrip("/"), value, source)
    local = _local_admin_token()
    return Profile(url.rstrip("/"), local, "$RLPLANE_HOME/admin.token" if local else "none")


def save(url: str, token: str) -> Path:
    """Store the login where only this user can read it."""
    directory = config_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = config_file()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"url": url.rstrip("/"), "token": token}, handle)
    os.chmod(path, 0o600)  # an existing file keeps its old mode through O_CREAT
    return path
