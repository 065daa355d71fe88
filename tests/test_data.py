"""trainer_core.data: row rules, builtin tasks and their rewards, and the loader of a spec's data section."""

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer_core.data import (
    BUILTIN_SOURCES,
    DataError,
    DirectoryDatasetResolver,
    Split,
    check_row,
    kind_for_algorithm,
    load_examples,
    problem_key,
)
from trainer_core.data.tasks import arithmetic, randomwalks

BUILTIN_CASES = [(name, kind) for name, kinds in BUILTIN_SOURCES.items() for kind in kinds]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def prompts_of(rows):
    return {problem_key(row) for row in rows}


class TestFormats:
    def test_rows_of_each_kind(self):
        assert check_row("sft", 1, {"prompt": "p", "completion": "c"}) == []
        assert check_row("sft", 1, {"messages": [{"role": "user", "content": "hi"}]}) == []
        assert check_row("sft", 1, {"text": "t", "extra": 3}) == []
        chat = [{"role": "assistant", "content": "a"}]
        assert check_row("preference", 1, {"prompt": "p", "chosen": chat, "rejected": "r"}) == []
        assert check_row("prompts", 1, {"prompt": "p", "answer": "4"}) == []
        conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
        assert check_row("prompts", 1, {"prompt": conversation, "answer": "4"}) == []

    def test_messages_name_row_and_column(self):
        assert check_row("preference", 17, {"prompt": "p", "rejected": "r"}) == ["row 17, column 'chosen': is missing"]
        assert check_row("prompts", 2, {"prompt": 5}) == [
            "row 2, column 'prompt': must be a string or a list of {role, content} messages, got int"
        ]
        assert check_row("sft", 3, ["x"]) == ["row 3: must be a JSON object, got list"]
        assert check_row("sft", 4, {"prompt": "p"}) == ["row 4, column 'completion': is missing"]

    def test_algorithm_kinds(self):
        assert [kind_for_algorithm(a) for a in ("sft", "ilql", "reward", "dpo", "ppo", "grpo")] == [
            "sft", "sft", "preference", "preference", "prompts", "prompts",
        ]  # fmt: skip


class TestBuiltins:
    @pytest.mark.parametrize(("name", "kind"), BUILTIN_CASES)
    def test_rows_fit_their_kind_and_splits_never_overlap(self, name, kind):
        split = load_examples({"source": f"builtin:{name}", "eval_fraction": 0.2}, kind, seed=3)
        assert split.train and split.eval
        for row_no, row in enumerate(split.train + split.eval, start=1):
            assert check_row(kind, row_no, row) == []
        assert not prompts_of(split.train) & prompts_of(split.eval)

    @pytest.mark.parametrize(("name", "kind"), BUILTIN_CASES)
    def test_deterministic_by_seed(self, name, kind):
        spec = {"source": f"builtin:{name}"}
        first, again, other = (load_examples(spec, kind, seed=s) for s in (1, 1, 2))
        assert first == again
        assert first != other

    def test_example_specs_sources_are_builtins(self):
        assert {"tiny-sft", "tiny-preference", "tiny-prompts", "arithmetic", "randomwalks"} <= set(BUILTIN_SOURCES)

    def test_alias_of_another_kind_says_which_to_use(self):
        with pytest.raises(DataError, match=r"builtin:tiny-sft has sft rows but this run reads preference rows.*tiny-preference"):
            load_examples({"source": "builtin:tiny-sft"}, "preference", seed=0)
        with pytest.raises(DataError, match="builtin:nope is not a builtin dataset"):
            load_examples({"source": "builtin:nope"}, "sft", seed=0)


class TestArithmetic:
    def test_reward(self):
        assert arithmetic.reward("12+7=", "19") == 1.0
        assert arithmetic.reward("3*4=", "12", answer="12") == 1.0
        assert arithmetic.reward("12+7=", " 19 <|endoftext|>") == 1.0
        assert arithmetic.reward("12+7=", "19\n3+4=7") == 1.0
        assert arithmetic.reward("12+7=", "20") == 0.0
        assert arithmetic.reward("12+7=", "190") == 0.0
        assert arithmetic.reward("12+7=", "19.5") == 0.0
        assert arithmetic.reward("12+7=", "nineteen") == 0.0

    def test_prompt_rows_carry_answers_the_reward_accepts(self):
        rows = arithmetic.prompt_examples(seed=0).train
        assert all(arithmetic.reward(row["prompt"], row["answer"], row["answer"]) == 1.0 for row in rows)

    def test_rejected_is_always_wrong_and_chosen_right(self):
        for seed in range(3):
            split = arithmetic.preference_examples(seed=seed)
            for row in split.train + split.eval:
                assert arithmetic.reward(row["prompt"], row["chosen"]) == 1.0
                assert arithmetic.reward(row["prompt"], row["rejected"]) == 0.0


