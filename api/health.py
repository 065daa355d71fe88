from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import text

from api.migrate import current_revision, head_revision

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str
    detail: str = ""


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """Liveness: the process answers."""
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}})
def readyz(request: Request):
    """Readiness: the database answers and its schema is at the newest migration."""
    engine = request.app.state.engine
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        revision, head = current_revision(engine), head_revision()
    except Exception as exc:  # any driver error means not ready; say which
        return JSONResponse({"status": "unavailable", "detail": f"database unreachable: {type(exc).__name__}"}, status_code=503)
    if revision != head:
        return JSONResponse({"status": "unavailable", "detail": f"schema at {revision}, code expects {head}"}, status_code=503)
    return Health(status="ok")
