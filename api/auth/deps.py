"""Request dependencies that turn a bearer token into a Principal."""

from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import select

from api.auth.principal import Principal, forbidden, unauthorized
from api.auth.tokens import hash_token
from api.db import SessionDep
from api.models import ApiToken, Membership, User
from api.models.base import utcnow

_COOKIE = "rlplane_token"


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(_COOKIE)


def get_principal(request: Request, session: SessionDep) -> Principal:
    token = _bearer(request)
    if token is None:
        raise unauthorized("missing token: send 'Authorization: Bearer <token>' (see `rlplane login`)")
    row = session.execute(
        select(ApiToken, User).join(User, User.id == ApiToken.user_id).where(ApiToken.token_hash == hash_token(token))
    ).one_or_none()
    if row is None:
        raise unauthorized("invalid token")
    api_token, user = row
    if api_token.revoked_at is not None:
        raise unauthorized("token revoked")
    if api_token.expires_at is not None and api_token.expires_at <= utcnow():
        raise unauthorized("token expired: create a new one with POST /api/v1/tokens")
    if user.disabled:
        raise unauthorized("user disabled")
    roles = dict(session.execute(select(Membership.project_id, Membership.role).where(Membership.user_id == user.id)).all())
    return Principal(
        user_id=user.id,
        user_name=user.name,
        token_id=api_token.id,
        scopes=frozenset(api_token.scopes),
        is_site_admin=user.is_site_admin,
        roles=roles,
    )


def require_scope(scope: str):
    def dependency(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        if not principal.has_scope(scope):
            raise forbidden(f"this token lacks the '{scope}' scope")
        return principal

    return dependency


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]
Reader = Annotated[Principal, Depends(require_scope("read"))]
Writer = Annotated[Principal, Depends(require_scope("write"))]
Admin = Annotated[Principal, Depends(require_scope("admin"))]
WorkerPrincipal = Annotated[Principal, Depends(require_scope("worker"))]
