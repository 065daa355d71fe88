"""Run rules: who may submit, the state machine, lineage, leases. Services flush; requests commit."""

from sqlalchemy import BigInteger, and_, bindparam, case, func, or_, select, update
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.auth.service import project_by_name
from api.exceptions import Conflict, Forbidden, NotFound, Unprocessable
from api.models import Run, RunAttempt, RunEvent, RunLink
from api.models.base import utcnow
from api.runs import gang, preemption, priorities, quotas, references, repository, schemas, views
from api.runs.sources import check_sources
from api.runs.views import is_scripted
from api.unit_of_work import unit_of_work
from rlplane.allowlist import is_allowed, refusal
from rlplane.limits import fit_reason
from rlplane.spec import PythonReward, RunSpec, SumReward
from rlplane.spec.algorithms import ALGORITHM_SECTIONS, ONLINE_ALGORITHMS
from rlplane.status import ACTIVE, NOT_RESUMABLE_FAILURES, RESUMABLE, TERMINAL, can_transition


def readable_run(session: Session, principal: Principal, run_id: int, action: str = "read") -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound(f"run {run_id}")
    if principal.is_worker and run.lease_token_id == principal.token_id and action != "admin":
        return run
    principal.require(run.project_id, action)
    return run


def reportable_run(session: Session, principal: Principal, run_id: int, *, lock: bool = False) -> Run:
    """Metrics, logs, samples and checkpoints come from the lease holder, or a project member."""
    run = locked_run(session, run_id) if lock else session.get(Run, run_id)
    if run is None:
        raise NotFound(f"run {run_id}")
    if principal.is_worker:
        if run.lease_token_id != principal.token_id:
            raise Forbidden(f"this worker token does not hold the lease of run {run_id}")
        return run
    principal.require(run.project_id, "write")
    return run


_runs = Run.__table__
_top = bindparam("top", type_=BigInteger)
# Built once: a Core statement with bound values is compiled once and reused by every report.
_CLAIM = (
    update(_runs)
    .where(_runs.c.id == bindparam("run_id"))
    .values(
        last_step=case(
            (and_(_top.is_not(None), or_(_runs.c.last_step.is_(None), _runs.c.last_step < _top)), _top), else_=_runs.c.last_step
        )
    )
    .returning(_runs.c.project_id, _runs.c.lease_token_id)
)


def claim_for_report(session: Session, principal: Principal, run_id: int, top_step: int | None = None) -> None:
    """Lock the run's row for this transaction, raise its last step, and check the caller may report.

    One UPDATE does all three: the lock serialises a run's writers (so row ids grow in commit order,
    which SSE relies on) and RETURNING gives what the permission check needs. A refusal rolls it back.
    """
    row = session.connection().execute(_CLAIM, {"run_id": run_id, "top": top_step}).one_or_none()
    if row is None:
        raise NotFound(f"run {run_id}")
    project_id, lease_token_id = row
    if principal.is_worker:
        if lease_token_id != principal.token_id:
            raise Forbidden(f"this worker token does not hold the lease of run {run_id}")
    else:
        principal.require(project_id, "write")


def locked_run(session: Session, run_id: int) -> Run | None:
    """Serialise writers of one run, so row ids of its metrics/logs/samples grow in commit order (SSE relies on it)."""
    return session.scalar(select(Run).where(Run.id == run_id).with_for_update().execution_options(populate_existing=True))


def set_status(session: Session, run: Run, target: str, reason: str = "") -> None:
    if not can_transition(run.status, target):
        raise Conflict(f"run {run.id} is {run.status}; it cannot become {target}")
    _record_status(session, run, target, reason)


def _record_status(session: Session, run: Run, target: str, reason: str) -> None:
    """The run becomes `target`, with its times and a status event (set_status has checked the move)."""
    now = utcnow()
    reason = fit_reason(reason)
    run.status, run.status_reason, run.updated_at = target, reason, now
    if target == "running" and run.started_at is None:
        run.started_at = now
    if target in TERMINAL or target == "lost":
        run.ended_at = now
        preemption.settle(session, run)
    if target == "queued":
        run.ended_at = None
        unit_of_work(session).dispatch_after_commit()
    session.add(RunEvent(run_id=run.id, kind="status", payload={"status": target, "reason": reason}))
    session.flush()


