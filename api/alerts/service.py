"""Alerts: rules over runs' metrics and status, the RL detectors every RL run gets, and what fired.

`evaluate` (the reconciler's, every `alert_s`) looks at each run that is active or ended lately: every rule of its
project (or of it) that is not muted, and every detector for its algorithm unless the project has a rule for that
detector (its own parameters, or muted). A condition that holds opens an alert (one open per run and source),
which is resolved when the condition clears (past a detector's release bound: Verdict.cleared) or when the run ends;
a status alert stays. Opening one stops the run if the rule says so
and queues its delivery (api/alerts/delivery.py).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select, union_all
from sqlalchemy.orm import Session

from api.alerts.detectors import DETECTORS, Verdict, change, nonfinite, threshold
from api.auth.principal import Principal
from api.auth.service import in_project
from api.exceptions import Unprocessable
from api.models import Alert, AlertRule, Metric, Project, Run
from api.models.base import utcnow
from api.runs import service as runs
from rlplane.alerts import Change, DetectorRule, NonFinite, RuleSpec, Stalled, StatusChange, Threshold
from rlplane.limits import fit_reason
from rlplane.status import ACTIVE

RECENT_ENDS = timedelta(minutes=10)  # a run that ended this recently is still looked at (its status rules)
SERIES_POINTS = 200


# --- rules ---


def create_rule(session: Session, principal: Principal, spec: RuleSpec) -> AlertRule:
    project = runs.project_by_name_or_422(session, spec.project)
    principal.require(project.id, "write")
    if spec.run_id is not None:
        run = runs.readable_run(session, principal, spec.run_id)
        if run.project_id != project.id:
            raise Unprocessable(["body", "run_id"], f"run {run.id} is not in project {spec.project!r}")
    rule = AlertRule(
        project_id=project.id,
        run_id=spec.run_id,
        name=spec.name,
        spec=spec.model_dump(mode="json", include={"condition", "actions"}),
        created_by=principal.user_id,
    )
    session.add(rule)
    session.flush()
    return rule


def readable_rule(session: Session, principal: Principal, rule_id: int, action: str = "read") -> AlertRule:
    return in_project(session, principal, AlertRule, rule_id, "alert rule", action)


def set_muted(session: Session, principal: Principal, rule_id: int, muted: bool) -> AlertRule:
    rule = readable_rule(session, principal, rule_id, "write")
    rule.muted = muted
    return rule


def delete_rule(session: Session, principal: Principal, rule_id: int) -> None:
    session.delete(readable_rule(session, principal, rule_id, "write"))


# --- evaluation ---


def evaluate(session: Session, now: datetime | None = None) -> list[Alert]:
    """Open and resolve alerts for every run worth looking at; returns the alerts opened."""
    now = now or utcnow()
    candidates = session.scalars(
        select(Run).where(or_(Run.status.in_(ACTIVE), Run.ended_at >= now - RECENT_ENDS)).order_by(Run.id)
    ).all()
    opened: list[Alert] = []
    rules_by_project: dict[int, list[AlertRule]] = {}
    for run in candidates:
        if run.project_id not in rules_by_project:
            rules_by_project[run.project_id] = list(
                session.scalars(select(AlertRule).where(AlertRule.project_id == run.project_id).order_by(AlertRule.id))
            )
        rules = [r for r in rules_by_project[run.project_id] if r.run_id in (None, run.id)]
        opened += _evaluate_run(session, run, rules, now)
    return opened


def _evaluate_run(session: Session, run: Run, rules: list[AlertRule], now: datetime) -> list[Alert]:
    conditions = [(rule, RuleSpec.model_validate({"name": rule.name, **rule.spec}).condition) for rule in rules]
    overridden = {condition.name for _, condition in conditions if isinstance(condition, DetectorRule)}
    detectors = [
        d for d in DETECTORS.values() if run.algorithm in d.algorithms and d.name not in overridden and run.status in ACTIVE
    ]
    live = [(rule, condition) for rule, condition in conditions if not rule.muted]
    ended = run.status not in ACTIVE
    if ended:
        # An ended run changes no more, and stalls no more; its metric rules are still read, for what it logged after
        # the last look (a NaN that ended it between two ticks: its rule fired on no run before), but only a rule
        # that never fired on it while it ran may fire now.
        live = [(rule, condition) for rule, condition in live if not isinstance(condition, Stalled)]
    series = _Series(session, run.id, _series_read(run, [condition for _, condition in live], detectors))
    checks: list[tuple[str, str, AlertRule | None, Verdict, bool]] = []  # source, name, rule, verdict, sticky
    for rule, condition in live:
        verdict = _check(condition, run, series, now)
        checks.append((f"rule:{rule.id}", rule.name, rule, verdict, isinstance(condition, StatusChange)))
    for detector in detectors:
        verdict = detector.check(series.view(detector.keys), _detector_params(run, {}))
        checks.append((f"detector:{detector.name}", detector.name, None, verdict, False))
    # Each source's newest alert on this run, read once (ascending ids: the newest wins).
    latest = {a.source: a for a in session.scalars(select(Alert).where(Alert.run_id == run.id).order_by(Alert.id))}
    opened = []
    for source, name, rule, verdict, sticky in checks:
        current = latest.get(source)
        if ended and not sticky and current is not None:
            continue  # what it fired while it ran is closed below, and not opened anew
        if verdict.firing and (current is None or (current.state == "resolved" and not sticky)):
            opened.append(_open(session, run, source, name, rule, verdict.message, now))
        elif not verdict.firing and verdict.cleared is not False and current is not None and current.state == "open":
            if not sticky:
                current.state, current.resolved_at = "resolved", now
    if ended:
        # What an ended run's metrics opened (rules and detectors), this time too, closes with the run (its delivery
        # goes on); its status alerts stay, as always.
        status_sources = {source for source, _, _, _, sticky in checks if sticky}
        for alert in [*latest.values(), *opened]:
            if alert.state == "open" and alert.source not in status_sources:
                alert.state, alert.resolved_at = "resolved", now
    return opened


def _series_read(run: Run, conditions: list, detectors: list) -> list[str]:
    """The keys this evaluation of the run reads: its rules' metrics and its detectors' series."""
    keys = [key for detector in detectors for key in detector.keys]
    for condition in conditions:
        if isinstance(condition, Threshold | Change) or (isinstance(condition, NonFinite) and condition.metric):
            keys.append(condition.metric)
        elif isinstance(condition, DetectorRule) and run.status in ACTIVE:
            keys += DETECTORS[condition.name].keys
    return list(dict.fromkeys(keys))


def _detector_params(run: Run, params: dict[str, float]) -> dict[str, float]:
    """A detector's parameters: the run's own limits (max_new_tokens) under the rule's overrides."""
    gen = getattr(run.run_spec.options, "gen", None)  # an online algorithm's sampling
    return {**({"max_new_tokens": float(gen.max_new_tokens)} if gen is not None else {}), **params}


