"""Checkpoint rules: registering what a trainer wrote (idempotently), forgetting what it rotated away, and
finding a checkpoint's files under the artifact root. Services flush; the request commits."""

import json
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from api.artifacts import ArtifactStore, UnsafePath, safe_relative
from api.auth.principal import Principal
from api.checkpoints import schemas
from api.exceptions import BadRequest, Conflict, NotFound, Unprocessable
from api.metrics import rollups
from api.models import Checkpoint, Run, RunLink
from api.runs.service import claim_for_report, readable_run
from api.runs.views import decoding
from api.unit_of_work import unit_of_work
from rlplane.layout import rotated, run_checkpoint
from rlplane.spec import BuiltinReward, ModelReward, PythonReward, RewardSpec, RunSpec, SumReward
from rlplane.spec.environments import BuiltinEnvironment, PythonEnvironment


def public(ckpt: Checkpoint) -> schemas.CheckpointPublic:
    return schemas.CheckpointPublic(
        id=ckpt.id,
        run_id=ckpt.run_id,
        step=ckpt.step,
        kind=ckpt.kind,
        path=ckpt.path,
        size=ckpt.size,
        sha256=ckpt.sha256,
        metadata=ckpt.meta,
        created_at=ckpt.created_at,
    )


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _unstorable(metadata: dict[str, Any]) -> str | None:
    """Why the metadata cannot be stored alike on SQLite and Postgres (JSONB), or None."""
    try:
        json.dumps(metadata, allow_nan=False, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return "metadata must be valid Unicode (no lone surrogates)"
    except ValueError:
        return "metadata may not contain NaN or Infinity; send them as strings"
    if any("\x00" in text for text in _strings(metadata)):
        return "metadata strings may not contain NUL characters"
    return None


def register(
    session: Session, principal: Principal, store: ArtifactStore, run_id: int, body: schemas.CheckpointCreate
) -> tuple[Checkpoint, bool]:
    """The checkpoint and whether it is new; one already registered alike comes back as it is."""
    claim_for_report(session, principal, run_id)
    try:
        present = store.exists(safe_relative(body.path))
    except UnsafePath as exc:
        raise Unprocessable(["body", "path"], str(exc)) from None
    if not present:
        raise Unprocessable(["body", "path"], f"'{body.path}' does not exist under the artifact root; write it first")
    if (why := _unstorable(body.metadata)) is not None:
        raise Unprocessable(["body", "metadata"], why)
    existing = session.scalar(
        select(Checkpoint).where(Checkpoint.run_id == run_id, Checkpoint.step == body.step, Checkpoint.kind == body.kind)
    )
    if existing is not None:
        if (existing.path, existing.size, existing.sha256, existing.meta) != (body.path, body.size, body.sha256, body.metadata):
            raise Conflict(f"run {run_id} already has a different {body.kind} at step {body.step}")
        return existing, False
    ckpt = Checkpoint(
        run_id=run_id, step=body.step, kind=body.kind, path=body.path, size=body.size, sha256=body.sha256, meta=body.metadata
    )
    session.add(ckpt)
    session.flush()
    if body.kind == "checkpoint":
        _forget_rotated(session, store, run_id)
    return ckpt, True


def _forget_rotated(session: Session, store: ArtifactStore, run_id: int) -> None:
    """Drop the records of checkpoints the trainer has rotated away (rlplane.layout.rotated: the trainer and a
    remote root's worker keep the same ones), so a listing never offers a checkpoint whose files are gone. A run
    its script started itself (rlplane.init) uploaded its files here and has no worker to delete them: the API
    deletes them, once the records' deletion is committed."""
    run = session.get(Run, run_id)
    if run is None:
        return
    keep_last = run.run_spec.train.keep_last
    ours = (Checkpoint.run_id == run_id, Checkpoint.kind == "checkpoint")
    doomed = rotated(session.scalars(select(Checkpoint.step).where(*ours)).all(), keep_last)
    if doomed:
        session.execute(delete(Checkpoint).where(*ours, Checkpoint.step.in_(doomed)))
        if run.scripted:
            for step in doomed:
                unit_of_work(session).after_commit(partial(store.delete_tree, PurePosixPath(run_checkpoint(run_id, step))))


def list_checkpoints(session: Session, principal: Principal, run_id: int) -> schemas.CheckpointList:
    readable_run(session, principal, run_id)
    rows = session.scalars(select(Checkpoint).where(Checkpoint.run_id == run_id).order_by(Checkpoint.step, Checkpoint.kind)).all()
    found = evaluations(session, run_id, principal)
    data = [public(c).model_copy(update={"evaluations": found.get(c.step if c.kind == "checkpoint" else None, [])}) for c in rows]
    return schemas.CheckpointList(data=data, count=len(rows))


def evaluations(session: Session, run_id: int, principal: Principal) -> dict[int | None, list[schemas.CheckpointEvaluation]]:
    """The eval runs of run `run_id`'s checkpoints that `principal` may read, by the step their model.path names
    (None: the run's output, which the export holds), each with the last value of its eval/* metrics: found through
    lineage, so an eval submitted any way (CLI, dashboard, a pipeline stage) shows beside its checkpoint."""
    rows = session.execute(
        select(RunLink.step, Run)
        .join(Run, Run.id == RunLink.child_id)
        .where(RunLink.parent_id == run_id, RunLink.field == "model.path", Run.algorithm == "eval")
        .order_by(Run.id)
    ).all()
    rows = [(step, run) for step, run in rows if principal.can(run.project_id, "read")]
    latest = rollups.latest_points(session, [run.id for _, run in rows], key_prefix="eval/")
    found: dict[int | None, list[schemas.CheckpointEvaluation]] = {}
    for step, run in rows:
        spec = run.run_spec  # an eval run's: its data and eval sections are there
        found.setdefault(step, []).append(
            schemas.CheckpointEvaluation(
                run_id=run.id,
                name=run.name,
                status=run.status,
                data=spec.data.source,  # type: ignore[union-attr]
                reward=judge_text(spec),
                samples=spec.eval.samples,  # type: ignore[union-attr]
                decoding=decoding(spec),
                metrics={key: value for key, (_, value) in sorted(latest.get(run.id, {}).items())},
            )
        )
    return found


def judge_text(spec: RunSpec) -> str:
    """What judges an eval run's answers, in short: its reward, or its environment (and a reward added to it)."""
    environment = spec.eval.environment if spec.eval else None
    if environment is None:
        return reward_text(spec.reward) if spec.reward else "?"
    match environment:
        case BuiltinEnvironment(name=named) | PythonEnvironment(entrypoint=named):
            text = f"environment:{environment.kind}:{named}"
        case _:
            text = f"environment:{environment.kind}"  # a service's URL may hold a token
    return text + (f" + {reward_text(spec.reward)}" if spec.reward else "")


def reward_text(reward: RewardSpec) -> str:
    """A reward section in short: builtin:arithmetic, model:run:12, python:my_rewards:score, http, sum(...)."""
    match reward:
        case BuiltinReward(name=name):
            return f"builtin:{name}"
        case ModelReward(path=path):
            return f"model:{path}"
        case PythonReward(entrypoint=entrypoint):
            return f"python:{entrypoint}"
        case SumReward(terms=terms):
            return "sum(" + ", ".join(reward_text(term.source) for term in terms) + ")"
    return reward.kind  # http: its URL may hold a token


def readable_checkpoint(session: Session, principal: Principal, run_id: int, step: int, kind: str) -> Checkpoint:
    readable_run(session, principal, run_id)
    ckpt = session.scalar(select(Checkpoint).where(Checkpoint.run_id == run_id, Checkpoint.step == step, Checkpoint.kind == kind))
    if ckpt is None:
        raise NotFound(f"{kind} of run {run_id} at step {step}")
    return ckpt


def files(store: ArtifactStore, ckpt: Checkpoint) -> list[tuple[str, int]]:
    """(name, size) of each file of the checkpoint, names relative to it."""
    try:
        return list(store.files_under(safe_relative(ckpt.path)))
    except (UnsafePath, FileNotFoundError):
        raise NotFound(f"files of checkpoint {ckpt.path}") from None


def checkpoint_file(store: ArtifactStore, ckpt: Checkpoint, file_path: str) -> PurePosixPath:
    """One file of the checkpoint, as a path under the artifact root: checked, and present."""
    try:
        base = safe_relative(ckpt.path)
        wanted = safe_relative(file_path)
        # A single-file checkpoint lists itself under its own name.
        rel = base if wanted == PurePosixPath(base.name) and store.is_file(base) else base / wanted
        if not store.is_file(rel, base):  # a local root also refuses what resolves outside the checkpoint
            raise FileNotFoundError(file_path)
        return rel
    except UnsafePath as exc:
        raise BadRequest(f"file path rejected: {exc}") from None
    except (FileNotFoundError, NotADirectoryError):
        raise NotFound(f"file '{file_path}' in checkpoint at step {ckpt.step}") from None


def file_to_send(store: ArtifactStore, ckpt: Checkpoint, file_path: str) -> Path | tuple[BinaryIO, int]:
    """One file of the checkpoint: its path on a local root (sent as it is), else opened for reading, with its size."""
    rel = checkpoint_file(store, ckpt, file_path)
    if store.local:
        return store.local_path(rel, safe_relative(ckpt.path))
    return store.open_read(rel), store.size(rel)


def archive_entries(store: ArtifactStore, ckpt: Checkpoint) -> list[tuple[str, int, Callable[[], BinaryIO]]]:
    """(name, size, open) of each file, for api.checkpoints.archive.tar_archive."""
    base = safe_relative(ckpt.path)
    found = files(store, ckpt)
    single = len(found) == 1 and store.is_file(base)
    return [(name, size, partial(store.open_read, base if single else base / name)) for name, size in found]
