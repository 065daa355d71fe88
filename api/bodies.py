"""Request bodies that are documents (a run spec, a pipeline): JSON or YAML, parsed once, errors located in the body."""

from typing import Any

from fastapi import Request

from api.exceptions import Unprocessable, UnsupportedMediaType
from rlplane.spec import SpecError
from rlplane.spec.io import read_document

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")


def located(exc: SpecError, prefix: tuple[str, ...] = ("body",)) -> Unprocessable:
    """A document's errors as a 422 whose locations start at the body (or at `prefix`: where the document is in it)."""
    return Unprocessable.many([{**err, "loc": [*prefix, *err["loc"]]} for err in exc.errors])


async def document_body(request: Request, what: str) -> tuple[dict, str]:
    """The body as a mapping, and as text (YAML keeps its comments; Postgres text holds no NUL)."""
    content_type = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if content_type not in ("application/json", *YAML_TYPES):
        raise UnsupportedMediaType(f"send the {what} as application/json or application/yaml, not {content_type}")
    body = await request.body()
    try:
        data = read_document(body, "json" if content_type == "application/json" else "yaml")
    except SpecError as exc:
        raise located(exc) from None
    return data, body.decode(errors="replace").replace("\x00", "\ufffd")


def document_openapi(description: str) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads its body with `document_body` (FastAPI cannot see it)."""
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {"application/json": {"schema": {"type": "object"}}, "application/yaml": {"schema": {"type": "string"}}},
        }
    }