def _check(condition, run: Run, series: _Series, now: datetime) -> Verdict:
    if isinstance(condition, Threshold):
        return threshold(series.points(condition.metric), condition.op, condition.value, condition.window, condition.metric)
    if isinstance(condition, Change):
        return change(series.points(condition.metric), condition.op, condition.value, condition.window, condition.metric)
    if isinstance(condition, NonFinite):
        if condition.metric is not None:
            return nonfinite({condition.metric: series.points(condition.metric)})
        return series.any_nonfinite()
    if isinstance(condition, Stalled):
        if run.status != "running":
            return Verdict(False)
        last = series.last_time() or (run.started_at.timestamp() if run.started_at else None)
        idle = None if last is None else now.timestamp() - last
        return Verdict(
            idle is not None and idle > condition.minutes * 60,
            f"no step progress for {idle / 60:.1f} minutes (at step {run.last_step})" if idle is not None else "",
        )
    if isinstance(condition, StatusChange):
        return Verdict(run.status in condition.statuses, f"run {run.id} {run.status}: {run.status_reason}".rstrip(": "))
    if isinstance(condition, DetectorRule):
        if run.status not in ACTIVE:
            return Verdict(False)
        detector = DETECTORS[condition.name]
        return detector.check(series.view(detector.keys), _detector_params(run, condition.params))
    raise AssertionError(condition)


