"""A sweep document: a run spec, a search space over any of its fields, a metric and goal, a trial budget, a
parallelism limit, and early stopping of weak trials.

    name: lr-sweep
    spec: {algorithm: sft, ...}
    space:
      train.lr: {type: float, low: 1.0e-5, high: 1.0e-3, log: true}
      train.batch_size: {type: categorical, choices: [8, 16]}
    method: tpe                     # grid, random or tpe (Optuna's samplers)
    metric: eval/loss
    goal: min
    trials: 20
    parallel: 4
    early_stopping: {method: median, min_steps: 100}

Each trial is an ordinary run of the spec with the trial's values set at their dotted paths. Torch-free: the API
runs sweeps with it, the CLI checks a file before sending.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from rlplane.spec import SpecError, parse_spec
from rlplane.spec.base import Name, StrictModel

MAX_TRIALS = 1000
PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"


class FloatParam(StrictModel):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _range(self) -> FloatParam:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        return self


class IntParam(StrictModel):
    type: Literal["int"]
    low: int
    high: int
    step: int = Field(1, ge=1)
    log: bool = False

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        return self


class CategoricalParam(StrictModel):
    type: Literal["categorical"]
    choices: list[Any] = Field(min_length=1, max_length=100)


Param = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


class EarlyStopping(StrictModel):
    method: Literal["median", "successive_halving"] = Field(
        "median",
        description="median: stop a trial whose metric at a step is worse than the median of the trials that reached it "
        "(Optuna's MedianPruner); successive_halving: keep the best 1/3 at each rung (Optuna's SuccessiveHalvingPruner).",
    )
    min_steps: int = Field(0, ge=0, description="No trial is stopped before this step.")
    min_trials: int = Field(3, ge=1, description="median: trials that must have finished before any is stopped.")


class SweepDoc(StrictModel):
    name: Name
    project: Name = "default"
    spec: dict[str, Any] = Field(description="The run spec every trial starts from.")
    space: dict[Annotated[str, Field(pattern=PATH)], Param] = Field(min_length=1, max_length=32)
    method: Literal["grid", "random", "tpe"] = "tpe"
    metric: str = Field(min_length=1, max_length=256, description="The metric a trial is scored on (its last value).")
    goal: Literal["min", "max"] = "min"
    trials: int = Field(10, ge=1, le=MAX_TRIALS, description="The trial budget (grid: at most the grid's size).")
    parallel: int = Field(2, ge=1, le=100, description="Trials running at once.")
    early_stopping: EarlyStopping | None = None
    seed: int = 0

    @model_validator(mode="after")
    def _grid(self) -> SweepDoc:
        if self.method == "grid":
            for path, param in self.space.items():
                if isinstance(param, FloatParam) and param.step is None:
                    raise ValueError(f"grid needs a finite set of values: give space.{path} a step, or use choices")
        return self


def grid_values(param: FloatParam | IntParam | CategoricalParam) -> list[Any]:
    if isinstance(param, CategoricalParam):
        return list(param.choices)
    if isinstance(param, IntParam):
        return list(range(param.low, param.high + 1, param.step))
    assert param.step is not None
    count = int(round((param.high - param.low) / param.step)) + 1
    return [round(param.low + i * param.step, 12) for i in range(count)]


def grid(doc: SweepDoc) -> list[dict[str, Any]]:
    """Every combination, in a fixed order (the first parameter varies slowest)."""
    paths = list(doc.space)
    return [dict(zip(paths, values, strict=True)) for values in itertools.product(*(grid_values(doc.space[p]) for p in paths))]


def apply(spec: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """`spec` with each value set at its dotted path (sections created where the spec leaves them to defaults)."""
    out = copy.deepcopy(dict(spec))
    for path, value in params.items():
        *parents, leaf = path.split(".")
        node = out
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = value
    return out


def corners(doc: SweepDoc) -> list[dict[str, Any]]:
    """Each parameter at its low and its high end (the others at their low): the values a trial may take, for
    checking at submit that every one gives a valid spec."""

    def ends(param) -> list[Any]:
        if isinstance(param, CategoricalParam):
            return list(param.choices)
        return [param.low, param.high]

    low = {path: ends(param)[0] for path, param in doc.space.items()}
    return [low] + [{**low, path: value} for path, param in doc.space.items() for value in ends(param)[1:]]


def load_sweep(data: Any) -> SweepDoc:
    """Validate a sweep document whole: its fields, and the spec at every end of every range; raises SpecError."""
    if not isinstance(data, Mapping):
        raise SpecError.single("not_a_mapping", f"a sweep must be a mapping, not {type(data).__name__}")
    if isinstance(data.get("spec"), Mapping):
        data = {**data, "spec": {"project": data.get("project", "default"), "name": str(data.get("name")), **data["spec"]}}
    try:
        doc = SweepDoc.model_validate(data)
    except ValidationError as exc:
        raise SpecError(
            [{"loc": list(e["loc"]), "msg": e["msg"].removeprefix("Value error, "), "type": e["type"]} for e in exc.errors()]
        ) from None
    errors = []
    for params in corners(doc):
        try:
            parse_spec(apply(doc.spec, params))
        except SpecError as exc:
            for e in exc.errors:
                dotted = ".".join(str(p) for p in e["loc"])
                loc = ["space", dotted] if dotted in doc.space else ["spec", *e["loc"]]
                shown = ", ".join(f"{k}={v}" for k, v in params.items())
                errors.append({**e, "loc": loc, "msg": f"{e['msg']} (with {shown})"})
        if errors:
            break
    if errors:
        raise SpecError(errors)
    return doc
