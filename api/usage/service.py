"""Usage: each attempt holds its run's slots of the queue (GPUs x nodes, or worker slots on CPU) from its start to
its end (now, while it runs); its cost within a period is that share of its wall time which falls in the period.
Rolled up by project, user, queue or run, over the period and optionally per hour or day. Only what the caller may
read is counted.

Tokens: an attempt's input tokens as its worker said with its end (run_attempts.tokens; the supervised recipes count
them), spread evenly over its wall time, so a period holding half of an attempt holds half of its tokens. Attempts
that never said (lost without a word, RL recipes, scripts) add none, and tokens_per_gpu_second divides by the
GPU-seconds of the attempts that did."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.exceptions import Unprocessable
from api.models import Project, Run, RunAttempt, User
from api.models.base import utcnow
from api.usage import schemas

STEP = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
MAX_BUCKETS = 1000


@dataclass
class _Sum:
    gpu: float = 0.0
    cpu: float = 0.0
    tokens: float = 0.0
    counted_gpu: float = 0.0  # the GPU-seconds of the attempts whose tokens are known
    attempts: int = 0
    runs: set[int] = field(default_factory=set)
    buckets: dict[datetime, list[float]] = field(default_factory=dict)


def _utc(moment: datetime) -> datetime:
    """A time given without a zone is UTC, as every time the API stores and answers."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def overlap(start: datetime, end: datetime, since: datetime, until: datetime) -> float:
    """Seconds of [start, end) within [since, until)."""
    return max(0.0, (min(end, until) - max(start, since)).total_seconds())


def _within(since: datetime, until: datetime) -> ColumnElement[bool]:
    """SQL: an attempt that ran some of [since, until)."""
    return (RunAttempt.started_at < until) & or_(RunAttempt.ended_at.is_(None), RunAttempt.ended_at > since)


def attempt_cost(run: Run, seconds: float) -> tuple[float, float]:
    """(GPU-seconds, CPU worker-slot-seconds) of `seconds` of one attempt of `run`."""
    return (run.slots * seconds, 0.0) if run.gpus else (0.0, run.slots * seconds)


def report(
    session: Session,
    principal: Principal,
    since: datetime | None,
    until: datetime | None,
    by: schemas.GroupBy,
    interval: str | None,
) -> schemas.UsageReport:
    until = _utc(until) if until is not None else utcnow()
    since = _utc(since) if since is not None else until - timedelta(days=7)
    if since >= until:
        raise Unprocessable(["query", "since"], "since must be before until")
    if interval is not None and (until - since) / STEP[interval] > MAX_BUCKETS:
        why = f"more than {MAX_BUCKETS} {interval}s: shorten the period or widen the interval"
        raise Unprocessable(["query", "interval"], why)
    now = utcnow()
    rows = session.execute(
        select(RunAttempt.started_at, RunAttempt.ended_at, RunAttempt.tokens, Run, Project.name, User.name)
        .join(Run, Run.id == RunAttempt.run_id)
        .join(Project, Project.id == Run.project_id)
        .outerjoin(User, User.id == Run.created_by)
        .where(_within(since, until))
    ).all()
    sums: dict[str, _Sum] = {}
    for started, ended, tokens, run, project, user in rows:
        if not principal.can(run.project_id, "read"):
            continue
        key = {"project": project, "user": user or "(deleted user)", "queue": run.queue, "run": f"{run.id} {run.name}"}[by]
        total = sums.setdefault(key, _Sum())
        attempt = _Attempt(run, started, ended or now, tokens)
        gpu, cpu = attempt_cost(run, overlap(started, attempt.end, since, until))
        total.gpu, total.cpu, total.attempts = total.gpu + gpu, total.cpu + cpu, total.attempts + 1
        if tokens is not None:
            total.tokens += attempt.tokens_within(since, until)
            total.counted_gpu += gpu
        total.runs.add(run.id)
        if interval is not None:
            _spread(total.buckets, attempt, since, until, STEP[interval])
    data = [
        schemas.UsageRow(
            key=key,
            gpu_seconds=round(total.gpu, 3),
            cpu_slot_seconds=round(total.cpu, 3),
            tokens=round(total.tokens),
            tokens_per_gpu_second=round(total.tokens / total.counted_gpu, 3) if total.counted_gpu > 0 else None,
            attempts=total.attempts,
            runs=len(total.runs),
            over_time=_buckets(total.buckets, since, until, STEP[interval]) if interval is not None else [],
        )
        for key, total in sums.items()
    ]
    data.sort(key=lambda row: (-row.gpu_seconds, -row.cpu_slot_seconds, row.key))
    return schemas.UsageReport(since=since, until=until, by=by, interval=interval, data=data)  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Attempt:
    run: Run
    start: datetime
    end: datetime  # now, while it runs
    tokens: int | None

    def tokens_within(self, since: datetime, until: datetime) -> float:
        """Its tokens spread evenly over its wall time: the share that falls in [since, until)."""
        wall = (self.end - self.start).total_seconds()
        if not self.tokens:
            return 0.0
        return self.tokens * (overlap(self.start, self.end, since, until) / wall if wall > 0 else 1.0)