def check_submission(session: Session, principal: Principal, spec: RunSpec, reward_entrypoints: list[str]):
    """Everything a submit checks beyond the spec's own schema; stores nothing.

    `reward_entrypoints`: the server's allowed python reward patterns (settings.reward_entrypoints).
    """
    project = project_by_name_or_422(session, spec.project)
    principal.require(project.id, "write")
    priorities.of_submission(principal, project, spec)
    quotas.check_submission(session, project, spec)
    check_reward_entrypoints(spec, reward_entrypoints)
    check_sources(session, principal, spec)
    parents = []
    for ref in spec.references():
        parent = session.get(Run, ref.run_id)
        if parent is None or not principal.can(parent.project_id, "read"):
            raise Unprocessable(["body", *ref.field.split(".")], f"run {ref.run_id} does not exist or is not visible to you")
        if (why := references.refusal(session, parent, ref, spec.rows)) is not None:
            raise Unprocessable(["body", *ref.field.split(".")], why)
        parents.append((parent, ref))
    return project, parents


def python_rewards(spec: RunSpec) -> list[tuple[list, str]]:
    """(error location, entrypoint) of every python reward in the spec, a sum's terms included, and of a python
    environment (grpo or ppo .environment): the code a worker would import."""
    reward, found = spec.reward, []
    if isinstance(reward, PythonReward):
        found = [(["body", "reward", "entrypoint"], reward.entrypoint)]
    if isinstance(reward, SumReward):
        found = [
            (["body", "reward", "terms", i, "source", "entrypoint"], term.source.entrypoint)
            for i, term in enumerate(reward.terms)
            if isinstance(term.source, PythonReward)
        ]
    for section in (ALGORITHM_SECTIONS[a] for a in ONLINE_ALGORITHMS):
        options = getattr(spec, section)
        environment = options.environment if options is not None else None
        if environment is not None and environment.kind == "python":
            found.append((["body", section, "environment", "entrypoint"], environment.entrypoint))
    return found


def check_reward_entrypoints(spec: RunSpec, allowed: list[str]) -> None:
    """Refuse (422) a python reward the server does not allow, at submit rather than when a worker starts it."""
    found = python_rewards(spec)
    if not found:
        return
    for loc, entrypoint in found:
        if not is_allowed(entrypoint, allowed):
            field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc[1:]).lstrip(".")
            raise Unprocessable(loc, refusal(entrypoint, field, allowed))


def create_run(
    session: Session, principal: Principal, spec: RunSpec, reward_entrypoints: list[str], spec_text: str | None = None
) -> Run:
    """`spec_text`: the body as submitted (its comments), kept beside the validated spec."""
    if spec.command is not None and spec.command.external:
        raise Unprocessable(
            ["body", "command", "external"],
            "external is set by rlplane.init for a run its script reports itself; a submitted command runs on a worker: "
            "leave it out",
        )
    run = new_run(session, principal, spec, reward_entrypoints, "submitted", spec_text)
    unit_of_work(session).dispatch_after_commit()
    return run


def new_run(
    session: Session, principal: Principal, spec: RunSpec, reward_entrypoints: list[str], reason: str, spec_text: str | None
) -> Run:
    """A queued run of `spec` with its lineage, once the submission's checks pass (check_submission)."""
    project, parents = check_submission(session, principal, spec, reward_entrypoints)
    priority = priorities.of_submission(principal, project, spec)
    stored = spec.model_dump(mode="json")
    run = Run(
        project_id=project.id,
        name=spec.name,
        algorithm=spec.algorithm,
        backend=spec.backend.kind,
        queue=spec.resources.queue,
        status="queued",
        spec=stored,
        spec_text=spec_text,
        config=views.config_summary(spec),
        scripted=views.scripted_spec(spec),
        total_steps=spec.total_steps,
        last_step=None,
        created_by=principal.user_id,
        priority=priority,
        gpus=spec.resources.gpus,
        slots=quotas.slots(spec),
    )
    session.add(run)
    session.flush()
    for parent, ref in parents:
        session.add(RunLink(parent_id=parent.id, child_id=run.id, field=ref.field, step=ref.step))
    session.add(RunEvent(run_id=run.id, kind="status", payload={"status": "queued", "reason": reason}))
    session.flush()
    return run


