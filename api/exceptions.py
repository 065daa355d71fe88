"""What the API's rules refuse, as plain exceptions: services raise them without importing FastAPI, so the
reconciler's thread and the reporting hot path call the same services as a request does. One handler
(api/errors.py) answers each with its status code and the `{"detail": ...}` body FastAPI's HTTPException gave.
"""

from typing import Any, ClassVar


class DomainError(Exception):
    status_code: ClassVar[int] = 500
    headers: ClassVar[dict[str, str] | None] = None

    def __init__(self, detail: Any) -> None:
        super().__init__(detail)
        self.detail = detail


class BadRequest(DomainError):
    status_code = 400


class Unauthorized(DomainError):
    status_code = 401
    headers = {"WWW-Authenticate": 'Bearer realm="rlplane"'}


class Forbidden(DomainError):
    status_code = 403


class NotFound(DomainError):
    """`NotFound("run 7")` says "run 7 not found"."""

    status_code = 404

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} not found")


class Conflict(DomainError):
    status_code = 409


class UnsupportedMediaType(DomainError):
    status_code = 415


class Unprocessable(DomainError):
    """A field the client sent is wrong: named by its location, as FastAPI's own validation errors are."""

    status_code = 422

    def __init__(self, loc: list, msg: str) -> None:
        super().__init__([{"loc": loc, "msg": msg, "type": "value_error"}])

    @classmethod
    def many(cls, errors: list[dict[str, Any]]) -> "Unprocessable":
        """Several errors at once, each already shaped like pydantic's ({"loc", "msg", "type", ...})."""
        error = cls.__new__(cls)
        DomainError.__init__(error, errors)
        return error
