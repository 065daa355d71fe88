"""Short-lived signed links: HMAC-SHA256 over what a link may fetch, so a browser can follow a plain URL (and stream
it to disk with its own download manager) where it could not send the bearer token.

The key, in this order: RLPLANE_SIGNING_KEY; else one derived from RLPLANE_BOOTSTRAP_TOKEN (docker compose and the
Helm chart give every API replica the same one); else $RLPLANE_HOME/signing.key, created once with mode 0600 (one
host: `rlplane up`, or processes sharing that home). Callers also sign the stored hash of the token a link was made
with, which only the database holds: a leaked key alone forges nothing for a token it does not know.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Sequence
from pathlib import Path

from api.settings import Settings

KEY_FILE = "signing.key"
_PURPOSE = "rlplane-signed-link/v1"

clock = time.time  # read at each call, so tests can move it


def signing_key(settings: Settings) -> bytes:
    if settings.signing_key is not None:
        return settings.signing_key.get_secret_value().encode()
    if settings.bootstrap_token:
        return hmac.new(settings.bootstrap_token.encode(), b"rlplane signing key", hashlib.sha256).digest()
    return _key_file(settings.home)


@functools.cache
def _key_file(home: Path) -> bytes:
    """The key kept in `home`, made once: written to a private temporary file and linked into place, so processes
    starting together all end up with the one that won (a link never replaces an existing file)."""
    path = home / KEY_FILE
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        draft = home / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return path.read_text().strip().encode()


def signature(key: bytes, fields: Sequence[str | int]) -> str:
    """URL-safe base64 of HMAC-SHA256 over the fields, JSON-encoded so no field can run into the next."""
    message = json.dumps([_PURPOSE, *fields], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(hmac.new(key, message, hashlib.sha256).digest()).rstrip(b"=").decode()


def matches(key: bytes, fields: Sequence[str | int], sig: str) -> bool:
    return hmac.compare_digest(signature(key, fields).encode(), sig.encode("utf-8", "replace"))