def project_by_name_or_422(session: Session, name: str):
    try:
        return project_by_name(session, name)
    except NotFound:
        raise Unprocessable(
            ["body", "project"], f"project '{name}' does not exist: create it (POST /api/v1/projects) or pick another"
        ) from None


def cancel(session: Session, principal: Principal, run_id: int) -> Run:
    run = readable_run(session, principal, run_id, "write")
    if run.status == "cancelling":
        return run
    target = "cancelled" if run.status == "queued" else "cancelling"
    if run.status not in ACTIVE and run.status != "queued":
        raise Conflict(f"run {run.id} is {run.status}; only queued, starting or running runs can be cancelled")
    set_status(session, run, target, f"cancelled by {principal.user_name}")
    return run


def resume(session: Session, principal: Principal, run_id: int) -> Run:
    run = readable_run(session, principal, run_id, "write")
    if is_scripted(run):
        raise Conflict(f"run {run.id} was started by its script (rlplane.init), not by a worker: run the script again")
    if run.status not in RESUMABLE:
        raise Conflict(f"run {run.id} is {run.status}; only failed, cancelled or lost runs can be resumed")
    if run.status == "failed" and run.failure in NOT_RESUMABLE_FAILURES:
        why = "on its own configuration" if run.failure == "config" else "by diverging"
        raise Conflict(
            f"run {run.id} failed {why} ({run.status_reason.splitlines()[0] if run.status_reason else run.failure}); "
            "resumed, it would fail the same way: clone it with the fix instead"
        )
    step = repository.latest_checkpoint_step(session, run.id)
    where = f"checkpoint at step {step}" if step is not None else "the start (no checkpoint yet)"
    set_status(session, run, "queued", f"resumed by {principal.user_name} from {where}")
    return run


def set_archived(session: Session, principal: Principal, run_id: int, archived: bool) -> Run:
    run = readable_run(session, principal, run_id, "write")
    if archived and run.status not in TERMINAL:
        raise Conflict(f"run {run.id} is {run.status}; archive it once it has ended (cancel it first)")
    run.archived, run.updated_at = archived, utcnow()
    session.flush()
    return run


def delete(session: Session, principal: Principal, run_id: int) -> Run:
    run = readable_run(session, principal, run_id, "admin")
    if run.status not in TERMINAL:
        raise Conflict(f"run {run.id} is {run.status}; cancel it and wait for it to end before deleting")
    kids = [child for _, child in repository.children(session, run.id)]
    if kids:
        # runs the caller may not read are counted, not named
        named = [child.id for child in kids if principal.can(child.project_id, "read")]
        hidden = len(kids) - len(named)
        which = f"runs {named}" if named else ""
        which += (" and " if named else "") + (f"{hidden} run(s) in projects you cannot read" if hidden else "")
        raise Conflict(f"run {run.id} is the parent of {which}: delete or archive those first, lineage would break")
    session.delete(run)
    session.flush()
    return run


def lease(session: Session, principal: Principal, run_id: int, worker: str, lost_after_s: float) -> tuple[Run, RunAttempt]:
    run = locked_run(session, run_id)
    if run is None:
        raise NotFound(f"run {run_id}")
    if run.status != "queued":
        raise Conflict(f"run {run.id} is {run.status}; only a queued run can be leased")
    if gang.nodes_of(run) > 1:
        raise Conflict(f"run {run.id} spans {gang.nodes_of(run)} nodes: the API grants its nodes, no worker leases it")
    if (over := quotas.blocked(session, run)) is not None:
        raise Conflict(f"run {run.id} waits: {over}")
    held = gang.held_for(session, run, worker, lost_after_s)
    if held is not None:
        # The reconciler sends this run again (redispatch_s); the worker stays free for the run ahead.
        raise Conflict(f"worker {worker} is held for run {held[0].id}, {held[1]}")
    run.attempt_count += 1
    run.lease_token_id = principal.token_id
    run.last_step = resume_point(session, run)
    attempt = RunAttempt(run_id=run.id, number=run.attempt_count, worker=worker, last_step=run.last_step)
    session.add(attempt)
    set_status(session, run, "starting", f"leased by {worker} (attempt {attempt.number})")
    return run, attempt


