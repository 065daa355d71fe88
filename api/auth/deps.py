"""Request dependencies that turn a bearer token into a Principal."""

from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from api.auth.cache import TokenCache
from api.auth.principal import Principal
from api.auth.tokens import hash_token
from api.db import SessionDep, UowDep
from api.exceptions import Forbidden, Unauthorized
from api.models import ApiToken, Membership, User
from api.models.base import utcnow

_COOKIE = "rlplane_token"


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(_COOKIE)


def principal_from_request(session: Session, request: Request) -> Principal:
    token = _bearer(request)
    if token is None:
        raise Unauthorized("missing token: send 'Authorization: Bearer <token>' (see `rlplane login`)")
    token_hash = hash_token(token)
    cache: TokenCache = request.app.state.token_cache
    if (cached := cache.get(token_hash)) is not None:
        if cached.expires_at is not None and cached.expires_at <= utcnow():
            raise Unauthorized("token expired: create a new one with POST /api/v1/tokens")
        return cached.principal
    principal, expires_at = _load_principal(session, ApiToken.token_hash == token_hash)
    cache.put(token_hash, principal, expires_at)
    return principal


def cached_principal(request: Request) -> Principal | None:
    """The caller's principal if this process has its token cached and unexpired; None when finding out takes the
    database (or says no). For hot paths that may skip a thread when they already know the answer."""
    token = _bearer(request)
    if token is None:
        return None
    cached = request.app.state.token_cache.get(hash_token(token))
    if cached is None or (cached.expires_at is not None and cached.expires_at <= utcnow()):
        return None
    return cached.principal


def principal_of_token(session: Session, token_id: int) -> Principal:
    """The principal of token `token_id` as it stands now (no cache: a revocation counts at once), or Unauthorized
    saying why not; for what carries a token's id instead of its secret (a signed download link)."""
    return _load_principal(session, ApiToken.id == token_id)[0]


def _load_principal(session: Session, which: ColumnElement[bool]) -> tuple[Principal, datetime | None]:
    row = session.execute(
        select(
            ApiToken.id,
            ApiToken.scopes,
            ApiToken.revoked_at,
            ApiToken.expires_at,
            User.id,
            User.name,
            User.is_site_admin,
            User.disabled,
        )
        .join(User, User.id == ApiToken.user_id)
        .where(which)
    ).one_or_none()
    if row is None:
        raise Unauthorized("invalid token")
    token_id, scopes, revoked_at, expires_at, user_id, user_name, is_site_admin, disabled = row
    if revoked_at is not None:
        raise Unauthorized("token revoked")
    if expires_at is not None and expires_at <= utcnow():
        raise Unauthorized("token expired: create a new one with POST /api/v1/tokens")
    if disabled:
        raise Unauthorized("user disabled")
    roles: dict[int, str] = {}
    if "worker" not in scopes:  # workers act through their leases, never through project roles
        roles = dict(session.execute(select(Membership.project_id, Membership.role).where(Membership.user_id == user_id)).all())
    principal = Principal(
        user_id=user_id,
        user_name=user_name,
        token_id=token_id,
        scopes=frozenset(scopes),
        is_site_admin=is_site_admin,
        roles=roles,
    )
    return principal, expires_at


def get_principal(request: Request, session: SessionDep) -> Principal:
    return principal_from_request(session, request)


def require_scope(scope: str):
    def dependency(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        if not principal.has_scope(scope):
            raise Forbidden(f"this token lacks the '{scope}' scope")
        return principal

    return dependency


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]
Reader = Annotated[Principal, Depends(require_scope("read"))]
Writer = Annotated[Principal, Depends(require_scope("write"))]
Admin = Annotated[Principal, Depends(require_scope("admin"))]
WorkerPrincipal = Annotated[Principal, Depends(require_scope("worker"))]


def _clear_tokens_after_commit(request: Request, uow: UowDep) -> None:
    """Routes that change users, roles or tokens drop this process's token cache once they commit."""
    uow.after_commit(request.app.state.token_cache.clear)


AuthChanges = Depends(_clear_tokens_after_commit)
