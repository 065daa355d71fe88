"""Building blocks shared by the run-spec modules: the strict base model, the error type,
the syntax of model/data references, and helpers that look inside type annotations."""

from __future__ import annotations

import re
import string
import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints, WithJsonSchema

# Names of runs, projects and queues end up in URLs, file paths and metric labels.
NAME_PATTERN = r"^[A-Za-z0-9._-]+$"
Name = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=NAME_PATTERN)]

Precision = Literal["fp32", "bf16", "fp16"]

RUN_REF = re.compile(r"^run:([1-9][0-9]*)(?:@([0-9]+))?$")
# Pieces of the model-path and data-source syntax. The full patterns also go into the JSON
# schema, so API clients can check a spec before sending it; the validators below accept exactly
# what they match and explain a mismatch.
_RUN = r"run:[1-9][0-9]*(?:@[0-9]+)?"
_BUILTIN = r"builtin:[A-Za-z0-9][A-Za-z0-9._-]*"
_LOCAL = r"(?:/|\./|\.\./|~).*"
_HF_ID = r"[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)?"  # gpt2, org/name
_DATA_FILE = r"(?:(?:/|\./|\.\./|~).*|[^:]*)\.(?:jsonl|json|parquet)"  # local file, no URL scheme
MODEL_PATH_PATTERN = rf"^(?:{_RUN}|{_BUILTIN}|{_LOCAL}|{_HF_ID})$"
DATA_SOURCE_PATTERN = rf"^(?:{_BUILTIN}|dataset:[1-9][0-9]*|run:[1-9][0-9]*|{_DATA_FILE}|{_HF_ID})$"
_LOCAL_PREFIXES = ("/", "./", "../", "~")


def template_checker(*fields: str, once: bool = False) -> Any:
    """A pydantic field validator: a str.format template holding exactly `fields` (each once, with `once`), so a
    template with a typo in a {field} is refused at submit rather than failing when the trainer fills it."""

    def check(cls: type, value: str) -> str:
        try:
            used = [name for _, name, _, _ in string.Formatter().parse(value) if name is not None]
        except ValueError as exc:
            raise ValueError(f"the template is not a valid format string ({exc}); write {{ and }} as {{{{ and }}}}") from None
        if set(used) != set(fields) or (once and len(used) != len(fields)):
            wanted = ", ".join("{" + f + "}" for f in fields)
            raise ValueError(f"the template must hold {wanted}{' once each' if once else ''}, and no other {{field}}")
        return value

    return check


class StrictModel(BaseModel):
    """Every spec model forbids unknown keys: a typo must never be silently ignored."""

    # NaN or infinity in a hyperparameter is always a mistake, and Postgres JSONB cannot store it.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SpecError(ValueError):
    """A run spec that does not parse or validate.

    `errors` holds one {"loc", "msg", "type"} dict per problem; `loc` is the field path inside
    the spec (e.g. ["train", "steps"]), empty for problems with the document as a whole.
    """

    def __init__(self, errors: list[dict]):
        self.errors = errors
        super().__init__("\n".join(format_error(e) for e in errors))

    @classmethod
    def single(cls, type_: str, msg: str, loc: list[str | int] | None = None) -> SpecError:
        return cls([{"loc": list(loc or []), "msg": msg, "type": type_}])