class TestRandomWalks:
    graph = randomwalks.make_graph()

    def path_of(self, start):
        return randomwalks.letters(self.graph.optimal_path(start)[1:])

    def test_optimal_path_scores_one(self):
        for start in self.graph.starts:
            prompt = randomwalks.LETTERS[start]
            assert randomwalks.reward(prompt, self.path_of(start)) == 1.0
            assert randomwalks.reward(prompt, " " + self.path_of(start) + "<|endoftext|>xyz") == 1.0

    def test_longer_path_scores_less(self):
        distance, letters = self.graph.distance, randomwalks.LETTERS
        start, detour = next(
            (s, n) for s in self.graph.starts for n in sorted(self.graph.edges[s]) if distance[n] >= distance[s]
        )  # a first step off every shortest path, then the shortest way on
        expected = distance[start] / (1 + distance[detour])
        assert expected < 1
        assert randomwalks.reward(letters[start], letters[detour] + self.path_of(detour)) == pytest.approx(expected)

    def test_invalid_paths_score_zero(self):
        start = self.graph.starts[0]
        prompt = randomwalks.LETTERS[start]
        missing = next(n for n in range(len(self.graph.edges)) if n not in self.graph.edges[start] and n != start)
        assert randomwalks.reward(prompt, randomwalks.LETTERS[missing]) == 0.0  # not an edge
        assert randomwalks.reward(prompt, self.path_of(start)[:-1]) == 0.0  # never reaches the goal
        assert randomwalks.reward(prompt, "z") == 0.0  # no such node
        assert randomwalks.reward("?", "a") == 0.0

    def test_sft_rewards_match_the_reward_function(self):
        rows = randomwalks.sft_examples(seed=0).train
        assert any(row["reward"] == 1.0 for row in rows) and any(row["reward"] < 1.0 for row in rows)
        assert all(randomwalks.reward(row["prompt"], row["completion"]) == row["reward"] for row in rows)

    def test_preference_chosen_beats_rejected(self):
        for row in randomwalks.preference_examples(seed=0).train:
            assert randomwalks.reward(row["prompt"], row["chosen"]) > randomwalks.reward(row["prompt"], row["rejected"])


