"""A pipeline document: named stages, each a run spec, chained by references and gated by their metrics.

    name: sft-rm-ppo
    stages:
      sft: {spec: {...}, best: {metric: eval/loss, goal: min}}
      rm:  {spec: {...}}
      ppo:
        when: stages.sft.metrics["eval/loss"] < 1.5 and stages.rm.metrics["eval/accuracy"] >= 0.8
        spec: {model: {path: "stage:sft@best"}, reward: {kind: model, path: "stage:rm"}, ...}

A stage reference is `stage:<name>` (its final model), `stage:<name>@last` (the same), `stage:<name>@<step>`
(that checkpoint) or `stage:<name>@best` (the checkpoint whose step scored best on the producing stage's `best`
metric). When a stage starts, each reference becomes the `run:<id>[@step]` of the stage's run, so a stage's run is
an ordinary run with ordinary lineage. A stage needs every stage it references, and those in its gate and `needs`.

Gates are parsed here, never evaluated as code: comparisons of a stage's last logged value of a metric with a
number, joined by `and`.

Torch-free and database-free: the API validates and runs pipelines with it, the CLI checks a file before sending.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError

from rlplane.comparisons import COMPARE
from rlplane.spec import SpecError, parse_spec
from rlplane.spec.base import Name, StrictModel
from rlplane.sweep import SweepDoc, load_sweep

STAGE_REF = re.compile(r"^stage:([A-Za-z0-9._-]+)(?:@(best|last|[0-9]+))?$")
# What stands in for a stage reference while a stage's spec is checked at submit: a run reference has the
# shape every model path accepts, and run 1's existence is not checked for it (the real run is known at start).
PLACEHOLDER_RUN = "run:1"
MAX_STAGES = 32

Selector = Literal["best", "last"] | int


class BestCheckpoint(StrictModel):
    """How `stage:<name>@best` picks a checkpoint of this stage: the one whose step scored best on `metric`."""

    metric: str = Field(min_length=1, max_length=256, description="A metric the stage logs, e.g. eval/loss.")
    goal: Literal["min", "max"] = Field("min", description="min: lower is better (losses); max: higher (accuracy).")


class StageDoc(StrictModel):
    spec: dict[str, Any] = Field(description="The stage's run spec; model paths may name other stages (stage:<name>@...).")
    needs: list[Name] = Field(default_factory=list, description="Stages that must succeed first, besides those referenced.")
    when: str | None = Field(
        None, max_length=2000, description='A gate, e.g. stages.sft.metrics["eval/loss"] < 1.5; closed: skipped.'
    )
    best: BestCheckpoint | None = Field(None, description="What stage:<this>@best means; needed if another stage uses it.")
    sweep: dict[str, Any] | None = Field(
        None,
        description="Tune this stage: a sweep's fields (space, method, metric, goal, trials, parallel, early_stopping) "
        "over `spec`; the stage's output is the best trial's run.",
    )


class PipelineDoc(StrictModel):
    name: Name
    project: Name = "default"
    description: str = Field("", max_length=2000)
    stages: dict[Name, StageDoc] = Field(min_length=1, max_length=MAX_STAGES)


@dataclass(frozen=True)
class StageRef:
    stage: str
    selector: Selector  # "last" for a bare stage:<name>
    field: str  # where in the stage's spec, e.g. model.path


@dataclass(frozen=True)
class Comparison:
    stage: str
    metric: str
    op: str
    value: float

    def holds(self, actual: float) -> bool:
        return COMPARE[self.op](actual, self.value)

    def __str__(self) -> str:
        return f'stages.{self.stage}.metrics["{self.metric}"] {self.op} {self.value:g}'


_COMPARISON = re.compile(
    r"""^\s*stages\.([A-Za-z0-9._-]+)\.metrics\[\s*(["'])([^"']{1,256})\2\s*\]\s*(<=|>=|==|!=|<|>)\s*"""
    r"""([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$"""
)


def parse_gate(text: str) -> list[Comparison]:
    """`stages.<stage>.metrics["<key>"] <op> <number>` joined by `and`; raises ValueError saying what is wrong."""
    comparisons = []
    for part in re.split(r"\s+and\s+", text.strip()):
        match = _COMPARISON.match(part)
        if match is None:
            raise ValueError(
                f'cannot read {part.strip()!r}: a gate is comparisons like stages.sft.metrics["eval/loss"] < 1.5 '
                "(operators < <= > >= == !=, a number on the right) joined by `and`"
            )
        stage, _, metric, op, number = match.groups()
        comparisons.append(Comparison(stage, metric, op, float(number)))
    return comparisons


def parse_stage_ref(value: str) -> tuple[str, Selector] | None:
    """`stage:<name>[@best|@last|@<step>]` -> (name, selector); None for anything else."""
    match = STAGE_REF.match(value)
    if match is None:
        return None
    stage, selector = match.groups()
    return stage, int(selector) if selector and selector.isdigit() else (selector or "last")


def _strings(value: Any, loc: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str]]:
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, (*loc, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, (*loc, index))


def stage_refs(spec: Mapping[str, Any]) -> list[StageRef]:
    """Every stage reference in a stage's spec, wherever it stands (model paths, reward models, reference models)."""
    found = []
    for loc, value in _strings(spec):
        if (ref := parse_stage_ref(value)) is not None:
            found.append(StageRef(ref[0], ref[1], ".".join(str(part) for part in loc)))
    return found


def substitute(spec: Any, resolve: Callable[[StageRef], str], loc: tuple[str | int, ...] = ()) -> Any:
    """`spec` with every stage reference replaced by `resolve(ref)` (a run reference)."""
    if isinstance(spec, str):
        ref = parse_stage_ref(spec)
        return spec if ref is None else resolve(StageRef(ref[0], ref[1], ".".join(str(part) for part in loc)))
    if isinstance(spec, Mapping):
        return {key: substitute(item, resolve, (*loc, key)) for key, item in spec.items()}
    if isinstance(spec, list):
        return [substitute(item, resolve, (*loc, index)) for index, item in enumerate(spec)]
    return spec


def dependencies(doc: PipelineDoc) -> dict[str, list[str]]:
    """Each stage's needs: `needs`, the stages its spec references and those its gate reads, in document order."""
    order = list(doc.stages)
    needs: dict[str, list[str]] = {}
    for name, stage in doc.stages.items():
        wanted = set(stage.needs) | {ref.stage for ref in stage_refs(stage.spec)}
        if stage.when:
            wanted |= {c.stage for c in parse_gate(stage.when)}
        needs[name] = sorted(wanted, key=lambda s: order.index(s) if s in order else len(order))
    return needs


def downstream(needs: Mapping[str, list[str]], stage: str) -> list[str]:
    """The stages that need `stage`, directly or through others."""
    found: list[str] = []
    frontier = [stage]
    while frontier:
        current = frontier.pop()
        for name, wanted in needs.items():
            if current in wanted and name not in found:
                found.append(name)
                frontier.append(name)
    return found


def check(doc: PipelineDoc) -> list[dict[str, Any]]:
    """Every problem with the pipeline as a whole and with each stage's spec, as {"loc", "msg", "type"}; [] if none.

    Locations start at the document: ["stages", "ppo", "spec", "model", "path"]."""
    errors: list[dict[str, Any]] = []
    for name, stage in doc.stages.items():
        at: list[str | int] = ["stages", name]
        errors.extend(_reference_errors(doc, name, stage, at))
        errors.extend(_needs_errors(doc, stage, at))
        errors.extend(_gate_errors(doc, name, stage, at))
        errors.extend(_spec_and_sweep_errors(doc, stage, at))
    if not errors and (cycle := find_cycle(dependencies(doc))):
        errors.append(_error(["stages"], f"the stages need each other in a cycle: {' -> '.join(cycle)}"))
    return errors


def _error(loc: list[str | int], msg: str) -> dict[str, Any]:
    return {"loc": loc, "msg": msg, "type": "value_error"}


def _reference_errors(doc: PipelineDoc, name: str, stage: StageDoc, at: list[str | int]) -> Iterator[dict[str, Any]]:
    """Each `stage:<name>` in the stage's spec names another stage here, with a `best` if it asks for @best."""
    for ref in stage_refs(stage.spec):
        ref_loc = [*at, "spec", *ref.field.split(".")]
        if ref.stage not in doc.stages:
            yield _error(ref_loc, f"no stage named {ref.stage!r}: this pipeline's stages are {', '.join(doc.stages)}")
        elif ref.stage == name:
            yield _error(ref_loc, "a stage cannot use its own output")
        elif ref.selector == "best" and doc.stages[ref.stage].best is None:
            yield _error(
                ref_loc,
                f"stage:{ref.stage}@best needs stage {ref.stage!r} to say what best means: add "
                "best: {metric: eval/loss, goal: min} to it (or use @last or @<step>)",
            )


def _needs_errors(doc: PipelineDoc, stage: StageDoc, at: list[str | int]) -> Iterator[dict[str, Any]]:
    """Each of the stage's `needs` is a stage here."""
    for needed in stage.needs:
        if needed not in doc.stages:
            yield _error([*at, "needs"], f"no stage named {needed!r}: this pipeline's stages are {', '.join(doc.stages)}")


def _gate_errors(doc: PipelineDoc, name: str, stage: StageDoc, at: list[str | int]) -> Iterator[dict[str, Any]]:
    """The stage's gate parses and reads only other stages here."""
    if not stage.when:
        return
    try:
        comparisons = parse_gate(stage.when)
    except ValueError as exc:
        yield _error([*at, "when"], str(exc))
        return
    for comparison in comparisons:
        if comparison.stage not in doc.stages or comparison.stage == name:
            yield _error([*at, "when"], f"the gate reads stage {comparison.stage!r}, which is not another stage here")


def _spec_and_sweep_errors(doc: PipelineDoc, stage: StageDoc, at: list[str | int]) -> list[dict[str, Any]]:
    """The stage's spec is valid and in the pipeline's project; then its sweep, which is not checked over a bad spec."""
    try:
        spec = parse_spec(_with_placeholder_runs(stage.spec))
    except SpecError as exc:
        return [{**e, "loc": [*at, "spec", *e["loc"]]} for e in exc.errors]
    errors: list[dict[str, Any]] = []
    if spec.project != doc.project:
        errors.append(
            _error([*at, "spec", "project"], f"a stage runs in the pipeline's project {doc.project!r}, not {spec.project!r}")
        )
    if stage.sweep is not None:
        errors.extend(_sweep_errors(doc, stage, at))
    return errors


def _sweep_errors(doc: PipelineDoc, stage: StageDoc, at: list[str | int]) -> list[dict[str, Any]]:
    """The tuned stage's sweep fields are valid over its spec."""
    try:
        stage_sweep(stage, _with_placeholder_runs(stage.spec), doc.project)
    except SpecError as exc:
        # load_sweep locates a spec problem under ["spec", ...]; the rest are the sweep's own fields
        return [{**e, "loc": [*at, *(e["loc"] if e["loc"][:1] == ["spec"] else ["sweep", *e["loc"]])]} for e in exc.errors]
    return []


def _with_placeholder_runs(spec: Mapping[str, Any]) -> Any:
    """A fresh copy of the stage's spec with each stage reference standing as PLACEHOLDER_RUN."""
    return substitute(spec, lambda _: PLACEHOLDER_RUN)


def stage_sweep(stage: StageDoc, spec: Mapping[str, Any], project: str) -> SweepDoc:
    """The sweep a tuned stage runs: its `sweep` fields over `spec` (references already resolved); raises SpecError."""
    assert stage.sweep is not None
    return load_sweep({**stage.sweep, "name": spec.get("name"), "project": project, "spec": dict(spec)})


def find_cycle(needs: Mapping[str, list[str]]) -> list[str] | None:
    """A cycle among the stages as [a, b, ..., a], or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(stage: str) -> list[str] | None:
        state[stage] = "open"
        path.append(stage)
        for needed in needs.get(stage, []):
            if state.get(needed) == "open":
                return [*path[path.index(needed) :], needed]
            if needed not in state and (cycle := visit(needed)):
                return cycle
        state[stage] = "done"
        path.pop()
        return None

    for stage in needs:
        if stage not in state and (cycle := visit(stage)):
            return cycle
    return None


def load_pipeline(data: Any) -> PipelineDoc:
    """Validate a pipeline document (a dict) whole; raises SpecError with every problem, located from its root."""
    if not isinstance(data, Mapping):
        raise SpecError.single("not_a_mapping", f"a pipeline must be a mapping, not {type(data).__name__}")
    if isinstance(stages := data.get("stages"), Mapping):
        name, project = data.get("name"), data.get("project", "default")
        data = {
            **data,
            "stages": {
                n: {**s, "spec": with_defaults(s["spec"], name, project, n)}
                if isinstance(s, Mapping) and isinstance(s.get("spec"), Mapping)
                else s
                for n, s in stages.items()
            },
        }
    try:
        doc = PipelineDoc.model_validate(data)
    except ValidationError as exc:
        raise SpecError(
            [{"loc": list(e["loc"]), "msg": e["msg"].removeprefix("Value error, "), "type": e["type"]} for e in exc.errors()]
        ) from None
    if errors := check(doc):
        raise SpecError(errors)
    return doc


def with_defaults(spec: Mapping[str, Any], pipeline: Any, project: Any, stage: str) -> dict[str, Any]:
    """A stage's spec is in the pipeline's project and named <pipeline>-<stage> unless it says otherwise."""
    return {"project": project, "name": f"{pipeline}-{stage}", **spec}


def is_pipeline(data: Any) -> bool:
    """A document with `stages` is a pipeline; a run spec has none."""
    return isinstance(data, Mapping) and "stages" in data
