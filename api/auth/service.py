"""Rules for users, projects, memberships and tokens. Services flush; the request commits."""

from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.auth import schemas
from api.auth.principal import Principal
from api.auth.tokens import display_prefix, hash_token, new_token
from api.exceptions import Conflict, Forbidden, NotFound, Unprocessable
from api.models import ApiToken, Membership, Project, User
from api.models.base import utcnow


def _flush_unique(session: Session, detail: str) -> None:
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError:
        raise Conflict(detail) from None


def user_public(user: User) -> schemas.UserPublic:
    return schemas.UserPublic.model_validate(user, from_attributes=True)


def create_user(session: Session, body: schemas.UserCreate) -> User:
    user = User(name=body.name, email=body.email, is_site_admin=body.is_site_admin)
    session.add(user)
    _flush_unique(session, f"user '{body.name}' already exists")
    return user


def user_by_name(session: Session, name: str) -> User:
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        raise NotFound(f"user '{name}'")
    return user


def project_by_name(session: Session, name: str) -> Project:
    project = session.scalar(select(Project).where(Project.name == name))
    if project is None:
        raise NotFound(f"project '{name}'")
    return project


def readable_project(session: Session, principal: Principal, name: str) -> Project:
    project = project_by_name(session, name)
    principal.require(project.id, "read")
    return project


def create_project(session: Session, principal: Principal, body: schemas.ProjectCreate) -> Project:
    project = Project(name=body.name, description=body.description)
    session.add(project)
    _flush_unique(session, f"project '{body.name}' already exists")
    session.add(Membership(user_id=principal.user_id, project_id=project.id, role="admin"))
    session.flush()
    return project


def project_public(project: Project, principal: Principal) -> schemas.ProjectPublic:
    return schemas.ProjectPublic(
        id=project.id,
        name=project.name,
        description=project.description,
        created_at=project.created_at,
        role=principal.roles.get(project.id),
        default_priority=project.default_priority,
        member_max_priority=project.member_max_priority,
        share=project.share,
    )


def set_scheduling(session: Session, principal: Principal, project: Project, body: schemas.SchedulingSet) -> None:
    """A site admin sets a project's default priority and its members' limit (runs already submitted keep theirs)."""
    principal.require_site_admin()
    unset = {"default_priority": 50, "member_max_priority": 50, "share": 1.0}  # what null means: the default
    for field in body.model_fields_set:
        setattr(project, field, getattr(body, field) if getattr(body, field) is not None else unset[field])
    session.flush()


def list_projects(session: Session, principal: Principal) -> list[Project]:
    query = select(Project).order_by(Project.name)
    if (ids := principal.project_ids()) is not None:
        query = query.where(Project.id.in_(ids))
    return list(session.scalars(query))


def members(session: Session, project: Project) -> list[schemas.MemberPublic]:
    rows = session.execute(
        select(User.name, Membership.role)
        .join(User, User.id == Membership.user_id)
        .where(Membership.project_id == project.id)
        .order_by(User.name)
    )
    return [schemas.MemberPublic(user=name, role=role) for name, role in rows]


def set_member(session: Session, principal: Principal, project: Project, user_name: str, role: str) -> None:
    principal.require(project.id, "admin")
    user = user_by_name(session, user_name)
    membership = session.get(Membership, (user.id, project.id))
    if membership is None:
        session.add(Membership(user_id=user.id, project_id=project.id, role=role))
    else:
        membership.role = role
    session.flush()


def remove_member(session: Session, principal: Principal, project: Project, user_name: str) -> None:
    principal.require(project.id, "admin")
    user = user_by_name(session, user_name)
    membership = session.get(Membership, (user.id, project.id))
    if membership is None:
        raise NotFound(f"member '{user_name}' of project '{project.name}'")
    session.delete(membership)
    session.flush()


def create_token(session: Session, principal: Principal, body: schemas.TokenCreate) -> tuple[ApiToken, str, str]:
    scopes = set(body.scopes)
    if "worker" in scopes and len(scopes) > 1:
        raise Unprocessable(["body", "scopes"], "the worker scope stands alone: create a separate token")
    owner_name = principal.user_name
    if body.user is not None and body.user != principal.user_name:
        principal.require_site_admin()
        owner_name = body.user
    owner = user_by_name(session, owner_name)
    if "worker" in scopes:
        # Workers serve every project's queue, so only a site admin may mint their tokens.
        principal.require_site_admin()
    elif not scopes <= principal.granted:
        raise Forbidden(f"a token cannot grant scopes its creator lacks: {sorted(scopes - principal.granted)}")
    secret = new_token()
    expires_at = utcnow() + timedelta(days=body.expires_in_days) if body.expires_in_days else None
    token = ApiToken(
        user_id=owner.id,
        name=body.name,
        token_hash=hash_token(secret),
        prefix=display_prefix(secret),
        scopes=sorted(scopes),
        expires_at=expires_at,
    )
    session.add(token)
    session.flush()
    return token, owner.name, secret


def token_public(token: ApiToken, user_name: str) -> schemas.TokenPublic:
    return schemas.TokenPublic(
        id=token.id,
        name=token.name,
        user=user_name,
        prefix=token.prefix,
        scopes=token.scopes,
        created_at=token.created_at,
        expires_at=token.expires_at,
        revoked_at=token.revoked_at,
    )


def list_tokens(session: Session, principal: Principal, all_users: bool) -> list[tuple[ApiToken, str]]:
    query = select(ApiToken, User.name).join(User, User.id == ApiToken.user_id).order_by(ApiToken.id)
    if all_users:
        principal.require_site_admin()
    else:
        query = query.where(ApiToken.user_id == principal.user_id)
    return [tuple(row) for row in session.execute(query)]


def revoke_token(session: Session, principal: Principal, token_id: int) -> tuple[ApiToken, str]:
    row = session.execute(
        select(ApiToken, User.name).join(User, User.id == ApiToken.user_id).where(ApiToken.id == token_id)
    ).one_or_none()
    if row is None:
        raise NotFound(f"token {token_id}")
    token, owner = row
    if token.user_id != principal.user_id:
        if not principal.is_site_admin:
            raise NotFound(f"token {token_id}")  # do not reveal other users' tokens
        principal.require_site_admin()
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        session.flush()
    return token, owner


def count_users(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(User)) or 0


def submitter(session: Session, user_id: int | None) -> Principal:
    """Who submitted a pipeline or sweep, as a write principal with their project roles now: the runs it starts
    later are theirs, and a removed member's cannot start any more."""
    user = session.get(User, user_id) if user_id is not None else None
    if user is None or user.disabled:
        raise Conflict("its submitter no longer exists or is disabled")
    roles = dict(session.execute(select(Membership.project_id, Membership.role).where(Membership.user_id == user.id)).all())
    return Principal(
        user_id=user.id,
        user_name=user.name,
        token_id=0,
        scopes=frozenset({"write"}),
        is_site_admin=user.is_site_admin,
        roles=roles,
    )


def in_project(session: Session, principal: Principal, model: type, object_id: int, what: str, action: str = "read"):
    """A row of `model` (which has a project_id) the principal may `action`: 404 if there is none, 403 outside the
    principal's projects or beyond its role (as for runs)."""
    row = session.get(model, object_id)
    if row is None:
        raise NotFound(f"{what} {object_id}")
    principal.require(row.project_id, action)
    return row
