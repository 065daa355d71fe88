from fastapi import APIRouter, Query, status
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth import schemas, service
from api.auth.deps import Admin, AuthChanges, CurrentPrincipal, Reader, Writer
from api.auth.principal import Principal
from api.db import SessionDep
from api.exceptions import NotFound
from api.models import Project, User
from api.params import ItemId, QueueName
from api.runs import quotas

router = APIRouter(prefix="/api/v1", tags=["auth"])


@router.get("/me", response_model=schemas.Me)
def read_me(principal: CurrentPrincipal, session: SessionDep) -> schemas.Me:
    user = session.get(User, principal.user_id)
    names = dict(session.execute(select(Project.id, Project.name).where(Project.id.in_(list(principal.roles)))).all())
    return schemas.Me(
        user=service.user_public(user),
        scopes=sorted(principal.scopes),
        roles={names[pid]: role for pid, role in principal.roles.items()},
    )


@router.post("/users", response_model=schemas.UserPublic, status_code=status.HTTP_201_CREATED, dependencies=[AuthChanges])
def create_user(body: schemas.UserCreate, principal: Admin, session: SessionDep) -> schemas.UserPublic:
    principal.require_site_admin()
    return service.user_public(service.create_user(session, body))


@router.get("/users", response_model=schemas.UserList)
def list_users(principal: Admin, session: SessionDep) -> schemas.UserList:
    principal.require_site_admin()
    users = [service.user_public(u) for u in session.scalars(select(User).order_by(User.name))]
    return schemas.UserList(data=users, count=len(users))


@router.post("/projects", response_model=schemas.ProjectPublic, status_code=status.HTTP_201_CREATED)
def create_project(body: schemas.ProjectCreate, principal: Admin, session: SessionDep) -> schemas.ProjectPublic:
    principal.require_site_admin()
    project = service.create_project(session, principal, body)
    return service.project_public(project, principal).model_copy(update={"role": "admin"})


@router.get("/projects", response_model=schemas.ProjectList)
def list_projects(principal: Reader, session: SessionDep) -> schemas.ProjectList:
    projects = [service.project_public(p, principal) for p in service.list_projects(session, principal)]
    return schemas.ProjectList(data=projects, count=len(projects))


@router.get("/projects/{name}", response_model=schemas.ProjectDetail)
def read_project(name: str, principal: Reader, session: SessionDep) -> schemas.ProjectDetail:
    project = service.readable_project(session, principal, name)
    return _detail(session, principal, project)


@router.put("/projects/{name}/members/{user}", response_model=schemas.ProjectDetail, dependencies=[AuthChanges])
def set_member(name: str, user: str, body: schemas.MemberSet, principal: Admin, session: SessionDep) -> schemas.ProjectDetail:
    project = service.readable_project(session, principal, name)
    service.set_member(session, principal, project, user, body.role)
    return _detail(session, principal, project)


@router.patch("/projects/{name}/scheduling", response_model=schemas.ProjectDetail)
def set_scheduling(name: str, body: schemas.SchedulingSet, principal: Admin, session: SessionDep) -> schemas.ProjectDetail:
    """A site admin sets the project's default priority and the highest one its members may ask for."""
    project = service.readable_project(session, principal, name)
    service.set_scheduling(session, principal, project, body)
    return _detail(session, principal, project)


@router.put("/projects/{name}/quotas/{queue}", response_model=schemas.ProjectDetail)
def set_quota(
    name: str, queue: QueueName, body: schemas.QuotaSet, principal: Admin, session: SessionDep
) -> schemas.ProjectDetail:
    """A site admin sets what the project may hold of `queue` at once: GPUs (a CPU queue: worker slots) and runs."""
    principal.require_site_admin()
    project = service.readable_project(session, principal, name)
    quotas.set_quota(session, project, queue, body.max_gpus, body.max_runs)
    return _detail(session, principal, project)


@router.delete("/projects/{name}/quotas/{queue}", status_code=status.HTTP_204_NO_CONTENT)
def remove_quota(name: str, queue: QueueName, principal: Admin, session: SessionDep) -> None:
    principal.require_site_admin()
    project = service.readable_project(session, principal, name)
    if not quotas.remove_quota(session, project, queue):
        raise NotFound(f"project {name} has no quota on queue {queue}")


def _detail(session: Session, principal: Principal, project: Project) -> schemas.ProjectDetail:
    public = service.project_public(project, principal)
    limits = [
        schemas.QuotaPublic(queue=q.queue, max_gpus=q.max_gpus, max_runs=q.max_runs, used_gpus=gpus, used_runs=runs)
        for q, gpus, runs in quotas.of_project(session, project)
    ]
    return schemas.ProjectDetail(**public.model_dump(), members=service.members(session, project), quotas=limits)


@router.delete("/projects/{name}/members/{user}", status_code=status.HTTP_204_NO_CONTENT, dependencies=[AuthChanges])
def remove_member(name: str, user: str, principal: Admin, session: SessionDep) -> None:
    project = service.readable_project(session, principal, name)
    service.remove_member(session, principal, project, user)


@router.post("/tokens", response_model=schemas.TokenCreated, status_code=status.HTTP_201_CREATED)
def create_token(body: schemas.TokenCreate, principal: Writer, session: SessionDep) -> schemas.TokenCreated:
    token, owner, secret = service.create_token(session, principal, body)
    return schemas.TokenCreated(**service.token_public(token, owner).model_dump(), token=secret)


@router.get("/tokens", response_model=schemas.TokenList)
def list_tokens(
    principal: Reader,
    session: SessionDep,
    all_users: bool = Query(default=False, description="Site admins: list every user's tokens"),
) -> schemas.TokenList:
    tokens = [service.token_public(t, owner) for t, owner in service.list_tokens(session, principal, all_users)]
    return schemas.TokenList(data=tokens, count=len(tokens))


@router.delete("/tokens/{token_id}", response_model=schemas.TokenPublic, dependencies=[AuthChanges])
def revoke_token(token_id: ItemId, principal: Reader, session: SessionDep) -> schemas.TokenPublic:
    token, owner = service.revoke_token(session, principal, token_id)
    return service.token_public(token, owner)
