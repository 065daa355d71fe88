from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlplane.spec.sections import Priority

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
Scope = Literal["read", "write", "admin", "worker"]
Role = Literal["viewer", "member", "admin"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserCreate(Strict):
    name: str = Field(pattern=NAME_PATTERN, description="Login name")
    email: str | None = Field(default=None, max_length=256)
    is_site_admin: bool = False


class UserPublic(BaseModel):
    id: int
    name: str
    email: str | None
    is_site_admin: bool
    disabled: bool
    created_at: datetime


class UserList(BaseModel):
    data: list[UserPublic]
    count: int


class ProjectCreate(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = Field(default="", max_length=2000)


class MemberPublic(BaseModel):
    user: str
    role: Role


class ProjectPublic(BaseModel):
    id: int
    name: str
    description: str
    created_at: datetime
    role: Role | None = Field(description="The caller's role in this project (site admins may have none)")
    default_priority: int = Field(50, description="A run's priority when its spec names none (docs/scheduling.md)")
    member_max_priority: int = Field(
        50, description="The highest resources.priority its members may ask for; above it needs the project's admin role"
    )
    share: float = Field(
        1.0,
        description="Its weight in fair share: between projects' waiting runs of one priority, the least recent use "
        "of the queue against its share goes first",
    )


class SchedulingSet(Strict):
    """A project's place in sharing the cluster (docs/scheduling.md); a site admin's to set. Fields left out stay."""

    default_priority: Priority | None = None
    member_max_priority: Priority | None = None
    share: float | None = Field(default=None, gt=0, le=1000, description="Its weight in fair share (null: 1)")


class QuotaSet(Strict):
    """What the project may hold of one queue at once; null: no limit on that."""

    max_gpus: int | None = Field(
        default=None, ge=0, le=1_000_000, description="GPUs (resources.gpus x nodes); on a CPU queue, worker slots (nodes)"
    )
    max_runs: int | None = Field(default=None, ge=0, le=1_000_000, description="Active runs (starting, running, cancelling)")


class QuotaPublic(QuotaSet):
    queue: str
    used_gpus: int = Field(description="What its active runs hold of the queue now, in the unit of max_gpus")
    used_runs: int


class ProjectDetail(ProjectPublic):
    members: list[MemberPublic]
    quotas: list[QuotaPublic] = Field(default_factory=list, description="What it may hold of each queue (docs/scheduling.md)")


class ProjectList(BaseModel):
    data: list[ProjectPublic]
    count: int


class MemberSet(Strict):
    role: Role


class TokenCreate(Strict):
    name: str = Field(min_length=1, max_length=128)
    scopes: list[Scope] = Field(min_length=1, description="read, write, admin (each implies those below it) or worker alone")
    expires_in_days: int | None = Field(default=None, ge=1, le=3650, description="None: never expires")
    user: str | None = Field(default=None, description="Site admins may create a token for another user")


class TokenPublic(BaseModel):
    id: int
    name: str
    user: str
    prefix: str
    scopes: list[Scope]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenPublic):
    token: str = Field(description="The secret; shown only in this response")


class TokenList(BaseModel):
    data: list[TokenPublic]
    count: int


class Me(BaseModel):
    user: UserPublic
    scopes: list[Scope]
    roles: dict[str, Role] = Field(description="project name -> the caller's role")
