"""Sweeps: trials of a run spec over a search space, sampled and stopped early by Optuna, kept in our database.

Optuna does the sampling (grid here, random and TPE through its samplers) and the early stopping (its
MedianPruner and SuccessiveHalvingPruner); its study lives in memory and is rebuilt from our trials at each
reconcile tick (their parameters, values, metric curves and the pruner's notes), so an API restart loses no
trial and two API processes agree (the sweep's row is locked while it moves).
"""

from __future__ import annotations

import math

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.auth.service import in_project, submitter
from api.exceptions import Conflict, DomainError
from api.metrics.service import last_value
from api.models import Metric, Run, Sweep, SweepTrial
from api.models.base import utcnow
from api.runs import service as runs
from api.runs.sources import check_sources
from rlplane.limits import fit_reason
from rlplane.spec import SpecError, parse_spec
from rlplane.status import TERMINAL
from rlplane.sweep import CategoricalParam, EarlyStopping, FloatParam, SweepDoc, apply, grid

optuna.logging.set_verbosity(optuna.logging.WARNING)
CURVE_POINTS = 2000


def submit(session: Session, principal: Principal, doc: SweepDoc, reward_entrypoints: list[str]) -> Sweep:
    project = runs.project_by_name_or_422(session, doc.project)
    principal.require(project.id, "write")
    spec = parse_spec(apply(doc.spec, {}))
    runs.check_reward_entrypoints(spec, reward_entrypoints)
    check_sources(session, principal, spec)
    sweep = Sweep(
        project_id=project.id,
        name=doc.name,
        status="running",
        reason="",
        document=doc.model_dump(mode="json"),
        created_by=principal.user_id,
    )
    session.add(sweep)
    session.flush()
    advance(session, sweep, reward_entrypoints)
    return sweep


def trials_of(session: Session, sweep_id: int) -> list[SweepTrial]:
    return list(session.scalars(select(SweepTrial).where(SweepTrial.sweep_id == sweep_id).order_by(SweepTrial.number)))


def readable(session: Session, principal: Principal, sweep_id: int, action: str = "read") -> Sweep:
    return in_project(session, principal, Sweep, sweep_id, "sweep", action)


def advance_all(session: Session, reward_entrypoints: list[str]) -> None:
    ids = session.scalars(select(Sweep.id).where(Sweep.status == "running")).all()
    ids += session.scalars(select(SweepTrial.sweep_id).where(SweepTrial.state == "running").distinct()).all()
    for sweep_id in sorted(set(ids)):
        sweep = session.get(Sweep, sweep_id, with_for_update=True)
        if sweep is not None:
            advance(session, sweep, reward_entrypoints)


def advance(session: Session, sweep: Sweep, reward_entrypoints: list[str]) -> None:
    doc = SweepDoc.model_validate(sweep.document)
    trials = trials_of(session, sweep.id)
    curves = _Curves(session, doc.metric)
    for trial in trials:
        if trial.state == "running":
            _follow(session, sweep, doc, trial, trials, curves)
    if sweep.status == "running":
        while sum(t.state == "running" for t in trials) < doc.parallel and len(trials) < budget(doc):
            trials.append(_start(session, sweep, doc, trials, reward_entrypoints, curves))
        if len(trials) >= budget(doc) and not any(t.state == "running" for t in trials):
            _finish(sweep, doc, trials)
    sweep.updated_at = utcnow()


def budget(doc: SweepDoc) -> int:
    return min(doc.trials, len(grid(doc))) if doc.method == "grid" else doc.trials


def _set(trial: SweepTrial, state: str, reason: str = "", value: float | None = None) -> None:
    trial.state, trial.reason, trial.value, trial.updated_at = state, fit_reason(reason), value, utcnow()