def _open(session: Session, run: Run, source: str, name: str, rule: AlertRule | None, message: str, now: datetime) -> Alert:
    actions = (rule.spec.get("actions") or {}) if rule is not None else {}
    deliver = bool(actions.get("webhook") or actions.get("notify"))
    alert = Alert(
        run_id=run.id,
        rule_id=rule.id if rule else None,
        source=source,
        name=name,
        message=fit_reason(message),
        state="open",
        fired_at=now,
        delivery="pending" if deliver else "none",
        deliveries=[],
        next_attempt_at=now if deliver else None,
    )
    session.add(alert)
    if actions.get("stop_run") and run.status in ("queued", "starting", "running"):
        runs.set_status(
            session, run, "cancelled" if run.status == "queued" else "cancelling", f"stopped by alert {name}: {message}"
        )
    session.flush()
    return alert


class _Series:
    """A run's latest SERIES_POINTS points of each key an evaluation reads, in one statement: a UNION ALL of one
    limited read per key, each a range of the (run, key, step) index. (A window function over the keys would read
    their whole series; a statement per key made a tick cost a round trip per key per run.)"""

    def __init__(self, session: Session, run_id: int, keys: list[str]) -> None:
        self.session, self.run_id = session, run_id
        self._points: dict[str, list[float]] = {key: [] for key in keys}
        reads = [
            select(
                select(Metric.key, Metric.step, Metric.value, Metric.is_nan)
                .where(Metric.run_id == run_id, Metric.key == key)
                .order_by(Metric.step.desc())
                .limit(SERIES_POINTS)
                .subquery()
            )
            for key in keys
        ]
        if not reads:
            return
        rows = session.execute(reads[0] if len(reads) == 1 else union_all(*reads)).all()
        for key, _step, value, is_nan in sorted(rows, key=lambda row: row[1]):
            self._points[key].append(math.nan if is_nan else value)

    def points(self, key: str) -> list[float]:
        return self._points[key]

    def view(self, keys: tuple[str, ...]) -> dict[str, list[float]]:
        return {key: self._points[key] for key in keys}

    def any_nonfinite(self) -> Verdict:
        row = self.session.execute(
            select(Metric.key, Metric.step, Metric.value, Metric.is_nan)
            .where(Metric.run_id == self.run_id, or_(Metric.is_nan.is_(True), Metric.value > 1e308, Metric.value < -1e308))
            .order_by(Metric.id.desc())
            .limit(1)
        ).first()
        if row is None:
            return Verdict(False)
        shown = "NaN" if row.is_nan else str(row.value)
        return Verdict(True, f"{row.key} is {shown} at step {row.step}")

    def last_time(self) -> float | None:
        return self.session.scalar(select(func.max(Metric.time)).where(Metric.run_id == self.run_id))


# --- reading ---


def list_alerts(
    session: Session, principal: Principal, *, project: str | None, run_id: int | None, state: str | None, limit: int
) -> list[tuple[Alert, Run, str]]:
    query = select(Alert, Run, Project.name).join(Run, Run.id == Alert.run_id).join(Project, Project.id == Run.project_id)
    if (ids := principal.project_ids()) is not None:
        query = query.where(Run.project_id.in_(ids))
    if project is not None:
        query = query.where(Project.name == project)
    if run_id is not None:
        query = query.where(Alert.run_id == run_id)
    if state is not None:
        query = query.where(Alert.state == state)
    return [tuple(row) for row in session.execute(query.order_by(Alert.id.desc()).limit(limit)).all()]


def list_rules(session: Session, principal: Principal, project: str | None) -> list[tuple[AlertRule, str]]:
    query = select(AlertRule, Project.name).join(Project, Project.id == AlertRule.project_id)
    if (ids := principal.project_ids()) is not None:
        query = query.where(AlertRule.project_id.in_(ids))
    if project is not None:
        query = query.where(Project.name == project)
    return [tuple(row) for row in session.execute(query.order_by(AlertRule.id)).all()]
