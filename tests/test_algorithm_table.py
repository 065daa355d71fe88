"""The algorithm table (rlplane/spec/algorithms.py, TABLE) is the one place an algorithm's identity lives: the spec's
names and sections, the trainer's recipes, the runs list's headlines, the alert detectors and the dashboard's copy
all agree with it."""

from __future__ import annotations

import typing

from api.alerts.detectors import DETECTORS
from api.runs.headlines import HEADLINES
from rlplane.alerts import DetectorRule
from rlplane.spec import RunSpec
from rlplane.spec.algorithms import ALGORITHMS, TABLE
from tests.harness.launch import ROOT


def test_the_spec_names_each_algorithm_of_the_table_and_has_its_section() -> None:
    assert ALGORITHMS == tuple(entry.name for entry in TABLE)
    assert all(entry.section in RunSpec.model_fields for entry in TABLE), [e.section for e in TABLE]


def test_each_recipe_the_table_names_is_a_module_of_the_trainer() -> None:
    recipes = ROOT / "trainer_core" / "recipes"
    assert [e.name for e in TABLE if e.recipe is not None and not (recipes / f"{e.recipe}.py").exists()] == []


def test_the_detectors_are_the_tables_and_watch_what_it_says() -> None:
    named = {name for entry in TABLE for name in entry.detectors}
    assert named == set(DETECTORS) == set(typing.get_args(DetectorRule.model_fields["name"].annotation))
    assert DETECTORS["critic_blind"].algorithms == ("ppo",)  # a critic: PPO's alone
    assert all(entry.online for entry in TABLE if entry.detectors)


def test_the_runs_list_headlines_are_the_tables() -> None:
    assert HEADLINES == {entry.name: entry.headlines for entry in TABLE if entry.headlines}
    assert all(entry.headlines for entry in TABLE if entry.recipe is not None)
