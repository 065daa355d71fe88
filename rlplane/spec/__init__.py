"""The run spec: one schema for what a training run is, shared by the API, the CLI, the worker
and the trainer. Torch-free on purpose, so anything can import it.

    spec = load_spec(open("examples/ppo.yaml").read())   # or parse_spec(dict), load_spec_file(path)
    spec.references()                                   # run:<id> lineage, for the API

Every model forbids unknown keys; every problem is a `SpecError` whose `errors` name the field
(loc relative to the spec root) and say how to fix it. docs/spec.md is generated from the field
descriptions here and in this package's modules (scripts/gen_spec_docs.py).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from rlplane.spec import io as spec_io
from rlplane.spec.algorithms import (
    ALGORITHM_ROWS,
    ALGORITHM_SECTIONS,
    ALGORITHMS,
    Algorithm,
    CodeSource,
    CommandOptions,
    DpoOptions,
    EvalOptions,
    GrpoOptions,
    IlqlOptions,
    PpoOptions,
    RewardModelOptions,
    SftOptions,
    SpinOptions,
)
from rlplane.spec.base import (
    Name,
    SpecError,
    StrictModel,
    kind_of,
    model_classes,
    parse_run_ref,
    path_fields,
    resolve_loc,
)
from rlplane.spec.generate import GenerateOptions
from rlplane.spec.generation import GenSpec
from rlplane.spec.rules import RULES, check_rules
from rlplane.spec.sections import (
    BackendSpec,
    BuiltinReward,
    DataColumns,
    DataSpec,
    DeepSpeedBackend,
    Fsdp2Backend,
    HttpReward,
    LoraSpec,
    MegatronBackend,
    ModelReward,
    ModelSpec,
    PythonReward,
    ResourcesSpec,
    RewardSource,
    RewardSpec,
    RewardTerm,
    SumReward,
    TorchBackend,
    TrainSpec,
)

# The API, CLI and worker need the first block; the trainer also reads the section models.
__all__ = [
    "ALGORITHMS",
    "RULES",
    "RunReference",
    "RunSpec",
    "SpecError",
    "apply_overrides",
    "dump_spec",
    "load_spec",
    "load_spec_file",
    "parse_spec",
    # section models
    "BackendSpec",
    "BuiltinReward",
    "CodeSource",
    "CommandOptions",
    "DataColumns",
    "DataSpec",
    "DeepSpeedBackend",
    "DpoOptions",
    "EvalOptions",
    "Fsdp2Backend",
    "GenSpec",
    "GrpoOptions",
    "HttpReward",
    "IlqlOptions",
    "LoraSpec",
    "MegatronBackend",
    "ModelReward",
    "ModelSpec",
    "NodeRole",
    "PpoOptions",
    "PythonReward",
    "ResourcesSpec",
    "RewardModelOptions",
    "RewardSource",
    "RewardSpec",
    "RewardTerm",
    "SftOptions",
    "SpinOptions",
    "SumReward",
    "TorchBackend",
    "TrainSpec",
    "node_role",
]

NodeRole = Literal["trainer", "generator"]


def node_role(nodes: int, generator: str | None, node_rank: int) -> NodeRole:
    """What node `node_rank` of a gang of `nodes` runs, with grpo.generator `generator` (None: not GRPO): the last
    node of a run with a generator node generates, every other node trains. The API reads a stored spec's values."""
    return "generator" if generator == "node" and node_rank == nodes - 1 else "trainer"


def _rule_error(loc: tuple[str | int, ...], msg: str) -> Any:
    # msg goes in through ctx: a template would read "{kind: ...}" as a placeholder.
    return {"type": PydanticCustomError("spec_rule", "{rule}", {"rule": msg}), "loc": loc, "input": None}


