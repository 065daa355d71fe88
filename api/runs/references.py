"""What a `run:<id>[@step]` of a submitted spec may name: a checkpoint or final model the run has, or one a run still
under way can yet write (a queue serves its runs in order, so a child submitted behind its parent waits for it).
Anything else is refused at submit, naming what the run does have, rather than failing later on a worker."""

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.models import Checkpoint, Run
from api.runs.repository import final_export
from rlplane.spec import RunReference
from rlplane.status import TERMINAL


def refusal(session: Session, parent: Run, ref: RunReference) -> str | None:
    """Why `ref` names nothing `parent` has or will have; None when it does."""
    query = select(Checkpoint.step).where(Checkpoint.run_id == parent.id, Checkpoint.kind == "checkpoint")
    steps = sorted(session.scalars(query).all())
    exported = final_export(session, parent.id) is not None
    ended = parent.status in TERMINAL
    if ref.step is None:
        if exported or not ended:
            return None
        return f"run {parent.id} ({parent.status}) has no final model; " + _what_it_has(parent.id, steps, exported)
    if ref.step in steps or (not ended and ref.step <= parent.total_steps):
        return None
    if not ended:
        return f"run {parent.id} trains {parent.total_steps} steps, so it will never have step {ref.step}; " + _what_it_has(
            parent.id, steps, exported
        )
    return f"run {parent.id} ({parent.status}) has no checkpoint at step {ref.step}; " + _what_it_has(parent.id, steps, exported)


def _what_it_has(run_id: int, steps: list[int], exported: bool) -> str:
    has = (
        f"its checkpoints are at steps {', '.join(map(str, steps))} (run:{run_id}@{steps[-1]} is the latest)"
        if steps
        else "it has no checkpoint"
    )
    return has + (f", and run:{run_id} is its final model" if exported else "")
