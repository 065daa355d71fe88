"""Signed download links of a checkpoint (POST .../{step}/download-url): a plain URL the browser follows and streams
to disk itself, where a fetch with the bearer token would hold the whole file in the page (15 GB for a 7B model).

A link names the archive or one file, the kind, its expiry and the id of the token it was made with (never the token)
and is signed (api/signed_urls.py) over those and that token's stored hash. Following it checks the signature, the
expiry, that the token is still valid, and then the same read access as the bearer route: revoking the token or
losing the role voids the link at once.
"""

from datetime import UTC, datetime
from urllib.parse import quote, urlencode

from sqlalchemy import select
from sqlalchemy.orm import Session

from api import signed_urls
from api.artifacts import ArtifactStore
from api.auth.principal import Principal
from api.checkpoints import schemas, service
from api.exceptions import Forbidden
from api.models import ApiToken


def download_path(run_id: int, step: int, file: str | None) -> str:
    """The route a link fetches, unquoted: the tar of the whole checkpoint, or one file of it."""
    base = f"/api/v1/runs/{run_id}/checkpoints/{step}"
    return f"{base}/files/{file}" if file is not None else f"{base}/archive"


def _fields(path: str, kind: str, expires: int, token_id: int, token_hash: str) -> list[str | int]:
    return ["GET", path, kind, expires, token_id, token_hash]


def _token_hash(session: Session, token_id: int) -> str | None:
    return session.scalar(select(ApiToken.token_hash).where(ApiToken.id == token_id))


def mint(
    session: Session,
    principal: Principal,
    store: ArtifactStore,
    key: bytes,
    ttl_s: int,
    run_id: int,
    step: int,
    kind: str,
    file: str | None,
) -> schemas.DownloadUrl:
    ckpt = service.readable_checkpoint(session, principal, run_id, step, kind)
    if file is not None:
        service.checkpoint_file(store, ckpt, file)  # 404 now, not when the browser follows the link
    expires = int(signed_urls.clock()) + ttl_s
    path = download_path(run_id, step, file)
    sig = signed_urls.signature(key, _fields(path, kind, expires, principal.token_id, _token_hash(session, principal.token_id)))
    query = urlencode({"kind": kind, "expires": expires, "token_id": principal.token_id, "sig": sig})
    return schemas.DownloadUrl(url=f"{quote(path)}?{query}", expires_at=datetime.fromtimestamp(expires, UTC))


def check_link(
    session: Session, key: bytes, run_id: int, step: int, kind: str, file: str | None, expires: int, token_id: int, sig: str
) -> None:
    """Forbidden, saying why and where to get a new link, unless the signature is this route's and still valid. The
    caller then checks the token and the caller's access, as for a bearer token."""
    again = f"ask for a new one: POST /api/v1/runs/{run_id}/checkpoints/{step}/download-url (the dashboard's Download does)"
    token_hash = _token_hash(session, token_id)
    path = download_path(run_id, step, file)
    if token_hash is None or not signed_urls.matches(key, _fields(path, kind, expires, token_id, token_hash), sig):
        raise Forbidden(f"this download link's signature does not match it (altered, or made for another file); {again}")
    if signed_urls.clock() >= expires:
        expired = datetime.fromtimestamp(expires, UTC).isoformat().replace("+00:00", "Z")
        raise Forbidden(f"this download link expired at {expired}; {again}")


def token_refused(run_id: int, step: int, why: str) -> Forbidden:
    """A valid link whose token no longer is (revoked, expired, its user disabled)."""
    return Forbidden(
        f"the token this download link was made with is no longer valid ({why}); sign in and ask for a new link: "
        f"POST /api/v1/runs/{run_id}/checkpoints/{step}/download-url"
    )
