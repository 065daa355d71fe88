"""Which server and token the CLI uses.

Resolution order, first found wins: the --url/--token flags, RLPLANE_URL/RLPLANE_TOKEN, the saved
login (`rlplane login`, in $XDG_CONFIG_HOME/rlplane/config.json, mode 0600), and last the `rlplane up`
running from $RLPLANE_HOME (its server.json says its URL, on whatever port) with the admin token it keeps
in $RLPLANE_HOME/admin.token, so that a local server needs no login.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8000"
SERVER_FILE = "server.json"  # written by `rlplane up` while it serves


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
    try:
        return (_home() / "admin.token").read_text().strip() or None
    except OSError:
        return None


def _home() -> Path:
    return Path(os.environ.get("RLPLANE_HOME") or Path.home() / ".rlplane").expanduser()


def local_url(host: str, port: int) -> str:
    """How a client on this machine reaches a server listening on host:port."""
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{port}"


@contextlib.contextmanager
def local_server(home: Path, host: str, port: int) -> Iterator[None]:
    """While `rlplane up` serves, $RLPLANE_HOME/server.json says where, so the CLI on this machine finds it on any port."""
    path = home / SERVER_FILE
    path.write_text(json.dumps({"url": local_url(host, port), "pid": os.getpid()}))
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def _local_server_url() -> str | None:
    """The URL of the `rlplane up` running from $RLPLANE_HOME, if one is (its process is alive)."""
    try:
        found = json.loads((_home() / SERVER_FILE).read_text())
        os.kill(int(found["pid"]), 0)
        return str(found["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resolve(url: str | None = None, token: str | None = None) -> Profile:
    saved = _saved()
    url = url or os.environ.get("RLPLANE_URL") or saved.get("url") or _local_server_url() or DEFAULT_URL
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
