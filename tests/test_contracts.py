"""The contract list (course_utils/contracts.py) covers every exercise and is stated in the lessons.

* Every exercise, i.e. every function or class whose definition holds a
  solution region (``### BEGIN SOLUTION`` ... ``### END SOLUTION``) in a
  solution notebook, has a contract, under its own name and lesson.
* Every contract names a lesson that exists and defines that exercise.
* Every attribute, method and submodule a contract lists is stated in the
  markdown a learner reads in that lesson (cells tagged ``solution-only`` are
  left out of the exercises, so they do not count), written as code: the
  name appears inside a backtick span (``num_heads``, ``self.num_heads``).

Whether each checker verifies its contract is tested in the checkers' own
test modules; whether the course's later code runs on every implementation
the checkers accept is tests/test_downstream.py.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import nbformat
import pytest

from course_utils._schema import TAG_SOLUTION_ONLY, cell_tags, find_regions, parse_cell
from course_utils.contracts import CONTRACTS, Contract, contract

SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)


@functools.lru_cache(maxsize=None)
def lesson(name: str) -> nbformat.NotebookNode:
    return nbformat.read(str(SOLUTIONS / f"{name}.ipynb"), as_version=4)


def lessons() -> list[str]:
    return sorted(p.stem for p in SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))


def exercises_in(source: str) -> list[tuple[str, str]]:
    """(name, "function" | "class") of each top-level def or class in a code cell that holds a solution region."""
    regions = find_regions(source)
    tree = parse_cell(source)
    if not regions or tree is None:
        return []
    found = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        first, last = node.lineno - 1, node.end_lineno - 1  # 0-based, like the regions
        if any(region.begin <= last and region.end >= first for region in regions):  # comments lie outside nodes
            found.append((node.name, "class" if isinstance(node, ast.ClassDef) else "function"))
    return found


@functools.lru_cache(maxsize=None)
def solution_exercises() -> dict[str, tuple[str, str]]:
    """Every exercise of the course: name -> (lesson, kind)."""
    found: dict[str, tuple[str, str]] = {}
    for name in lessons():
        for cell in lesson(name).cells:
            if cell.cell_type == "code":
                for exercise, kind in exercises_in(cell.source):
                    assert exercise not in found, f"{exercise} is an exercise of both {found[exercise][0]} and {name}"
                    found[exercise] = (name, kind)
    return found


def stated_names(nb: nbformat.NotebookNode) -> set[str]:
    """Every identifier inside a backtick span of the markdown a learner sees in a lesson."""
    names: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type == "markdown" and TAG_SOLUTION_ONLY not in cell_tags(cell):
            for _, span in _CODE_SPAN.findall(cell.source):
                names |= set(re.findall(r"[A-Za-z_]\w*", span))
    return names


# ---------------------------------------------------------------------------
# The readers above, on small cells.


def test_exercises_are_the_definitions_that_hold_a_solution_region() -> None:
    cell = (
        "import torch\n\n\n"
        "def helper(x):\n    return x\n\n\n"
        "def scale(x):\n    ### BEGIN SOLUTION\n    return x / 2\n    ### END SOLUTION\n\n\n"
        "class Heads(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        ### BEGIN SOLUTION\n        self.num_heads = 2\n        ### END SOLUTION\n"
    )
    assert exercises_in(cell) == [("scale", "function"), ("Heads", "class")]
    assert exercises_in("def helper(x):\n    return x") == []


def test_stated_names_come_from_code_spans_in_the_markdown() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("Store the head count as `self.num_heads`, and d_k too; see ``attention_weights``."),
        nbformat.v4.new_markdown_cell("`hidden_note`"),
        nbformat.v4.new_code_cell("# `in_code`"),
    ]
    nb.cells[1].metadata["tags"] = [TAG_SOLUTION_ONLY]
    names = stated_names(nb)
    assert {"self", "num_heads", "attention_weights"} <= names
    assert not {"d_k", "hidden_note", "in_code"} & names


# ---------------------------------------------------------------------------
# The course.


def test_the_solutions_define_the_course_exercises() -> None:
    found = solution_exercises()
    assert len(found) >= 19, sorted(found)
    assert found["scaled_dot_product_attention"] == ("01_attention", "function")
    assert found["MultiHeadAttention"] == ("04_multi_head_attention", "class")


@pytest.mark.parametrize("exercise", sorted(solution_exercises()))
def test_every_exercise_has_a_contract(exercise: str) -> None:
    where, kind = solution_exercises()[exercise]
    assert exercise in CONTRACTS, f"{exercise} ({where}) has no contract in course_utils/contracts.py"
    found = contract(exercise)
    assert (found.lesson, found.kind) == (where, kind), f"the contract of {exercise} says {found.lesson}, {found.kind}"


@pytest.mark.parametrize("exercise", sorted(CONTRACTS))
def test_every_contract_names_a_lesson_that_defines_it(exercise: str) -> None:
    found = contract(exercise)
    assert found.exercise == exercise
    assert (SOLUTIONS / f"{found.lesson}.ipynb").is_file(), f"{exercise}: no lesson solutions/{found.lesson}.ipynb"
    assert solution_exercises().get(exercise, (None,))[0] == found.lesson, (
        f"{exercise}: solutions/{found.lesson}.ipynb has no exercise of that name"
    )
    assert found.kind in ("function", "class") and found.signature


def _listed(found: Contract) -> list[tuple[str, str]]:
    return [("attribute", n) for n in found.attributes] + [("method", n) for n in found.methods] + [
        ("submodule", n) for n in found.submodules
    ]


@pytest.mark.parametrize("exercise", sorted(CONTRACTS))
def test_every_listed_name_is_stated_in_the_lesson(exercise: str) -> None:
    found = contract(exercise)
    stated = stated_names(lesson(found.lesson))
    missing = [f"{what} {name}" for what, name in _listed(found) if name not in stated]
    assert not missing, (
        f"{exercise}'s contract lists names the learner is never told in {found.lesson}'s text "
        f"(write each as code, e.g. `{_listed(found)[0][1] if _listed(found) else 'name'}`): {missing}"
    )


def test_names_are_identifiers_and_unique() -> None:
    for found in CONTRACTS.values():
        names = [n for _, n in _listed(found)]
        assert all(n.isidentifier() for n in names), (found.exercise, names)
        assert len(names) == len(set(names)), f"{found.exercise} lists a name twice: {names}"


def _loaded_lists() -> list[list[str]]:
    """The name lists of every ``load_exercises(notebook, [names...])`` call in the solution notebooks."""
    lists = []
    for name in lessons():
        for cell in lesson(name).cells:
            tree = parse_cell(cell.source) if cell.cell_type == "code" else None
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "load_exercises" and \
                        len(node.args) > 1 and isinstance(node.args[1], ast.List):
                    lists.append([ast.literal_eval(item) for item in node.args[1].elts])
    return lists


def test_the_code_loaded_with_an_exercise_is_loaded_wherever_the_exercise_is() -> None:
    """``loaded_with`` spares a name from the checkers' "defined in another cell" failure: true only if it holds."""
    given = {name: c.loaded_with for name, c in CONTRACTS.items() if c.loaded_with}
    assert given, "beam_search uses the lesson's gnmt_length_penalty"
    lists = _loaded_lists()
    for exercise, names in given.items():
        loading = [names_ for names_ in lists if exercise in names_]
        assert loading, f"no later lesson loads {exercise}"
        for names_ in loading:
            assert set(names) <= set(names_), f"a lesson loads {exercise} without {names}"
        defined = {n for cell in lesson(CONTRACTS[exercise].lesson).cells if cell.cell_type == "code"
                   for node in getattr(parse_cell(cell.source), "body", []) if isinstance(node, ast.FunctionDef)
                   for n in [node.name]}
        assert set(names) <= defined, f"{names} must be the lesson's own code"