def _follow(session: Session, sweep: Sweep, doc: SweepDoc, trial: SweepTrial, trials: list[SweepTrial], curves: _Curves) -> None:
    run = session.get(Run, trial.run_id) if trial.run_id is not None else None
    if run is None:
        return _set(trial, "failed", "its run was deleted")
    if run.status in TERMINAL:
        if run.status != "succeeded":
            return _set(
                trial, "failed" if run.status == "failed" else "cancelled", f"run {run.id} {run.status}: {run.status_reason}"
            )
        value = last_value(session, run.id, doc.metric)
        if value is None:
            return _set(trial, "failed", f"run {run.id} logged no finite {doc.metric}")
        return _set(trial, "complete", "", value)
    if doc.early_stopping is None or run.status == "cancelling":
        return None
    curve = curves(run.id)
    if not curve:
        return None
    study = _study(curves, doc, [t for t in trials if t is not trial])
    study.add_trial(
        create_trial(
            state=TrialState.RUNNING,
            params=trial.params,
            distributions=_distributions(doc),
            intermediate_values=curve,
            system_attrs=trial.attrs,
        )
    )
    running = study.get_trials(deepcopy=False)[-1]
    prune = study.pruner.prune(study, running)
    trial.attrs = dict(study.get_trials(deepcopy=False)[-1].system_attrs)
    if prune:
        step = max(curve)
        others = [t.intermediate_values.get(step) for t in study.get_trials(deepcopy=False)[:-1]]
        seen = sorted(v for v in others if v is not None)
        median = f"; the median of the {len(seen)} trials that reached it is {seen[len(seen) // 2]:.4g}" if seen else ""
        why = f"stopped early at step {step}: {doc.metric} {curve[step]:.4g}{median} ({doc.early_stopping.method})"
        runs.set_status(session, run, "cancelling", f"pruned by sweep {sweep.name} (trial {trial.number}): {why}")
        _set(trial, "pruned", why)
    return None


class _Curves:
    """Each trial's finite points of the metric (step -> value), read once per advance: every study built in it (one
    per running trial, one per new trial) holds every ended trial's curve."""

    def __init__(self, session: Session, metric: str) -> None:
        self.session, self.metric = session, metric
        self._read: dict[int, dict[int, float]] = {}

    def __call__(self, run_id: int) -> dict[int, float]:
        if run_id not in self._read:
            rows = self.session.execute(
                select(Metric.step, Metric.value, Metric.is_nan)
                .where(Metric.run_id == run_id, Metric.key == self.metric)
                .order_by(Metric.step.desc())
                .limit(CURVE_POINTS)
            ).all()
            self._read[run_id] = {step: value for step, value, is_nan in rows if not is_nan and math.isfinite(value)}
        return self._read[run_id]


def _distributions(doc: SweepDoc) -> dict[str, BaseDistribution]:
    out: dict[str, BaseDistribution] = {}
    for path, param in doc.space.items():
        if isinstance(param, CategoricalParam):
            out[path] = CategoricalDistribution(param.choices)
        elif isinstance(param, FloatParam):
            out[path] = FloatDistribution(param.low, param.high, log=param.log, step=param.step)
        else:
            out[path] = IntDistribution(param.low, param.high, log=param.log, step=param.step)
    return out


def _study(curves: _Curves, doc: SweepDoc, trials: list[SweepTrial], seed: int | None = None) -> optuna.Study:
    """An in-memory study holding the ended trials (values, curves, the pruner's notes)."""
    if doc.method == "tpe":
        sampler: optuna.samplers.BaseSampler = optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=min(10, max(2, doc.trials // 4))
        )
    else:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    early = doc.early_stopping
    pruner: optuna.pruners.BasePruner = optuna.pruners.NopPruner()
    if early is not None and early.method == "median":
        pruner = optuna.pruners.MedianPruner(n_startup_trials=early.min_trials, n_warmup_steps=early.min_steps)
    elif early is not None:
        pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, early.min_steps), reduction_factor=3)
    study = optuna.create_study(direction="minimize" if doc.goal == "min" else "maximize", sampler=sampler, pruner=pruner)
    distributions = _distributions(doc)
    for trial in trials:
        if trial.state not in ("complete", "pruned") or trial.run_id is None:
            continue
        curve = curves(trial.run_id)
        state = TrialState.COMPLETE if trial.state == "complete" else TrialState.PRUNED
        attrs = {**_rungs_passed(curve, early), **trial.attrs} if early is not None and early.method != "median" else trial.attrs
        study.add_trial(
            create_trial(
                state=state,
                params=trial.params,
                distributions=distributions,
                value=trial.value if state == TrialState.COMPLETE else None,
                intermediate_values=curve,
                system_attrs=attrs,
            )
        )
    return study


