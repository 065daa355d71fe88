from typing import Annotated, Literal
from urllib.parse import urlsplit

from fastapi import APIRouter, Query, Response, status

from api.alerts import schemas, service
from api.alerts.detectors import DETECTORS
from api.auth.deps import Reader, Writer
from api.db import SessionDep
from api.models import AlertRule, Project
from rlplane.alerts import RuleSpec

router = APIRouter(prefix="/api/v1", tags=["alerts"])


def _masked(url: str) -> str:
    """scheme://host/…: enough to tell targets apart, nothing of the path or query where tokens live."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}/…" if parts.scheme else "…"


def rule_public(session, rule: AlertRule, project: str | None = None) -> schemas.RulePublic:
    actions = dict(rule.spec.get("actions") or {})
    if actions.get("webhook"):
        actions["webhook"] = _masked(actions["webhook"])
    actions["notify"] = [_masked(url) for url in actions.get("notify") or []]
    return schemas.RulePublic(
        id=rule.id,
        name=rule.name,
        project=project or session.get(Project, rule.project_id).name,
        run_id=rule.run_id,
        muted=rule.muted,
        condition=rule.spec["condition"],
        actions=actions,
        created_at=rule.created_at,
    )


@router.post("/alert-rules", status_code=status.HTTP_201_CREATED, response_model=schemas.RulePublic)
def create_rule(principal: Writer, body: RuleSpec, session: SessionDep) -> schemas.RulePublic:
    """A condition over a project's runs (or one run) and what to do when it holds: show it, a webhook, apprise
    notifications, stop the run. A rule for a detector replaces its defaults; muted, it silences it."""
    return rule_public(session, service.create_rule(session, principal, body))


@router.get("/alert-rules", response_model=schemas.RuleList)
def list_rules(principal: Reader, session: SessionDep, project: Annotated[str | None, Query(max_length=128)] = None):
    return schemas.RuleList(items=[rule_public(session, r, p) for r, p in service.list_rules(session, principal, project)])


@router.post("/alert-rules/{rule_id}/mute", response_model=schemas.RulePublic)
def mute_rule(principal: Writer, rule_id: int, body: schemas.Mute, session: SessionDep) -> schemas.RulePublic:
    return rule_public(session, service.set_muted(session, principal, rule_id, body.muted))


@router.delete("/alert-rules/{rule_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_rule(principal: Writer, rule_id: int, session: SessionDep) -> Response:
    service.delete_rule(session, principal, rule_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/alert-detectors", response_model=schemas.DetectorList)
def list_detectors(principal: Reader) -> schemas.DetectorList:
    """The RL detectors every GRPO/PPO run gets unless its project mutes them."""
    return schemas.DetectorList(
        items=[schemas.DetectorPublic(name=d.name, algorithms=list(d.algorithms), summary=d.summary) for d in DETECTORS.values()]
    )


@router.get("/alerts", response_model=schemas.AlertList)
def list_alerts(
    principal: Reader,
    session: SessionDep,
    project: Annotated[str | None, Query(max_length=128)] = None,
    run_id: Annotated[int | None, Query(ge=1)] = None,
    state: Literal["open", "resolved"] | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> schemas.AlertList:
    """What fired, newest first: the run page shows its run's, the runs list marks runs with open ones."""
    rows = service.list_alerts(session, principal, project=project, run_id=run_id, state=state, limit=limit)
    return schemas.AlertList(
        items=[
            schemas.AlertPublic(
                id=a.id,
                run_id=run.id,
                run_name=run.name,
                project=project_name,
                rule_id=a.rule_id,
                source=a.source,
                name=a.name,
                message=a.message,
                state=a.state,
                fired_at=a.fired_at,
                resolved_at=a.resolved_at,
                delivery=a.delivery,
                deliveries=a.deliveries,
            )
            for a, run, project_name in rows
        ]
    )
