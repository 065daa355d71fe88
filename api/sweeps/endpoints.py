from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, status

from api.auth.deps import Reader, Writer
from api.bodies import document_body, document_openapi, located
from api.code import service as code
from api.db import SessionDep
from api.sweeps import schemas, service, views
from rlplane.spec import SpecError
from rlplane.sweep import SweepDoc, load_sweep

router = APIRouter(prefix="/api/v1/sweeps", tags=["sweeps"])

_DOCUMENT_BODY = document_openapi("The sweep document (spec, space, method, metric, goal, trials, parallel, ...), JSON or YAML")


async def sweep_body(request: Request) -> SweepDoc:
    data, _ = await document_body(request, "sweep")
    try:
        return load_sweep(data)
    except SpecError as exc:
        raise located(exc) from None


@router.post("", status_code=status.HTTP_201_CREATED, response_model=schemas.SweepDetail, openapi_extra=_DOCUMENT_BODY)
def create_sweep(
    principal: Writer, body: Annotated[SweepDoc, Depends(sweep_body)], session: SessionDep, request: Request
) -> schemas.SweepDetail:
    """Check the sweep (the spec at every end of every range) and start its first `parallel` trials."""
    code.check_snapshot(request.app.state.artifacts, body.spec, ("body", "spec"))
    sweep = service.submit(session, principal, body, request.app.state.settings.reward_entrypoints)
    session.flush()
    return views.detail(session, sweep)


@router.get("", response_model=schemas.SweepList)
def list_sweeps(
    principal: Reader,
    session: SessionDep,
    project: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> schemas.SweepList:
    return views.listing(session, principal.project_ids(), project, limit)


@router.get("/{sweep_id}", response_model=schemas.SweepDetail)
def get_sweep(principal: Reader, sweep_id: int, session: SessionDep) -> schemas.SweepDetail:
    return views.detail(session, service.readable(session, principal, sweep_id))


@router.post("/{sweep_id}/cancel", response_model=schemas.SweepDetail)
def cancel_sweep(principal: Writer, sweep_id: int, session: SessionDep) -> schemas.SweepDetail:
    sweep = service.cancel(session, principal, sweep_id)
    session.flush()
    return views.detail(session, sweep)
