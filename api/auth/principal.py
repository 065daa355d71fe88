"""Who is calling and what they may do: token scopes intersected with project roles."""

from dataclasses import dataclass, field

from api.exceptions import Forbidden

SCOPES = ("read", "write", "admin", "worker")
# A scope grants itself and everything below it; `worker` stands alone.
_SCOPE_IMPLIES = {"admin": {"admin", "write", "read"}, "write": {"write", "read"}, "read": {"read"}, "worker": {"worker"}}
_ROLE_RANK = {"viewer": 0, "member": 1, "admin": 2}
_ACTION_ROLE = {"read": "viewer", "write": "member", "admin": "admin"}


@dataclass(frozen=True)
class Principal:
    user_id: int
    user_name: str
    token_id: int
    scopes: frozenset[str]
    is_site_admin: bool
    roles: dict[int, str] = field(default_factory=dict)  # project id -> role

    @property
    def granted(self) -> set[str]:
        return set().union(*(_SCOPE_IMPLIES[s] for s in self.scopes)) if self.scopes else set()

    @property
    def is_worker(self) -> bool:
        return "worker" in self.scopes

    def has_scope(self, scope: str) -> bool:
        return scope in self.granted

    def project_ids(self) -> list[int] | None:
        """Projects this caller may read; None means all of them (site admin)."""
        return None if self.is_site_admin else list(self.roles)

    def can(self, project_id: int, action: str) -> bool:
        if not self.has_scope(action):
            return False
        if self.is_site_admin:
            return True
        role = self.roles.get(project_id)
        return role is not None and _ROLE_RANK[role] >= _ROLE_RANK[_ACTION_ROLE[action]]

    def require(self, project_id: int, action: str) -> None:
        if not self.can(project_id, action):
            raise Forbidden(f"this token may not {action} in that project (needs scope '{action}' and a project role)")

    def require_site_admin(self) -> None:
        if not (self.is_site_admin and self.has_scope("admin")):
            raise Forbidden("site admin with an 'admin'-scoped token required")
