"""Error responses that are always JSON and never 500 for something the client sent."""

import json
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DataError, IntegrityError
from starlette.responses import JSONResponse, Response

from api.exceptions import DomainError
from rlplane.floats import encode


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return encode(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _json(status: int, content: Any) -> Response:
    # ensure_ascii escapes lone surrogates a client sent, which UTF-8 could not encode.
    body = json.dumps(_json_safe(content), ensure_ascii=True, allow_nan=False)
    return Response(body, status_code=status, media_type="application/json")


async def domain_error(_request: Request, exc: DomainError) -> Response:
    # Rendered as FastAPI renders an HTTPException, so the bodies stay byte for byte what clients had.
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def validation_error(_request: Request, exc: RequestValidationError) -> Response:
    lenient = {bytes: lambda raw: raw.decode("utf-8", "replace")}
    return _json(422, {"detail": jsonable_encoder(exc.errors(), custom_encoder=lenient)})


async def unstorable_value(_request: Request, _exc: Exception) -> Response:
    msg = "a value cannot be stored: text with NUL characters, or a number out of the database's range"
    return _json(422, {"detail": [{"loc": ["body"], "msg": msg, "type": "value_error"}]})


async def integrity_error(_request: Request, _exc: IntegrityError) -> Response:
    return _json(409, {"detail": "the request conflicts with stored data (a duplicate, or a reference that changed); retry"})


def install(app: FastAPI) -> None:
    app.add_exception_handler(DomainError, domain_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(DataError, unstorable_value)
    app.add_exception_handler(OverflowError, unstorable_value)  # SQLite refuses ints beyond 64 bits
    app.add_exception_handler(IntegrityError, integrity_error)
