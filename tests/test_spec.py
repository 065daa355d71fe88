"""The run-spec schema: examples, generated docs, strictness, cross-field rules, parsing,
overrides and run references. Pure Python: no torch, no network, no database."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from rlplane.spec import (
    ALGORITHMS,
    RunReference,
    RunSpec,
    SpecError,
    apply_overrides,
    dump_spec,
    load_spec,
    load_spec_file,
    parse_spec,
)
from tests.spec_cases import error_at, errors_of, ppo_spec, sft_spec

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


# --- examples and docs ---


class TestExamples:
    def test_one_example_per_algorithm(self):
        assert sorted({p.stem.split("-")[0] for p in EXAMPLES}) == sorted(ALGORITHMS)
        assert {p.stem for p in EXAMPLES} >= set(ALGORITHMS)  # one named for each algorithm

    @pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
    def test_example_validates(self, path: Path):
        spec = load_spec_file(path)
        assert spec.algorithm == path.stem.split("-")[0]  # sft-randomwalks.yaml is an sft example
        assert spec.options is not None
        assert spec.resources.gpus == 0, "examples must run on CPU"
        if spec.algorithm == "command":  # a user's script: its model is its own business
            return
        if not spec.model.path.startswith("builtin:"):
            # a chain: it starts from what another example writes under ./runs/<its name>/
            names = {load_spec_file(other).name for other in EXAMPLES}
            assert spec.model.path.startswith("./runs/") and spec.model.path.split("/")[2] in names, spec.model.path

    @pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
    def test_example_header_says_how_to_run(self, path: Path):
        header = path.read_text().split("\nname:")[0]
        if path.stem == "command":  # a script runs on a worker (or alone, through the SDK): there is no local trainer
            assert f"rlplane submit examples/{path.name} --code DIR" in header
            return
        assert f"rlplane train examples/{path.name}" in header
        assert f"rlplane submit examples/{path.name} --wait" in header


def load_docs_generator():
    spec = importlib.util.spec_from_file_location("gen_spec_docs", ROOT / "scripts" / "gen_spec_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestDocs:
    def test_docs_are_current(self):
        generator = load_docs_generator()
        current = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
        assert current == generator.render(), "docs/spec.md is stale: run python scripts/gen_spec_docs.py"

    def test_check_mode_reports_stale_docs(self, tmp_path, monkeypatch, capsys):
        generator = load_docs_generator()
        monkeypatch.setattr(generator, "DOC_PATH", generator.ROOT / "docs" / "spec.md")
        assert generator.main(["--check"]) == 0
        stale = tmp_path / "spec.md"
        stale.write_text("old\n")
        monkeypatch.setattr(generator, "ROOT", tmp_path)
        monkeypatch.setattr(generator, "DOC_PATH", stale)
        assert generator.main(["--check"]) == 1
        assert "stale" in capsys.readouterr().err
        assert generator.main([]) == 0 and generator.main(["--check"]) == 0

    def test_docs_are_deterministic_and_complete(self):
        generator = load_docs_generator()
        text = generator.render()
        assert text == generator.render()
        for path in ("train.lr", "backend.zero_stage", "ppo.gen.max_new_tokens", "reward.entrypoint", "ilql.tau"):
            assert f"| `{path}` |" in text
        assert "## Cross-field rules" in text

    def test_every_field_is_described(self):
        generator = load_docs_generator()
        homes: dict = {}
        order: list = []
        generator.collect_sections(RunSpec, "", homes, order)
        fields = [(cls, name, field) for _, cls in order for name, field in cls.model_fields.items()]
        assert [f"{cls.__name__}.{name}" for cls, name, field in fields if not field.description] == []

    def test_the_contracts_builtin_names_are_the_trainers(self):
        """The spec refuses builtin names at submit from its own lists; the trainer's generators and rewards are
        the truth those lists must follow."""
        from rlplane.spec import builtin_names
        from trainer_core.data.tasks import BUILTIN_REWARDS, BUILTIN_SOURCES

        assert builtin_names.BUILTIN_SOURCES == {name: tuple(kinds) for name, kinds in BUILTIN_SOURCES.items()}
        assert builtin_names.BUILTIN_REWARDS == tuple(BUILTIN_REWARDS)

    def test_json_schema_builds(self):
        schema = RunSpec.model_json_schema()
        assert "algorithm" in schema["required"]


# --- strictness and error shape ---


class TestUnknownFields:
    def test_top_level(self):
        error = error_at({**sft_spec(), "algoritm": "sft"}, ["algoritm"])
        assert error["type"] == "extra_forbidden"
        assert "unknown field 'algoritm'" in error["msg"] and "did you mean 'algorithm'" in error["msg"]

    def test_nested_lists_allowed_fields(self):
        data = sft_spec()
        data["train"]["stpes"] = 3
        error = error_at(data, ["train", "stpes"])
        assert "allowed: steps, batch_size" in error["msg"]

    def test_inside_a_union_variant_the_path_has_no_kind_tag(self):
        data = sft_spec()
        data["backend"] = {"kind": "deepspeed", "zero_stag": 2}
        error = error_at(data, ["backend", "zero_stag"])
        assert "did you mean 'zero_stage'" in error["msg"]

    @pytest.mark.parametrize(
        "where, loc",
        [
            (lambda d: d["model"].update(lora={"r": 4, "rank": 4}), ["model", "lora", "rank"]),
            (lambda d: d.update(sft={"pack": True}), ["sft", "pack"]),
            (lambda d: d["data"].update(columns={"text": "x"}), ["data", "columns", "text"]),
        ],
    )
    def test_deeply_nested(self, where, loc):
        data = sft_spec()
        where(data)
        assert error_at(data, loc)["type"] == "extra_forbidden"

    def test_nested_in_algorithm_generation(self):
        data = ppo_spec()
        data["ppo"] = {"gen": {"temp": 0.7}}
        assert error_at(data, ["ppo", "gen", "temp"])["type"] == "extra_forbidden"


class TestErrorShape:
    def test_errors_are_plain_dicts_and_str_has_one_line_each(self):
        data = sft_spec()
        data["train"]["steps"] = 0
        data["model"]["dtype"] = "fp8"
        with pytest.raises(SpecError) as info:
            parse_spec(data)
        errors = info.value.errors
        assert {tuple(e["loc"]) for e in errors} == {("train", "steps"), ("model", "dtype")}
        assert all(set(e) == {"loc", "msg", "type"} for e in errors)
        lines = str(info.value).splitlines()
        assert "train.steps: Input should be greater than 0" in lines
        assert any(line.startswith("model.dtype:") and "'fp8'" in line for line in lines)

    def test_spec_error_is_a_value_error(self):
        assert issubclass(SpecError, ValueError)

    def test_union_tag_is_dropped_from_field_errors(self):
        data = sft_spec()
        data["backend"] = {"kind": "deepspeed", "zero_stage": 5}
        assert error_at(data, ["backend", "zero_stage"])["type"] == "less_than_equal"

    def test_unknown_and_missing_kind(self):
        data = sft_spec()
        data["backend"] = {"kind": "jax"}
        assert "unknown kind 'jax'; use one of: torch, deepspeed, fsdp2, megatron" in error_at(data, ["backend"])["msg"]
        data["algorithm"], data["reward"] = "ppo", {"name": "randomwalks"}
        assert "missing 'kind'" in error_at(data, ["reward"])["msg"]

    def test_backend_kind_defaults_to_torch(self):
        data = sft_spec()
        data["backend"] = {"precision": "bf16"}
        assert parse_spec(data).backend.kind == "torch"
        data["backend"] = {"zero_stage": 2}
        error = error_at(data, ["backend", "zero_stage"])
        assert "allowed (with kind torch): kind, precision, ddp" in error["msg"]

    def test_section_that_is_not_a_mapping(self):
        data = sft_spec()
        data["model"] = "gpt2"
        assert "expected a mapping" in error_at(data, ["model"])["msg"]

    def test_missing_required_fields(self):
        errors = errors_of({"name": "x"})
        assert {tuple(e["loc"]) for e in errors} >= {("algorithm",), ("train",)}
        errors = errors_of({"name": "x", "algorithm": "sft", "train": {"steps": 1}})  # only a command run goes without
        assert {tuple(e["loc"]) for e in errors} == {("model",), ("data",)}

    @pytest.mark.parametrize("name", ["", "has space", "x" * 129, "a/b"])
    def test_bad_names(self, name):
        error_at({**sft_spec(), "name": name}, ["name"])

    @pytest.mark.parametrize(
        ("vllm", "says"),
        [
            ({"url": "http://127.0.0.1:8000", "python": "/opt/vllm/bin/python"}, "not both"),
            ({"url": "127.0.0.1:8000"}, "pattern"),
            ({"start_timeout_s": 0}, "greater than 0"),
        ],
    )
    def test_bad_vllm_sections(self, vllm, says):
        """gen.vllm: a server that is up (url) or one started for the run (python, args), never both; a URL with its
        scheme; a positive start timeout. Each error is at gen.vllm (or its field)."""
        data = {**ppo_spec(), "ppo": {"gen": {"engine": "vllm", "vllm": vllm}}}
        errors = errors_of(data)
        assert any(e["loc"][:3] == ["ppo", "gen", "vllm"] and says in e["msg"] for e in errors), errors


class TestReferenceSyntax:
    @pytest.mark.parametrize(
        "path",
        ["gpt2", "meta-llama/Llama-3.2-1B", "/abs/dir", "./rel/dir", "../up", "builtin:tiny-llama", "run:3", "run:1@0"],
    )
    def test_valid_model_paths(self, path):
        data = sft_spec()
        data["model"]["path"] = path
        assert parse_spec(data).model.path == path

    @pytest.mark.parametrize(
        "path, hint",
        [
            ("run:0", "run:<id>"),
            ("run:abc", "run:<id>"),
            ("run:3@x", "run:<id>"),
            ("run:3@-1", "run:<id>"),
            ("builtin:", "builtin:tiny-gpt2"),
            ("rnu:5", "Hugging Face id"),
            ("a/b/c", "Hugging Face id"),
            ("", "at least 1"),
        ],
    )
    def test_invalid_model_paths(self, path, hint):
        data = sft_spec()
        data["model"]["path"] = path
        error = error_at(data, ["model", "path"])
        assert hint in error["msg"] and not error["msg"].startswith("Value error")

    @pytest.mark.parametrize(
        "source", ["builtin:tiny-sft", "dataset:4", "./data/train.jsonl", "/x/y.parquet", "imdb", "Anthropic/hh-rlhf"]
    )
    def test_valid_data_sources(self, source):
        data = sft_spec()
        data["data"]["source"] = source
        parse_spec(data)

    @pytest.mark.parametrize("source", ["dataset:0", "dataset:x", "./data/train.csv", "builtin:", "s3://bucket/x"])
    def test_invalid_data_sources(self, source):
        data = sft_spec()
        data["data"]["source"] = source
        error_at(data, ["data", "source"])

    def test_json_schema_patterns_agree_with_the_validators(self):
        # API clients check specs with these patterns, so they must accept exactly what we accept.
        schema = RunSpec.model_json_schema()["$defs"]
        model_pattern = schema["ModelSpec"]["properties"]["path"]["pattern"]
        data_pattern = schema["DataSpec"]["properties"]["source"]["pattern"]
        for pattern, field, values in [
            (model_pattern, "path", ["gpt2", "/abs", "run:3@1", "run:0", "rnu:5", "a/b/c", "builtin:"]),
            (data_pattern, "source", ["imdb", "dataset:2", "dataset:0", "./x.csv", "s3://b/x.json", "y.parquet"]),
        ]:
            for value in values:
                data = sft_spec()
                data["model" if field == "path" else "data"][field] = value
                try:
                    parse_spec(data)
                    accepted = True
                except SpecError:
                    accepted = False
                assert bool(re.match(pattern, value)) == accepted, value

    def test_run_reference_in_reward_model(self):
        data = ppo_spec()
        data["reward"] = {"kind": "model", "path": "run:x"}
        error_at(data, ["reward", "path"])


# --- algorithm sections ---


class TestAlgorithmSections:
    @pytest.mark.parametrize("algorithm, section", [("sft", "sft"), ("reward", "reward_model"), ("dpo", "dpo"), ("ilql", "ilql")])
    def test_missing_section_gets_its_defaults(self, algorithm, section):
        spec = parse_spec({**sft_spec(), "algorithm": algorithm, "data": {"source": "builtin:arithmetic"}})
        assert getattr(spec, section) is not None
        assert section in spec.model_fields_set
        assert spec.options is getattr(spec, section)

    def test_ppo_defaults(self):
        spec = parse_spec(ppo_spec())
        assert (spec.ppo.kl_coef, spec.ppo.gamma, spec.ppo.lam, spec.ppo.epochs) == (0.05, 1.0, 0.95, 4)
        assert spec.ppo.gen.max_new_tokens == 32 and spec.grpo is None

    def test_section_of_another_algorithm_is_rejected(self):
        error = error_at({**sft_spec(), "ppo": {}}, ["ppo"])
        assert "only applies to algorithm ppo" in error["msg"] and error["type"] == "spec_rule"

    def test_reward_model_section_belongs_to_reward_algorithm(self):
        assert "algorithm reward" in error_at({**sft_spec(), "reward_model": {}}, ["reward_model"])["msg"]

    def test_dump_round_trips(self):
        spec = parse_spec(ppo_spec())
        assert parse_spec(spec.model_dump(mode="json")) == spec
        dumped = dump_spec(spec)
        assert "sft" not in dumped and dumped["ppo"]["kl_coef"] == 0.05
        assert parse_spec(dumped) == spec

    def test_total_steps(self):
        assert parse_spec(sft_spec()).total_steps == 10


# --- documents ---


YAML_DOC = """
name: t
algorithm: sft
model: {path: builtin:tiny-gpt2}
data: {source: builtin:tiny-sft}
train: {steps: 10, lr: 1e-5}
"""


class TestDocuments:
    def test_yaml_and_json_parse_to_the_same_spec(self):
        from_yaml = load_spec(YAML_DOC)
        as_json = json.dumps(yaml.safe_load(YAML_DOC) | {"train": {"steps": 10, "lr": 1e-5}})
        assert load_spec(as_json) == from_yaml
        assert load_spec(as_json, fmt="json") == from_yaml
        assert load_spec(as_json.encode(), fmt="yaml") == from_yaml
        assert load_spec(YAML_DOC.encode(), fmt="yaml") == from_yaml

    def test_yaml_exponent_without_dot_is_a_float(self):
        assert load_spec(YAML_DOC).train.lr == 1e-5

    @pytest.mark.parametrize(
        "text, fmt, kind, words",
        [
            ("name: [unclosed", "yaml", "yaml_invalid", "line 1"),
            ("a: b\n c: d\n  - e", None, "yaml_invalid", "invalid YAML"),
            ('{"name": "x",,}', "json", "json_invalid", "line 1, column"),
            ('{"name": "x",,}', None, "json_invalid", "line 1, column"),
            ("name: x\nname: y\n", "yaml", "yaml_invalid", "duplicate key 'name'"),
            ('{"name": "x", "name": "y"}', "json", "json_invalid", "duplicate key 'name'"),
            ("", None, "not_a_mapping", "empty"),
            ("- a\n- b\n", None, "not_a_mapping", "a list"),
            ("[1, 2]", "json", "not_a_mapping", "a list"),
            (b"\xff\xfe", "yaml", "yaml_invalid", "UTF-8"),
        ],
    )
    def test_malformed_documents(self, text, fmt, kind, words):
        with pytest.raises(SpecError) as info:
            load_spec(text, fmt)
        (error,) = info.value.errors
        assert error["type"] == kind and error["loc"] == []
        assert words in error["msg"], error["msg"]
        assert not isinstance(info.value.__cause__, yaml.YAMLError)

    def test_yaml_anchors_and_merge_keys_work(self):
        text = (
            YAML_DOC.replace("algorithm: sft", "algorithm: dpo")
            .replace("model: {path: builtin:tiny-gpt2}", "model: &policy {path: builtin:tiny-gpt2, max_seq_len: 64}")
            .replace("builtin:tiny-sft", "builtin:tiny-preference")
            + "dpo: {ref_model: {<<: *policy, max_seq_len: 128}}\n"
        )
        spec = load_spec(text)
        assert spec.dpo.ref_model.path == "builtin:tiny-gpt2" and spec.dpo.ref_model.max_seq_len == 128

    @pytest.mark.parametrize(
        "text, words",
        [
            ("a: &x [*x]", "refers to itself"),
            (
                "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True)),
                "expands to more than",
            ),
        ],
    )
    def test_yaml_alias_bombs_are_refused(self, text, words):
        with pytest.raises(SpecError) as info:
            load_spec(text)
        assert words in str(info.value)

    def test_load_spec_file_missing(self, tmp_path):
        with pytest.raises(SpecError) as info:
            load_spec_file(tmp_path / "nope.yaml")
        assert "does not exist" in str(info.value)

    def test_load_spec_file_json_and_overrides(self, tmp_path):
        path = tmp_path / "spec.json"
        path.write_text(json.dumps(sft_spec()))
        assert load_spec_file(path, sets=["train.steps=5"]).train.steps == 5


# --- overrides ---


class TestOverrides:
    def test_scalars_are_parsed_as_yaml(self):
        sets = ["train.lr=3e-5", "train.steps=20", "data.shuffle=false", "model.revision=null"]
        data = apply_overrides(sft_spec(), sets)
        assert data["train"]["lr"] == 3e-5 and data["train"]["steps"] == 20
        assert data["data"]["shuffle"] is False and data["model"]["revision"] is None
        assert parse_spec(data).train.lr == 3e-5

    def test_returns_a_copy(self):
        original = sft_spec()
        apply_overrides(original, ["train.steps=99"])
        assert original["train"]["steps"] == 10

    def test_creates_missing_sections_and_lists_and_indexes(self):
        data = apply_overrides(sft_spec(), ["sft.packing=true", "tags=[a, b]", "tags.1=c", "description="])
        assert data["sft"] == {"packing": True} and data["tags"] == ["a", "c"] and data["description"] == ""

    def test_changing_kind_keeps_only_fields_of_the_new_kind(self):
        data = sft_spec()
        data["backend"] = {"kind": "torch", "precision": "bf16", "ddp": True}
        data = apply_overrides(data, ["backend.kind=deepspeed", "backend.zero_stage=3"])
        assert data["backend"] == {"kind": "deepspeed", "precision": "bf16", "zero_stage": 3}
        assert parse_spec(data).backend.zero_stage == 3

    def test_unknown_key_is_caught_by_validation_with_its_path(self):
        data = apply_overrides(sft_spec(), ["train.stpes=3"])
        assert "did you mean 'steps'" in error_at(data, ["train", "stpes"])["msg"]

    @pytest.mark.parametrize(
        "item, words",
        [
            ("train.lr", "expected KEY=VALUE"),
            ("=3", "expected KEY=VALUE"),
            ("train..lr=1", "not a dotted path"),
            (".lr=1", "not a dotted path"),
            ("train.steps.x=1", "train.steps is not a mapping"),
            ("train.steps.x.y=1", "train.steps is not a mapping"),
            ("tags.5.x=1", "past the end"),
            ("train.lr=[1, 2", "invalid YAML"),
        ],
    )
    def test_bad_overrides(self, item, words):
        data = sft_spec()
        data["tags"] = ["a"]
        with pytest.raises(SpecError) as info:
            apply_overrides(data, [item])
        (error,) = info.value.errors
        assert error["type"] == "override_invalid" and words in error["msg"], error["msg"]
        assert item in error["msg"]


# --- references ---


class TestReferences:
    def test_finds_every_run_reference(self):
        data = ppo_spec()
        data["model"]["path"] = "run:3"
        data["reward"] = {"kind": "model", "path": "run:5@100"}
        data["ppo"] = {"ref_model": {"path": "run:3@0"}, "critic": {"path": "run:9"}}
        refs = parse_spec(data).references()
        assert refs == [
            RunReference(run_id=3, step=None, field="model.path"),
            RunReference(run_id=5, step=100, field="reward.path"),
            RunReference(run_id=9, step=None, field="ppo.critic.path"),
            RunReference(run_id=3, step=0, field="ppo.ref_model.path"),
        ]

    def test_dpo_reference_model(self):
        data = {
            **sft_spec(),
            "algorithm": "dpo",
            "dpo": {"ref_model": {"path": "run:2@50"}},
            "data": {"source": "builtin:tiny-preference"},
        }
        assert parse_spec(data).references() == [RunReference(run_id=2, step=50, field="dpo.ref_model.path")]

    def test_no_references(self):
        assert parse_spec(sft_spec()).references() == []

    def test_reference_is_frozen(self):
        ref = RunReference(run_id=1, step=None, field="model.path")
        with pytest.raises(ValidationError, match="frozen"):
            ref.run_id = 2
        assert hash(ref) == hash(RunReference(run_id=1, step=None, field="model.path"))