def _rungs_passed(curve: dict[int, float], early: EarlyStopping) -> dict[str, float]:
    """Successive halving's notes for a trial that ended between two looks (the pruner writes them only when it
    sees a running trial pass a rung): at each rung it reached, its value at the first step at or past the rung.
    Without them a later trial would have nothing to be compared with."""
    notes, rung, steps = {}, 0, sorted(curve)
    while True:
        resource = max(1, early.min_steps) * 3**rung
        at = next((step for step in steps if step >= resource), None)
        if at is None:
            return notes
        notes[f"completed_rung_{rung}"] = curve[at]
        rung += 1


def _next_params(sweep: Sweep, doc: SweepDoc, trials: list[SweepTrial], curves: _Curves) -> dict:
    number = len(trials)
    if doc.method == "grid":
        taken = [t.params for t in trials]
        return next(p for p in grid(doc) if p not in taken)
    # One seed per trial: the same sweep samples the same values, restart or not.
    study = _study(curves, doc, trials, seed=doc.seed * 100_003 + sweep.id * 1009 + number)
    return dict(study.ask(_distributions(doc)).params)


def _start(
    session: Session, sweep: Sweep, doc: SweepDoc, trials: list[SweepTrial], allowed: list[str], curves: _Curves
) -> SweepTrial:
    number = len(trials)
    params = _next_params(sweep, doc, trials, curves)
    trial = SweepTrial(sweep_id=sweep.id, number=number, params=params, state="running", reason="", attrs={})
    session.add(trial)
    try:
        spec = parse_spec(apply(doc.spec, params) | {"name": f"{doc.name}-t{number}"})
        run = runs.create_run(session, submitter(session, sweep.created_by), spec, allowed)
        trial.run_id = run.id
    except (SpecError, DomainError) as exc:
        _set(trial, "failed", f"could not start: {exc}")
    session.flush()
    return trial


def _finish(sweep: Sweep, doc: SweepDoc, trials: list[SweepTrial]) -> None:
    best = best_trial(doc, trials)
    if best is None:
        sweep.status, sweep.reason = "failed", "no trial completed"
    else:
        sweep.status = "succeeded"
        sweep.reason = f"best: trial {best.number} (run {best.run_id}), {doc.metric} {best.value:.6g}"


def best_trial(doc: SweepDoc, trials: list[SweepTrial]) -> SweepTrial | None:
    done = [t for t in trials if t.state == "complete" and t.value is not None]
    if not done:
        return None
    return (min if doc.goal == "min" else max)(
        done, key=lambda t: (t.value, t.number) if doc.goal == "min" else (t.value, -t.number)
    )


def cancel(session: Session, principal: Principal, sweep_id: int) -> Sweep:
    sweep = readable(session, principal, sweep_id, "write")
    if sweep.status != "running":
        raise Conflict(f"sweep {sweep.id} is {sweep.status}; only a running sweep can be cancelled")
    sweep.status, sweep.reason, sweep.updated_at = "cancelled", f"cancelled by {principal.user_name}", utcnow()
    for trial in trials_of(session, sweep.id):
        run = session.get(Run, trial.run_id) if trial.state == "running" and trial.run_id is not None else None
        if run is not None and run.status not in TERMINAL and run.status != "cancelling":
            runs.cancel(session, principal, run.id)
        if run is not None and run.status == "cancelled":  # it was queued: cancelled at once, and so is the trial
            _set(trial, "cancelled", f"run {run.id} cancelled: {run.status_reason}")
    return sweep
