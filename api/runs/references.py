"""What a `run:<id>[@step]` of a submitted spec may name: a checkpoint or final model the run has, or one a run still
under way can yet write (a queue serves its runs in order, so a child submitted behind its parent waits for it).
Anything else is refused at submit, naming what the run does have, rather than failing later on a worker."""

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.models import Checkpoint, Run
from api.runs.repository import final_export
from rlplane.spec import RunReference
from rlplane.spec.generate import GENERATED_ROWS
from rlplane.status import TERMINAL


def refusal(session: Session, parent: Run, ref: RunReference, reads: str | None = None) -> str | None:
    """Why `ref` names nothing `parent` has or will have; None when it does. A data.source names a generate run's
    dataset, of the kind of rows the run reads (`reads`)."""
    if ref.field == "data.source" and (why := _not_data(parent, reads)) is not None:
        return why
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


def _not_data(parent: Run, reads: str | None) -> str | None:
    """Why data.source run:<id> cannot read `parent`'s output: it is no generate run, or writes other rows."""
    spec = parent.run_spec
    if spec.algorithm != "generate" or spec.generate is None:
        return (
            f"run {parent.id} is a {spec.algorithm} run: it makes a model, not data; data.source run:<id> names a "
            'generate run\'s dataset (docs/rl.md, "Constitutional AI")'
        )
    wrote = GENERATED_ROWS.get(spec.generate.kind)
    if reads is not None and wrote != reads:
        return f"run {parent.id} writes {wrote} rows but this run reads {reads} rows; name a generate run of the other kind"
    return None