PREFS = [{"prompt": f"q{i % 10}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(40)]


class TestFiles:
    def test_jsonl(self, tmp_path):
        path = write_jsonl(tmp_path / "p.jsonl", PREFS)
        split = load_examples({"source": str(path), "eval_fraction": 0.2}, "preference", seed=0)
        assert len(split.train) + len(split.eval) == 40
        assert len(prompts_of(split.eval)) == 2 and not prompts_of(split.train) & prompts_of(split.eval)
        assert sorted(map(json.dumps, split.train + split.eval)) == sorted(map(json.dumps, PREFS))

    def test_parquet_and_json(self, tmp_path):
        pq.write_table(pa.Table.from_pylist(PREFS), tmp_path / "p.parquet")
        (tmp_path / "p.json").write_text(json.dumps(PREFS))
        spec = {"eval_fraction": 0.1}
        from_parquet = load_examples({**spec, "source": str(tmp_path / "p.parquet")}, "preference", seed=4)
        from_json = load_examples({**spec, "source": str(tmp_path / "p.json")}, "preference", seed=4)
        assert from_parquet == from_json and len(from_parquet.train) == 36

    def test_deterministic_shuffle(self, tmp_path):
        spec = {"source": str(write_jsonl(tmp_path / "p.jsonl", PREFS)), "eval_fraction": 0.2}
        assert load_examples(spec, "preference", seed=1) == load_examples(spec, "preference", seed=1)
        assert load_examples(spec, "preference", seed=1) != load_examples(spec, "preference", seed=2)
        unshuffled = load_examples({**spec, "shuffle": False, "eval_fraction": 0}, "preference", seed=1)
        assert unshuffled == Split(train=PREFS, eval=[])

    def test_max_samples_caps_train_only(self, tmp_path):
        spec = {"source": str(write_jsonl(tmp_path / "p.jsonl", PREFS)), "eval_fraction": 0.1, "max_samples": 5}
        split = load_examples(spec, "preference", seed=0)
        assert len(split.train) == 5 and len(split.eval) == 4
        builtin = load_examples({"source": "builtin:arithmetic", "max_samples": 7, "eval_fraction": 0.5}, "sft", seed=0)
        assert len(builtin.train) == 7 and len(builtin.eval) == 1335  # half of the 2,669 problems

    def test_columns_are_mapped(self, tmp_path):
        rows = [{"question": "2+2=", "response": "4"}, {"question": "1+1=", "completion": "2"}]
        spec = {"source": str(write_jsonl(tmp_path / "s.jsonl", rows)), "eval_fraction": 0, "shuffle": False}
        split = load_examples({**spec, "columns": {"prompt": "question"}}, "sft", seed=0)
        assert split.train == [{"prompt": "2+2=", "completion": "4"}, {"prompt": "1+1=", "completion": "2"}]

    def test_bad_rows_name_file_row_and_column(self, tmp_path):
        rows = [PREFS[0], {"prompt": "q", "rejected": "r"}, {"prompt": "q", "chosen": "c", "rejected": 3}]
        path = write_jsonl(tmp_path / "p.jsonl", rows)
        with pytest.raises(DataError) as raised:
            load_examples({"source": str(path)}, "preference", seed=0)
        message = str(raised.value)
        assert str(path) in message and "\n" not in message
        assert "row 2, column 'chosen': is missing" in message
        assert "row 3, column 'rejected': must be a string or a list of {role, content} messages, got int" in message

    def test_mapped_column_is_named_as_in_the_file(self, tmp_path):
        path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "q", "better": "a"}])
        with pytest.raises(DataError, match="row 1, column 'worse': is missing"):
            load_examples({"source": str(path), "columns": {"rejected": "worse", "chosen": "better"}}, "preference", seed=0)

    def test_invalid_json_line(self, tmp_path):
        path = tmp_path / "p.jsonl"
        path.write_text(json.dumps(PREFS[0]) + "\n{oops\n")
        with pytest.raises(DataError, match=re.escape(f"{path}: row 2 is not valid JSON")):
            load_examples({"source": str(path)}, "preference", seed=0)

    def test_missing_file(self, tmp_path):
        with pytest.raises(DataError, match=re.escape(f"data file {tmp_path / 'nope.jsonl'} does not exist")):
            load_examples({"source": str(tmp_path / "nope.jsonl")}, "sft", seed=0)

    def test_split_names_do_not_apply_to_files(self, tmp_path):
        spec = {"source": str(write_jsonl(tmp_path / "p.jsonl", PREFS)), "eval_split": "test"}
        with pytest.raises(DataError, match="single split"):
            load_examples(spec, "preference", seed=0)


class TestOtherSources:
    def test_dataset_id_through_a_directory_resolver(self, tmp_path):
        write_jsonl((tmp_path / "7").mkdir() or tmp_path / "7" / "prefs.jsonl", PREFS)
        split = load_examples({"source": "dataset:7"}, "preference", seed=0, resolver=DirectoryDatasetResolver(tmp_path))
        assert len(split.train) + len(split.eval) == 40
        with pytest.raises(DataError, match=r"dataset:8: expected one .jsonl, .json or .parquet file"):
            load_examples({"source": "dataset:8"}, "preference", seed=0, resolver=DirectoryDatasetResolver(tmp_path))

    def test_dataset_id_without_resolver(self):
        with pytest.raises(DataError, match="dataset:3 needs a dataset resolver"):
            load_examples({"source": "dataset:3"}, "sft", seed=0)

    def test_hugging_face_id_is_not_available_offline(self):
        with pytest.raises(DataError, match="not available offline: download it and pass a local path"):
            load_examples({"source": "openai/gsm8k"}, "prompts", seed=0)