def _spread(buckets: dict[datetime, list[float]], attempt: _Attempt, since: datetime, until: datetime, step: timedelta) -> None:
    """One attempt's cost and tokens, interval by interval from `since`."""
    at = since + step * int(max(0.0, (attempt.start - since) / step))
    while at < min(attempt.end, until):
        upto = min(at + step, until)
        gpu, cpu = attempt_cost(attempt.run, overlap(attempt.start, attempt.end, at, upto))
        bucket = buckets.setdefault(at, [0.0, 0.0, 0.0])
        bucket[0], bucket[1], bucket[2] = bucket[0] + gpu, bucket[1] + cpu, bucket[2] + attempt.tokens_within(at, upto)
        at += step


def _buckets(found: dict[datetime, list[float]], since: datetime, until: datetime, step: timedelta) -> list[schemas.UsageBucket]:
    """Every interval of the period, empty ones too (a chart over time has no gaps)."""
    out, at = [], since
    while at < until:
        gpu, cpu, tokens = found.get(at, (0.0, 0.0, 0.0))
        out.append(schemas.UsageBucket(start=at, gpu_seconds=round(gpu, 3), cpu_slot_seconds=round(cpu, 3), tokens=round(tokens)))
        at += step
    return out


def as_csv(usage: schemas.UsageReport) -> str:
    """One line per row (and per interval, when asked for), for a spreadsheet."""
    lines = [f"{usage.by},start,gpu_seconds,cpu_slot_seconds,tokens,attempts,runs"]
    for row in usage.data:
        key = '"' + row.key.replace('"', '""') + '"'
        for bucket in row.over_time or [None]:
            start = bucket.start.isoformat() if bucket else usage.since.isoformat()
            part = bucket or row
            lines.append(f"{key},{start},{part.gpu_seconds},{part.cpu_slot_seconds},{part.tokens},{row.attempts},{row.runs}")
    return "\n".join(lines) + "\n"


def slot_seconds(session: Session, since: datetime, until: datetime) -> dict[tuple[int, str, str], float]:
    """Each (project, queue, unit)'s use within the period: unit `gpu` in GPU-seconds, `cpu_slot` in worker-slot-seconds
    (fair share weighs projects by their sum, api/runs/priorities.py; /metrics shows each)."""
    rows = session.execute(
        select(RunAttempt.started_at, RunAttempt.ended_at, Run.project_id, Run.queue, Run.slots, Run.gpus)
        .join(Run, Run.id == RunAttempt.run_id)
        .where(_within(since, until))
    ).all()
    used: dict[tuple[int, str, str], float] = {}
    for started, ended, project_id, queue, slots, gpus in rows:
        key = (project_id, queue, "gpu" if gpus else "cpu_slot")
        used[key] = used.get(key, 0.0) + slots * overlap(started, ended or until, since, until)
    return used
