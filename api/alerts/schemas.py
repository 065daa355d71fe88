from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field


class RulePublic(BaseModel):
    id: int
    name: str
    project: str
    run_id: int | None
    muted: bool
    condition: dict[str, Any]
    actions: dict[str, Any] = Field(description="webhook and notify URLs shown as scheme://host/… (they are secrets)")
    created_at: datetime


class RuleList(BaseModel):
    items: list[RulePublic]


class Mute(BaseModel):
    muted: bool = True


class Delivery(BaseModel):
    attempt: int
    at: str
    target: str = Field(description="webhook, notify 1, notify 2, ...")
    ok: bool
    error: str | None


class AlertPublic(BaseModel):
    id: int
    run_id: int
    run_name: str
    project: str
    rule_id: int | None
    source: str = Field(description="rule:<id> or detector:<name>")
    name: str
    message: str
    state: Literal["open", "resolved"]
    fired_at: datetime
    resolved_at: datetime | None
    delivery: Literal["none", "pending", "delivered", "failed"]
    deliveries: list[Delivery]


class AlertList(BaseModel):
    items: list[AlertPublic]


class DetectorPublic(BaseModel):
    name: str
    algorithms: list[str]
    summary: str


class DetectorList(BaseModel):
    items: list[DetectorPublic]
