"""Delivering an alert: a Slack-compatible JSON POST to the rule's webhook, and apprise for every other service.

Each attempt is recorded on the alert (when, where to, whether it worked, why not); a failure is tried again with
backoff (5 s, 10 s, 20 s, ...) up to MAX_ATTEMPTS, then the alert's delivery is `failed`. The URLs are secrets (a
Slack webhook's path is its credential): records and logs name the target ("webhook", "notify 1"), never the URL,
and an error is told by its kind and status code only (a URL can ride in an exception's text).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.models import Alert, AlertRule, Project, Run
from api.models.base import utcnow
from api.unit_of_work import transaction

logger = logging.getLogger("rlplane.alerts")

MAX_ATTEMPTS = 5
TIMEOUT_S = 5.0
FIRST_BACKOFF_S = 5.0


def message(alert: Alert, run: Run, project: str) -> str:
    return f"[rlplane] {alert.name} on run {run.id} ({run.name}, project {project}): {alert.message}"


def post_webhook(url: str, text: str, payload: dict) -> None:
    """Slack's incoming-webhook shape ({text}) with the alert beside it; urllib, which logs nothing of the URL."""
    body = json.dumps({"text": text, "alert": payload}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310 - http(s) only, checked by the rule
        if not 200 <= response.status < 300:
            raise DeliveryError(f"HTTP {response.status}")


def notify(url: str, title: str, text: str) -> None:
    import apprise

    with _redacted(url):
        sender = apprise.Apprise()
        if not sender.add(url):
            raise DeliveryError("apprise does not understand this URL")
        if not sender.notify(title=title, body=text):
            raise DeliveryError("apprise could not deliver")


class _Redacting(logging.Filter):
    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        for secret in self.secrets:
            text = text.replace(secret, "…")
        record.msg, record.args = text, ()
        return True


# apprise logs the URLs it loads and posts to (at DEBUG), urllib3 the paths it requests: both carry tokens.
_CHATTY = ("apprise", "urllib3.connectionpool")


@contextmanager
def _redacted(url: str) -> Iterator[None]:
    """While apprise sends to `url`, every part of it (host, path, each longer path segment, query, user,
    password: apprise's slack://A/B/C keeps tokens in all of them) is cut from those libraries' log records."""
    parts = urlsplit(url)
    pieces = {parts.netloc, parts.path, parts.query, parts.username or "", parts.password or ""}
    pieces |= {segment for segment in parts.path.split("/") if len(segment) >= 6}
    redacting = _Redacting(sorted((p for p in pieces if p and p != "/"), key=len, reverse=True))
    loggers = [logging.getLogger(name) for name in _CHATTY]
    for log in loggers:
        log.addFilter(redacting)
    try:
        yield
    finally:
        for log in loggers:
            log.removeFilter(redacting)


class DeliveryError(Exception):
    pass


def _why(exc: Exception) -> str:
    """What went wrong, without the URL: the kind of error and an HTTP status when there is one."""
    if isinstance(exc, DeliveryError):
        return str(exc)
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return f"unreachable ({type(exc.reason).__name__})"
    return type(exc).__name__


def deliver_due(factory: sessionmaker[Session], now: datetime | None = None, post: Callable = post_webhook) -> int:
    """Try every alert whose delivery is due; returns how many were tried. One transaction per alert: a slow
    target holds no other alert's row."""
    now = now or utcnow()
    with factory() as session:
        due = session.scalars(
            select(Alert.id).where(Alert.delivery == "pending", Alert.next_attempt_at <= now).order_by(Alert.id)
        ).all()
    for alert_id in due:
        with transaction(factory) as uow:
            _deliver(uow.session, alert_id, now, post)
    return len(due)


def _deliver(session: Session, alert_id: int, now: datetime, post: Callable) -> None:
    alert = session.get(Alert, alert_id, with_for_update=True)
    if alert is None or alert.delivery != "pending":
        return
    rule = session.get(AlertRule, alert.rule_id) if alert.rule_id is not None else None
    run = session.get(Run, alert.run_id)
    actions = (rule.spec.get("actions") or {}) if rule is not None else {}
    project = session.get(Project, run.project_id).name
    text = message(alert, run, project)
    payload = {
        "id": alert.id,
        "name": alert.name,
        "run_id": run.id,
        "run": run.name,
        "project": project,
        "message": alert.message,
    }
    done = {d["target"] for d in alert.deliveries if d["ok"]}
    targets: list[tuple[str, Callable[[], None]]] = []
    if actions.get("webhook") and "webhook" not in done:
        targets.append(("webhook", lambda: post(actions["webhook"], text, payload)))
    for index, url in enumerate(actions.get("notify") or [], start=1):
        if f"notify {index}" not in done:
            targets.append((f"notify {index}", lambda url=url: notify(url, f"rlplane: {alert.name}", text)))
    attempts = 1 + max((d["attempt"] for d in alert.deliveries), default=0)
    records, failed = list(alert.deliveries), False
    for target, send in targets:
        try:
            send()
            records.append({"attempt": attempts, "at": now.isoformat(), "target": target, "ok": True, "error": None})
            logger.info("alert %s (rule %s) delivered to its %s", alert.id, alert.rule_id, target)
        except Exception as exc:  # any failure of a remote service is recorded and retried, never raised
            failed = True
            records.append({"attempt": attempts, "at": now.isoformat(), "target": target, "ok": False, "error": _why(exc)})
            logger.warning("alert %s (rule %s): delivery to its %s failed: %s", alert.id, alert.rule_id, target, _why(exc))
    alert.deliveries = records
    if not failed:
        alert.delivery, alert.next_attempt_at = "delivered", None
    elif attempts >= MAX_ATTEMPTS:
        alert.delivery, alert.next_attempt_at = "failed", None
    else:
        alert.next_attempt_at = now + timedelta(seconds=FIRST_BACKOFF_S * 2 ** (attempts - 1))
