"""Log lines: idempotent appends (the caller has claimed the run), and pages of them for readers."""

import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.inserts import IngestResult, ingest_rows
from api.logs import schemas
from api.models import LogLine
from api.runs.service import readable_run
from api.values import without_nul
from rlplane.rows import LogRow


def store(session: Session, run_id: int, lines: list[LogRow]) -> IngestResult:
    """Insert lines; the caller has claimed the run (claim_for_report)."""
    now = time.time()
    rows = [{**line.model_dump(), "run_id": run_id, "time": line.time or now} for line in lines]
    return ingest_rows(session, LogLine, rows, ["run_id", "attempt", "rank", "seq"])


def read(
    session: Session,
    principal: Principal,
    run_id: int,
    *,
    offset: int,
    limit: int,
    tail: int | None,
    rank: int | None,
    q: str | None,
    node: int | None = None,
) -> schemas.LogPage:
    """Lines after `offset` (or the last `tail`), of one rank or all, of one node or all, whose text holds `q`."""
    run = readable_run(session, principal, run_id)
    per_node = run.run_spec.ranks_per_node
    query = select(LogLine).where(LogLine.run_id == run_id)
    if rank is not None:
        query = query.where(LogLine.rank == rank)
    if node is not None:  # a node's ranks are consecutive: node r runs ranks r * P .. r * P + P - 1
        query = query.where(LogLine.rank >= node * per_node, LogLine.rank < (node + 1) * per_node)
    if q:
        escaped = without_nul(q).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(LogLine.text.ilike(f"%{escaped}%", escape="\\"))
    if tail is not None:
        lines = list(reversed(session.scalars(query.order_by(LogLine.id.desc()).limit(tail)).all()))
    else:
        lines = list(session.scalars(query.where(LogLine.id > offset).order_by(LogLine.id).limit(limit)))
    data = [
        schemas.LogLineOut.model_validate(line, from_attributes=True).model_copy(update={"node": line.rank // per_node})
        for line in lines
    ]
    return schemas.LogPage(data=data, next_offset=data[-1].id if data else offset)