class RunReference(BaseModel):
    """A `run:<id>[@step]` found in a spec: the lineage of a run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: int = Field(description="Id of the referenced run.")
    step: int | None = Field(description="Checkpoint step; null: the run's final output.")
    field: str = Field(description='Dotted path where it was found, e.g. "model.path" or "reward.path".')


class RunSpec(StrictModel):
    """A training run: what to train, on what, with which algorithm, where."""

    name: Name = Field(description="Run name: 1-128 letters, digits, '.', '_' or '-'.")
    project: Name = Field("default", description="Project the run belongs to (same characters as name).")
    description: str = Field("", max_length=10000, description="Free text shown with the run.")
    tags: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        default_factory=list, description="Labels for filtering runs (each 1-64 characters)."
    )
    algorithm: Algorithm = Field(description="Training algorithm: " + ", ".join(ALGORITHMS) + ".")
    model: ModelSpec | None = Field(
        None, description="The model to train (the policy, for RL). Every algorithm but command needs it."
    )
    reward: RewardSpec | None = Field(
        None, description="Reward source, chosen by kind (builtin, model, python, http, or sum of those); ppo and grpo only."
    )
    data: DataSpec | None = Field(
        None, description="Training data (prompts, for ppo and grpo). Every algorithm but command needs it."
    )
    backend: BackendSpec = Field(
        default_factory=TorchBackend,
        description="Distributed backend, chosen by kind (torch, deepspeed, fsdp2, megatron).",
    )
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec, description="Queue, GPUs and nodes.")
    train: TrainSpec = Field(
        description="The optimization loop. An eval run trains nothing: it may leave train out ({steps: 1}; train.seed "
        "seeds its sampling)."
    )
    sft: SftOptions | None = Field(None, description="Options for algorithm sft; defaults filled in when absent.")
    reward_model: RewardModelOptions | None = Field(
        None, description="Options for algorithm reward; defaults filled in when absent."
    )
    dpo: DpoOptions | None = Field(None, description="Options for algorithm dpo; defaults filled in when absent.")
    ppo: PpoOptions | None = Field(None, description="Options for algorithm ppo; defaults filled in when absent.")
    grpo: GrpoOptions | None = Field(None, description="Options for algorithm grpo; defaults filled in when absent.")
    ilql: IlqlOptions | None = Field(None, description="Options for algorithm ilql; defaults filled in when absent.")
    spin: SpinOptions | None = Field(None, description="Options for algorithm spin; defaults filled in when absent.")
    eval: EvalOptions | None = Field(None, description="Options for algorithm eval; defaults filled in when absent.")
    generate: GenerateOptions | None = Field(
        None, description="Options for algorithm generate (a dataset written by the model: Constitutional AI's); required for it."
    )
    command: CommandOptions | None = Field(
        None, description="Options for algorithm command (your own script, docs/sdk.md): its argv, code and environment."
    )

    @model_validator(mode="before")
    @classmethod
    def _an_evaluation_is_one_step(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("algorithm") in ("eval", "generate") and "train" not in data:
            return {**data, "train": {"steps": 1}}
        return data

    @model_validator(mode="after")
    def _fill_section_and_check_rules(self) -> RunSpec:
        # The stored spec should say exactly what ran, so the defaults become explicit.
        section = ALGORITHM_SECTIONS[self.algorithm]
        if getattr(self, section) is None:
            (options_type,) = model_classes(type(self).model_fields[section].annotation)
            required = [name for name, field in options_type.model_fields.items() if field.is_required()]
            if required:  # a section with no defaults for some fields (generate's kind and principles)
                raise ValidationError.from_exception_data(
                    type(self).__name__,
                    [
                        _rule_error(
                            (section,), f"algorithm {self.algorithm} needs its {section} section: give {', '.join(required)}"
                        )
                    ],
                )
            setattr(self, section, options_type())
            self.model_fields_set.add(section)
        violations = check_rules(self)
        if violations:
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [_rule_error(v.loc, v.msg) for v in violations],
            )
        return self

    # --- derived values the trainer and the rules share ---

    @property
    def total_steps(self) -> int:
        return self.train.steps

    @property
    def options(self) -> BaseModel:
        """This algorithm's options section (always filled in after validation)."""
        return getattr(self, ALGORITHM_SECTIONS[self.algorithm])

    @property
    def rows(self) -> str | None:
        """The kind of dataset rows the run reads (rlplane/dataset_rows.py): its algorithm's, but an attribute model
        (reward_model.attributes) reads sft rows that carry the attributes; None: any (a command's script)."""
        if self.reward_model is not None and self.reward_model.attributes:
            return "sft"
        return ALGORITHM_ROWS.get(self.algorithm)

    @property
    def world_size(self) -> int:
        """Training processes: on each trainer node, one per GPU (or backend.processes on CPU)."""
        return self.ranks_per_node * self.trainer_nodes

    @property
    def ranks_per_node(self) -> int:
        """Training processes on one trainer node: one per GPU, or backend.processes on CPU."""
        return self.resources.gpus or self.backend.processes

    @property
    def trainer_nodes(self) -> int:
        """The gang's nodes that train: all of resources.nodes but a generator node (grpo.generator node)."""
        generators = 1 if self.grpo is not None and self.grpo.generator == "node" else 0
        return max(1, self.resources.nodes - generators)  # at least one: a run of one generator node is refused

    def node_role(self, node_rank: int) -> NodeRole:
        """What node `node_rank` of the run's gang runs: its share of the trainer's ranks, or (the last node of a run
        with grpo.generator node) the generator."""
        return node_role(self.resources.nodes, self.grpo.generator if self.grpo is not None else None, node_rank)

    @property
    def model_parallel_size(self) -> int:
        """GPUs that hold one copy of the model: tp * pp * cp for megatron, else 1."""
        b = self.backend
        return b.tensor_parallel * b.pipeline_parallel * b.context_parallel if b.kind == "megatron" else 1

    @property
    def data_parallel_size(self) -> int:
        """Ranks that each take a slice of the batch."""
        return max(1, self.world_size // self.model_parallel_size)

    @property
    def update_batch_size(self) -> int:
        """Global examples per optimizer update: ppo.minibatch_size for ppo, else train.batch_size."""
        if self.ppo is not None and self.ppo.minibatch_size is not None:
            return self.ppo.minibatch_size
        return self.train.batch_size

    @property
    def micro_batch_size(self) -> int:
        """Examples per forward/backward on one rank."""
        return self.train.micro_batch_size or max(1, self.update_batch_size // self.data_parallel_size)

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per optimizer update on each rank."""
        return max(1, self.update_batch_size // (self.micro_batch_size * self.data_parallel_size))

    def references(self) -> list[RunReference]:
        """Every run:<id>[@step] in a model path (model, reward model, critic, reference models), and a generate run's
        dataset read as data.source."""
        found: list[RunReference] = []
        _collect_references(self, "", found)
        if self.data is not None and (ref := parse_run_ref(self.data.source)):
            found.append(RunReference(run_id=ref[0], step=None, field="data.source"))
        return found


def _collect_references(model: BaseModel, prefix: str, found: list[RunReference]) -> None:
    for loc, value in path_fields(model):
        if ref := parse_run_ref(value):
            found.append(RunReference(run_id=ref[0], step=ref[1], field=prefix + ".".join(str(part) for part in loc)))


# --- turning pydantic errors into SpecErrors that name the field and the fix ---


def _friendly(error: dict, parent: type[BaseModel] | None) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "extra_forbidden" and parent is not None:
        name, allowed = str(error["loc"][-1]), list(parent.model_fields)
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        variant = f" (with kind {kind_of(parent)})" if kind_of(parent) else ""
        return f"unknown field {name!r}{hint}; allowed{variant}: {', '.join(allowed)}"
    if kind == "union_tag_invalid":
        return f"unknown kind {ctx.get('tag')!r}; use one of: {ctx.get('expected_tags', '').replace(chr(39), '')}"
    if kind == "union_tag_not_found":
        return "missing 'kind' (it says which variant of this section you mean)"
    if kind == "model_type" or kind == "model_attributes_type":
        return f"expected a mapping (key: value), got {type(error.get('input')).__name__}"
    if kind == "literal_error":
        return f"{error['msg']}; got {error.get('input')!r}"
    if kind == "value_error":
        return error["msg"].removeprefix("Value error, ")
    return error["msg"]


def _spec_error(exc: ValidationError) -> SpecError:
    errors = []
    for error in exc.errors():
        loc, parent = resolve_loc(RunSpec, error["loc"])
        errors.append({"loc": loc, "msg": _friendly(error, parent), "type": error["type"]})
    return SpecError(errors)


def parse_spec(data: dict) -> RunSpec:
    """Validate a spec given as a dict; raises SpecError."""
    if not isinstance(data, dict):
        raise SpecError.single("not_a_mapping", f"the spec must be a mapping, not {type(data).__name__}")
    if nul_errors := _nul_characters(data, []):
        raise SpecError(nul_errors)
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        raise _spec_error(exc) from None


def _nul_characters(value: object, loc: list[str | int]) -> list[dict]:
    """A NUL character in a spec is always a mistake, and no database text column can hold one."""
    if isinstance(value, str):
        return [{"loc": loc, "msg": "may not contain NUL characters", "type": "nul_character"}] if "\x00" in value else []
    if isinstance(value, dict):
        return [e for k, v in value.items() for e in _nul_characters(k, loc) + _nul_characters(v, [*loc, str(k)])]
    if isinstance(value, list):
        return [e for i, v in enumerate(value) for e in _nul_characters(v, [*loc, i])]
    return []


def load_spec(text: str | bytes, fmt: str | None = None) -> RunSpec:
    """Parse and validate a YAML or JSON document (fmt "yaml", "json", or None to detect)."""
    return parse_spec(spec_io.read_document(text, fmt))


def load_spec_file(path: str | Path, sets: list[str] | None = None) -> RunSpec:
    """Load a spec file (.json is read as JSON, anything else as YAML), applying `--set` overrides."""
    return parse_spec(read_spec_file(path, sets))


def read_spec_file(path: str | Path, sets: list[str] | None = None) -> dict:
    """The document of a spec file with `--set` overrides applied, not yet validated; raises SpecError."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise SpecError.single("file_not_found", f"spec file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise SpecError.single("file_unreadable", f"spec file {str(path)!r} is a directory") from None
    except OSError as exc:
        raise SpecError.single("file_unreadable", f"cannot read spec file {str(path)!r}: {exc.strerror}") from None
    data = spec_io.read_document(text, "json" if path.suffix.lower() == ".json" else "yaml")
    return apply_overrides(data, sets) if sets else data


def apply_overrides(data: dict, sets: list[str]) -> dict:
    """A copy of `data` with "train.lr=3e-5"-style overrides applied (values are YAML); raises SpecError."""
    return spec_io.apply_overrides(data, sets, root=RunSpec)


def dump_spec(spec: RunSpec) -> dict[str, Any]:
    """The spec as plain JSON-compatible data, without the sections of other algorithms."""
    others = {section for section in ALGORITHM_SECTIONS.values() if section != ALGORITHM_SECTIONS[spec.algorithm]}
    return spec.model_dump(mode="json", exclude=others)