def format_loc(loc: list[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def format_error(error: dict) -> str:
    where = format_loc(error["loc"])
    return f"{where}: {error['msg']}" if where else error["msg"]


def parse_run_ref(value: str) -> tuple[int, int | None] | None:
    """`run:<id>[@step]` -> (id, step); None for anything that is not a run reference."""
    match = RUN_REF.match(value)
    if not match:
        return None
    return int(match.group(1)), (int(match.group(2)) if match.group(2) is not None else None)


_PLACEHOLDER = re.compile(r"<[^<>]*>")


def check_model_path(value: str) -> str:
    if re.match(MODEL_PATH_PATTERN, value):
        return value
    if value.startswith("run:") and (hole := _PLACEHOLDER.search(value)):
        raise ValueError(
            f"{value!r} is a template's placeholder: write the run's id in place of {hole.group()} (the runs list "
            "shows ids), e.g. run:12 or run:12@250"
        )
    if value.startswith("run:"):
        raise ValueError(f"{value!r} is not a run reference; write run:<id> or run:<id>@<step>, e.g. run:12@400")
    if value.startswith("builtin:"):
        raise ValueError(f"{value!r}: builtin: must be followed by a name, e.g. builtin:tiny-gpt2")
    raise ValueError(
        f"{value!r} is not a model: use a Hugging Face id (gpt2, org/name), a local directory "
        "(/abs/path or ./relative), builtin:<name>, or run:<id>[@step]"
    )


def check_data_source(value: str) -> str:
    if re.match(DATA_SOURCE_PATTERN, value):
        return value
    if value.startswith("builtin:"):
        raise ValueError(f"{value!r}: builtin: must be followed by a name, e.g. builtin:tiny-sft")
    if value.startswith("dataset:"):
        raise ValueError(f"{value!r}: write dataset:<id> with a positive id, e.g. dataset:3")
    if value.startswith("run:"):
        raise ValueError(f"{value!r}: a generate run's dataset is run:<id> (no @step: it is written once), e.g. run:12")
    if value.startswith(_LOCAL_PREFIXES):
        raise ValueError(f"{value!r}: local data must be a .jsonl, .json or .parquet file")
    raise ValueError(
        f"{value!r} is not a data source: use builtin:<name>, dataset:<id>, run:<id> (a generate run's dataset), a "
        "local .jsonl/.json/.parquet file, or a Hugging Face dataset id (org/name)"
    )


ModelPath = Annotated[
    str,
    StringConstraints(min_length=1),
    AfterValidator(check_model_path),
    WithJsonSchema({"type": "string", "minLength": 1, "pattern": MODEL_PATH_PATTERN}),
]
# The files a data.source may name (the trainer reads them; the CLI uploads a relative one; the API stores uploads)
DATA_FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
DataSource = Annotated[
    str,
    StringConstraints(min_length=1),
    AfterValidator(check_data_source),
    WithJsonSchema({"type": "string", "minLength": 1, "pattern": DATA_SOURCE_PATTERN}),
]


def path_fields(model: BaseModel, loc: tuple[str | int, ...] = ()) -> typing.Iterator[tuple[tuple[str | int, ...], str]]:
    """Every `path` field in a spec tree (model.path, a reference or critic model, a reward model, a sum's
    model terms), with where it is."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from path_fields(value, (*loc, name))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    yield from path_fields(item, (*loc, name, i))
        elif name == "path" and isinstance(value, str):
            yield (*loc, name), value


# --- looking inside annotations (used by error messages, overrides and the docs generator) ---


def model_classes(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModel classes an annotation can hold, through Optional, Union and Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return model_classes(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [cls for arg in typing.get_args(annotation) for cls in model_classes(arg)]
    return []


def kind_of(cls: type[BaseModel]) -> str | None:
    """The `kind` tag of one variant of a discriminated union, if it has one."""
    field = cls.model_fields.get("kind")
    if field is None or typing.get_origin(field.annotation) is not Literal:
        return None
    return typing.get_args(field.annotation)[0]


def variants(annotation: Any) -> dict[str, type[BaseModel]]:
    """{kind: class} for a discriminated union annotation; {} for anything else."""
    classes = model_classes(annotation)
    if len(classes) < 2:
        return {}
    return {kind_of(cls): cls for cls in classes if kind_of(cls) is not None}


def resolve_loc(root: type[BaseModel], loc: tuple | list) -> tuple[list[str | int], type[BaseModel] | None]:
    """Drop the union tags pydantic puts into error locations (("backend", "deepspeed",
    "zero_stage") -> ["backend", "zero_stage"]) and find the model holding the last item."""
    clean: list[str | int] = []
    cls: type[BaseModel] | None = root
    parent: type[BaseModel] | None = None
    i = 0
    while i < len(loc):
        item = loc[i]
        clean.append(item)
        parent = cls
        field = cls.model_fields.get(item) if cls is not None and isinstance(item, str) else None
        cls = None
        if field is not None:
            tagged = variants(field.annotation)
            if tagged and i + 1 < len(loc) and loc[i + 1] in tagged:
                cls = tagged[loc[i + 1]]
                i += 1
            elif len(model_classes(field.annotation)) == 1:
                cls = model_classes(field.annotation)[0]
        i += 1
    return clean, parent
