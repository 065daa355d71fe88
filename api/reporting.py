"""The reporting hot path: a worker sends metrics, logs and samples many times a second.

FastAPI would hop to a worker thread for each sync dependency (session, token, endpoint); here the
whole request (auth first, then validation, the write and the commit) runs in one hop.
"""

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.auth.deps import principal_from_request
from api.auth.principal import Principal
from api.db import dispatcher_nudge
from api.prometheus import record_ingest
from api.unit_of_work import transaction

T = TypeVar("T")


def json_body(adapter: TypeAdapter, description: str) -> dict[str, Any]:
    """The OpenAPI requestBody for a body parsed by hand."""
    schema = adapter.json_schema(ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    return {
        "requestBody": {"required": True, "description": description, "content": {"application/json": {"schema": schema}}},
        "x-components": defs,
    }


def parse(adapter: TypeAdapter[T], raw: bytes) -> T:
    try:
        return adapter.validate_json(raw)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False, include_input=False)]
        raise RequestValidationError(errors) from None


async def in_one_hop(request: Request, work: Callable[[Session, Principal, bytes], T]) -> T:
    raw = await request.body()

    def run() -> T:
        with transaction(request.app.state.sessionmaker, dispatcher_nudge(request.app)) as uow:
            return work(uow.session, principal_from_request(uow.session, request), raw)

    result = await run_in_threadpool(run)
    record_ingest(request, result)  # the ingest rate on /metrics
    return result
