from fastapi import APIRouter, Request

from api.auth.deps import Reader
from api.db import SessionDep
from api.queues import schemas, service

router = APIRouter(prefix="/api/v1/queues", tags=["queues"])


@router.get("", response_model=schemas.QueueList)
def list_queues(principal: Reader, session: SessionDep, request: Request) -> schemas.QueueList:
    """Each queue: its live workers, what each project holds of it (beside its quota), and who waits and why."""
    settings = request.app.state.settings
    slurm = set(settings.slurm_queues or {})
    return schemas.QueueList(data=service.queues(session, principal, settings.lost_after_s, slurm))
