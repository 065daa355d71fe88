"""Turn a run spec's `data` section into train and eval rows of one kind.

    load_examples(spec.data, "preference", seed=spec.train.seed, resolver=worker_resolver)

Sources: builtin:<name> (generated, see tasks/), dataset:<id> (an upload, found by a resolver:
the one passed, else the directory in RLPLANE_DATASETS_DIR, which the worker sets for its
trainers), a local .jsonl/.json/.parquet file. Hugging Face dataset ids are refused:
the trainer runs offline, so download the data and pass a local path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from rlplane.dataset_rows import KINDS, DataError, apply_columns, column_map, row_problems
from rlplane.layout import RUNS_DIR_ENV
from rlplane.spec.generate import GENERATED_FILE
from rlplane.spec.sections import DataSpec
from trainer_core.data.files import SUFFIXES, read_rows
from trainer_core.data.split import Split, shuffled, split_by_key
from trainer_core.data.tasks import builtin_examples

MAX_LISTED_PROBLEMS = 5
DATASETS_DIR_ENV = "RLPLANE_DATASETS_DIR"
# The default data.columns names the sft target "response"; rows that use it are read as
# "completion", but a missing target is reported as 'completion', the name uploads use.
_DEFAULT_ALIASES = {("response", "completion")}
_HINTS = {
    "sft": "An sft row needs 'prompt' and 'completion' (name another target column with data.columns.response), "
    "'messages', or 'text'.",
    "preference": "A preference row needs 'prompt', 'chosen' and 'rejected'; map other names with data.columns.",
    "prompts": "A prompts row needs 'prompt' (map another name with data.columns.prompt) and may carry an 'answer'.",
}


class DatasetResolver(Protocol):
    """Finds the local file of an uploaded dataset (dataset:<id>); the worker supplies one."""

    def resolve(self, dataset_id: int) -> Path: ...


class DirectoryDatasetResolver:
    """Datasets stored as <root>/<id>/<file>.jsonl|.parquet, as the API stores them under <artifact root>/datasets."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def resolve(self, dataset_id: int) -> Path:
        folder = self.root / str(dataset_id)
        files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES) if folder.is_dir() else []
        if len(files) != 1:
            found = "no data file" if not files else f"{len(files)} data files"
            raise DataError(f"dataset:{dataset_id}: expected one .jsonl, .json or .parquet file in {folder}, found {found}")
        return files[0]


def load_examples(data_spec: DataSpec | dict, kind: str, *, seed: int, resolver: DatasetResolver | None = None) -> Split:
    """The rows of data_spec.source as `kind` (sft, preference, prompts), checked, split and shuffled by `seed`.

    The eval rows are eval_fraction of the problems (distinct prompts), chosen by the seed, so
    no prompt is in both train and eval; max_samples caps the training rows only.
    """
    spec = data_spec if isinstance(data_spec, DataSpec) else DataSpec.model_validate(data_spec)
    if kind not in KINDS:
        raise DataError(f"unknown dataset kind {kind!r}; expected one of {', '.join(KINDS)}")
    source = spec.source
    if source.startswith("builtin:"):
        _only_one_split(spec)
        split = builtin_examples(source.removeprefix("builtin:"), kind, seed=seed, eval_fraction=spec.eval_fraction)
        return Split(train=_cap(split.train, spec.max_samples), eval=split.eval)
    if source.startswith("dataset:"):
        path = _resolve(int(source.removeprefix("dataset:")), resolver)
        return _from_file(path, f"{source} ({path})", kind, spec, seed)
    if source.startswith("run:"):
        path = _generated(int(source.removeprefix("run:")))
        return _from_file(path, f"{source} ({path})", kind, spec, seed)
    if source.lower().endswith(SUFFIXES):
        path = Path(source).expanduser()
        return _from_file(path, str(path), kind, spec, seed)
    raise DataError(
        f"data.source {source!r} looks like a Hugging Face dataset id, which is not available offline: download it "
        "and pass a local path (.jsonl, .json or .parquet), or upload it to rlplane and use dataset:<id>"
    )


def problem_key(row: dict) -> str:
    """What identifies a row's problem: its prompt, the conversation before the last turn, or its text."""
    if "prompt" in row:
        value: Any = row["prompt"]
    elif "messages" in row:
        value = row["messages"][:-1] or row["messages"]
    else:
        value = row.get("text")
    return json.dumps(value, sort_keys=True, default=str)


def _generated(run_id: int) -> Path:
    """The dataset a generate run wrote (its final/data.jsonl), under the runs directory the worker names."""
    root = os.environ.get(RUNS_DIR_ENV)
    if not root:
        raise DataError(
            f"data.source run:{run_id} names a generate run's dataset, but this trainer does not know where runs are: "
            f"submit it to a server (its worker knows), or set {RUNS_DIR_ENV} to a directory of runs (<id>/final)"
        )
    path = Path(root) / str(run_id) / "final" / GENERATED_FILE
    if not path.is_file():
        raise DataError(
            f"data.source run:{run_id}: {path} does not exist; run:<id> as a data source names a generate run that "
            "succeeded (it writes final/data.jsonl)"
        )
    return path


def _resolve(dataset_id: int, resolver: DatasetResolver | None) -> Path:
    if resolver is None and os.environ.get(DATASETS_DIR_ENV):
        resolver = DirectoryDatasetResolver(os.environ[DATASETS_DIR_ENV])
    if resolver is None:
        raise DataError(
            f"dataset:{dataset_id} needs a dataset resolver (the worker supplies one); to run without the worker, set "
            f"{DATASETS_DIR_ENV} to the artifact root's datasets/ directory, or "
            "download the dataset and set data.source to its local path"
        )
    return Path(resolver.resolve(dataset_id))


def _only_one_split(spec: DataSpec) -> None:
    if spec.split != "train" or spec.eval_split is not None:
        raise DataError(
            f"data.source {spec.source} has a single split: leave data.split as train and data.eval_split "
            "unset, and hold out evaluation rows with data.eval_fraction"
        )


def _cap(rows: list[dict], max_samples: int | None) -> list[dict]:
    return rows if max_samples is None else rows[:max_samples]


def _from_file(path: Path, label: str, kind: str, spec: DataSpec, seed: int) -> Split:
    _only_one_split(spec)
    rows = _checked_rows(path, label, kind, spec)
    split = split_by_key(rows, problem_key, spec.eval_fraction, seed)
    train = shuffled(split.train, seed) if spec.shuffle else split.train
    return Split(train=_cap(train, spec.max_samples), eval=split.eval)


def _checked_rows(path: Path, label: str, kind: str, spec: DataSpec) -> list[dict]:
    mapping = column_map(spec.columns)
    source_name = {target: source for source, target in mapping.items() if (source, target) not in _DEFAULT_ALIASES}
    rows: list[dict] = []
    problems: list[str] = []
    for row_no, raw in read_rows(path):
        row = apply_columns(raw, mapping)
        for problem in row_problems(kind, row):
            column = problem.column
            if column in source_name and column not in raw:
                column = source_name[column]  # name the column the user's file was meant to have
            problems.append(type(problem)(column, problem.message).describe(row_no))
        rows.append(row)
    if problems:
        listed = "; ".join(problems[:MAX_LISTED_PROBLEMS])
        more = f" (and {len(problems) - MAX_LISTED_PROBLEMS} more)" if len(problems) > MAX_LISTED_PROBLEMS else ""
        raise DataError(f"{label} does not fit the {kind} format: {listed}{more}. {_HINTS[kind]}")
    if not rows:
        raise DataError(f"{label} has no rows")
    return rows