def resume_point(session: Session, run: Run) -> int | None:
    """Where a new attempt of `run` starts: its latest registered checkpoint (None: the start). The run shows this
    step from its lease on, not the step the last attempt reached and will train again."""
    return repository.latest_checkpoint_step(session, run.id)


def update_status(session: Session, principal: Principal, run_id: int, body: schemas.StatusUpdate) -> Run:
    run = reportable_run(session, principal, run_id, lock=True)
    if not principal.is_worker and not is_scripted(run):
        raise Forbidden(
            f"run {run_id} is run by a worker, which reports its status; cancel it with POST /api/v1/runs/{run_id}/cancel"
        )
    if body.attempt != run.attempt_count:
        raise Conflict(f"stale fencing token: attempt {body.attempt} is not run {run.id}'s current attempt {run.attempt_count}")
    ends = body.status in TERMINAL or body.status == "lost"
    if (
        ends
        and gang.nodes_of(run) > 1
        and gang.late_node_zero(session, run, body.attempt, body.reason, body.exited_at, failed=body.status == "failed")
    ):
        return run
    if (body.status in TERMINAL or body.status == "running") and fell_silent(session, run):
        _script_back(session, run, body)
        return run
    if run.status == "cancelling" and body.status in ("starting", "running"):
        # Cancelled between its lease and its trainer's start: it stays cancelling, and the worker
        # (which reads the status in this answer) ends the attempt cancelled instead of starting it.
        return run
    if body.status == "failed" and body.failure not in NOT_RESUMABLE_FAILURES and gang.nodes_of(run) > 1:
        # Node 0's trainer crashed: in a gang that is what a peer's death looks like from here, so the attempt is
        # lost (retried within max_attempts) unless the trainer itself said the run is at fault. Being cancelled,
        # the run is cancelled: a cancel stops the nodes one by one, and node 0's peers may be gone first.
        if run.status in ACTIVE:  # else another node's end came first and ended the attempt
            node0 = gang.NodeOutcome(0, body.reason, body.exited_at)
            end_attempt(session, run, f"node 0: {body.reason}", failure=None, last_step=body.last_step, outcome=node0)
        return run
    _take_status(session, run, body)
    if body.last_step is not None:
        run.last_step = max(run.last_step or 0, body.last_step)
    _record_on_attempt(session, run, body)
    if body.status == "lost":
        _retry_or_fail(session, run)
    session.flush()
    return run


def _take_status(session: Session, run: Run, body: schemas.StatusUpdate) -> None:
    """The reported status on the run: a change, or a keep-alive of the same status."""
    if body.status != run.status:
        reason = body.reason
        if run.status == "cancelling" and body.status == "cancelled" and run.status_reason:
            reason = f"{run.status_reason}; {body.reason}"  # who cancelled (a user, a sweep's pruner), then how it ended
        set_status(session, run, body.status, reason)
        run.failure = body.failure if body.status == "failed" else None
        return
    run.updated_at = utcnow()  # a keep-alive: a script that reports itself says it lives (api/runs/scripts.py)
    if body.status == "running" and body.reason:  # its trainer's phase: compiling ops, loading, training
        run.status_reason = fit_reason(body.reason)


def _record_on_attempt(session: Session, run: Run, body: schemas.StatusUpdate) -> None:
    """The reported attempt's step, and its end when the report ends it."""
    attempt = session.scalar(select(RunAttempt).where(RunAttempt.run_id == run.id, RunAttempt.number == body.attempt))
    if attempt is None:
        return
    attempt.last_step = run.last_step
    if body.tokens is not None:
        attempt.tokens = max(attempt.tokens or 0, body.tokens)
    if body.status in TERMINAL or body.status == "lost":
        attempt.ended_at, attempt.end_reason = utcnow(), fit_reason(body.reason or body.status)
        gang.end_nodes(session, run, attempt.end_reason, gang.NodeOutcome(0, attempt.end_reason, body.exited_at))
        gang.let_go(session, run, attempt.worker)  # its trainer has exited: free for a gang at once
        attempt.handed_back = body.status == "lost" and body.handed_back
        attempt.failure = body.failure if body.status == "failed" else None


