"""The catalogue tests generated from the slip tables: every known slip, made into a learner's answer, fails with
its own message; and every exercise is declared once, with its slips."""

from __future__ import annotations

import importlib

import pytest

from course_utils import checks
from course_utils.checks.exercise import REGISTRY
from course_utils.checks.slips import Diagnosis, Slip

for module in sorted(set(checks._TOPICS.values())):
    importlib.import_module(f"course_utils.checks.{module}")

SLIPS = [pytest.param(exercise, slip, id=f"{name}-{slip.name}")
         for name, exercise in sorted(REGISTRY.items()) for slip in exercise.slips]


def _cause(slip: Slip) -> str:
    return slip.says.cause if isinstance(slip.says, Diagnosis) else slip.message


@pytest.mark.parametrize(("exercise", "slip"), SLIPS)
def test_each_slip_fails_with_its_own_message(exercise, slip):
    result = exercise.check(exercise.answer(slip))
    assert result.status == "failed", f"{slip.name}: {result}"
    assert _cause(slip) in result.messages[0], f"{slip.name}: expected its cause first, got:\n{result}"


def test_every_exercise_with_slips_makes_them_into_answers():
    assert [name for name, exercise in REGISTRY.items() if exercise.slips and exercise.answer is None] == []


def test_slip_names_are_unique_within_an_exercise():
    for name, exercise in REGISTRY.items():
        names = [slip.name for slip in exercise.slips]
        assert len(names) == len(set(names)), name


def test_every_checker_is_declared_as_an_exercise():
    checkers = {name: getattr(checks, name) for name in checks._TOPICS}
    declared = {f"check_{name}" for name in REGISTRY}
    undeclared = sorted(name for name in checkers if not _declared(checkers[name]))
    assert undeclared == [], f"checkers not declared with Exercise: {undeclared} (declared: {sorted(declared)})"


def _declared(checker) -> bool:
    """The checker's module declares an Exercise whose check it calls."""
    module = importlib.import_module(checker.__module__)
    return any(getattr(value, "check", None) is not None and value.__class__.__name__ == "Exercise"
               and value.name in REGISTRY and checker.__code__.co_names and any(
                   getattr(module, n, None) is value for n in checker.__code__.co_names)
               for value in vars(module).values())


def test_every_declaration_names_its_contract_oracle_and_cases():
    assert [name for name, exercise in REGISTRY.items()
            if exercise.contract is None or not exercise.oracle or not exercise.cases] == []
