"""Where a spec's data and models come from, checked at submit against what a worker can reach: an uploaded
dataset that exists (and holds the rows this algorithm reads), and no path relative to the submitter's machine.
An absolute path stays allowed: workers may share a file system with it."""

from __future__ import annotations

from sqlalchemy.orm import Session

from api.auth.principal import Principal
from api.exceptions import Unprocessable
from api.models import Dataset
from rlplane.spec import RunSpec
from rlplane.spec.base import DATA_FILE_SUFFIXES as SUFFIXES
from rlplane.spec.base import format_loc, path_fields

_RELATIVE = ("./", "../", "~")


def is_relative_file(value: str) -> bool:
    """A data.source that names a file on the submitter's machine relative to where they stand."""
    return value.startswith(_RELATIVE) or (value.lower().endswith(SUFFIXES) and not value.startswith("/"))


def check_sources(session: Session, principal: Principal, spec: RunSpec) -> None:
    source = spec.data.source if spec.data is not None else ""
    if source.startswith("dataset:"):
        dataset = session.get(Dataset, int(source.removeprefix("dataset:")))
        if dataset is None or not principal.can(dataset.project_id, "read"):
            raise Unprocessable(
                ["body", "data", "source"],
                f"{source} does not exist or is not visible to you; upload the file (rlplane submit uploads a local "
                "data.source itself, or POST /api/v1/datasets) and use the dataset:<id> it returns",
            )
        wanted = spec.rows  # a command run's script reads any kind
        if wanted is not None and dataset.kind != wanted:
            raise Unprocessable(
                ["body", "data", "source"],
                f"{source} ({dataset.name}) holds {dataset.kind} rows but a {spec.algorithm} run reads {wanted} rows; "
                f"upload a {wanted} dataset",
            )
    elif is_relative_file(source):
        raise Unprocessable(
            ["body", "data", "source"],
            f"{source!r} is a file on your machine, which the workers cannot read; `rlplane submit` uploads it for you "
            "(or upload it with POST /api/v1/datasets) and the spec names it dataset:<id>",
        )
    for loc, path in path_fields(spec):
        if path.startswith(_RELATIVE):
            raise Unprocessable(
                ["body", *loc],
                f"{format_loc(list(loc))} {path!r} is relative to your machine, which the workers do not share; use "
                "run:<id>[@step] for a model trained here, an absolute path on the workers' storage, or a Hugging Face id",
            )