def fell_silent(session: Session, run: Run) -> bool:
    """A run its script started itself that the API failed because the script said nothing (scripts.fail_silent)."""
    if run.status != "failed" or not is_scripted(run):
        return False
    current = (RunAttempt.run_id == run.id, RunAttempt.number == run.attempt_count)
    return bool(session.scalar(select(RunAttempt.fell_silent).where(*current)))


def _script_back(session: Session, run: Run, body: schemas.StatusUpdate) -> None:
    """A script the API had failed for its silence speaks again: its keep-alive (the network came back) or its end,
    sent late (rlplane sync, or the next rlplane.init on its machine, the API having been unreachable when it
    finished). The script's word is the truth and replaces the guess: the one way out of failed but a resume."""
    attempt = session.scalar(select(RunAttempt).where(RunAttempt.run_id == run.id, RunAttempt.number == body.attempt))
    if body.status == "running":
        reason = "its script is back after falling silent"
        run.ended_at = attempt.ended_at = attempt.end_reason = attempt.failure = None
        attempt.fell_silent = False  # it may fall silent, and be failed, again
    else:
        reason = f"{body.reason or body.status} (sent late: the run had been failed after its script fell silent)"
        attempt.end_reason, attempt.failure = reason, body.failure if body.status == "failed" else None
    if body.last_step is not None:
        run.last_step = max(run.last_step or 0, body.last_step)
    attempt.last_step, run.failure = run.last_step, attempt.failure
    _record_status(session, run, body.status, reason)


def max_attempts(run: Run) -> int:
    return run.run_spec.resources.max_attempts


def _retry_or_fail(session: Session, run: Run) -> None:
    """A lost run goes back to the queue (it resumes from its latest checkpoint) while attempts remain;
    attempts handed back by a worker that was shutting down do not count."""
    if is_scripted(run):
        set_status(session, run, "failed", f"{run.status_reason}; a script's own run is not retried: run the script again")
        return
    counted = session.scalar(
        select(func.count()).select_from(RunAttempt).where(RunAttempt.run_id == run.id, RunAttempt.handed_back.is_(False))
    )
    if counted < max_attempts(run):
        step = repository.latest_checkpoint_step(session, run.id)
        where = f"checkpoint at step {step}" if step is not None else "the start"
        set_status(session, run, "queued", f"{run.status_reason}; retrying from {where} (attempt {run.attempt_count + 1})")
    else:
        set_status(session, run, "failed", f"{run.status_reason}; gave up after {run.attempt_count} attempts")


def end_attempt(
    session: Session,
    run: Run,
    reason: str,
    failure: str | None = None,
    last_step: int | None = None,
    outcome: gang.NodeOutcome | None = None,
    handed_back: bool = False,
) -> None:
    """End the current attempt of an active run from outside its lease holder (its worker went silent, a gang's node
    failed or handed back): cancelled when it was being cancelled, failed when the trainer said the run is at fault
    (config, diverged), else lost and retried while attempts remain (a hand-back is not counted among them)."""
    if last_step is not None:
        run.last_step = max(run.last_step or 0, last_step)
    attempt = session.scalar(select(RunAttempt).where(RunAttempt.run_id == run.id, RunAttempt.number == run.attempt_count))
    if attempt is not None and attempt.ended_at is None:
        attempt.ended_at, attempt.end_reason, attempt.last_step = utcnow(), fit_reason(reason), run.last_step
        attempt.failure = failure if failure in NOT_RESUMABLE_FAILURES else None
        attempt.handed_back = handed_back
    gang.end_nodes(session, run, reason, outcome)
    if run.status == "cancelling":
        set_status(session, run, "cancelled", f"{reason}; it was being cancelled")
    elif failure in NOT_RESUMABLE_FAILURES:
        set_status(session, run, "failed", reason)
        run.failure = failure
    else:
        set_status(session, run, "lost", reason)
        _retry_or_fail(session, run)


def requeue_or_fail(session: Session, run_id: int, reason: str, outcome: gang.NodeOutcome | None = None) -> None:
    """Mark an active run's current attempt lost (its worker went silent) and retry or fail the run; `outcome`: what
    happened to the gang's node that caused it."""
    run = locked_run(session, run_id)
    if run is None or run.status not in ACTIVE:
        return  # it ended or moved on while we looked
    end_attempt(session, run, reason, outcome=outcome)
