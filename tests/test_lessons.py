"""The solution notebooks as an instructor edits them: what nbval compares, and why the rest is not; hints.

nbval compares every stored output of a solution notebook with a fresh run.
An output that follows from trained weights, timings, the device or the CPU's
rounding cannot be stable across machines; such a cell carries the tag
``nbval-ignore-output`` and says why in its metadata, where a learner does not
see it (a ``# NBVAL_IGNORE_OUTPUT`` comment would sit in the learner's code).
No cell is empty (a leftover of moving cells shows as a blank box).

Every exercise has at least two hints between its cell and its checker cell,
the last one not the whole solution, and README.md's lesson table names it.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from course_utils._schema import cell_source, cell_tags, find_regions, parse_cell

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
IGNORED = "nbval-ignore-output"
REASON = "nbval_ignore_reason"


def _code_cells(path: Path) -> list[tuple[int, dict]]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [(i, cell) for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_no_nbval_comment_in_the_learners_code(path: Path) -> None:
    for i, cell in _code_cells(path):
        markers = [line for line in cell_source(cell).splitlines() if line.strip().startswith("# NBVAL_")]
        assert not markers, f"{path.name}, cell {i}: use the cell tag `{IGNORED}` instead of {markers[0]!r}"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_no_empty_cell(path: Path) -> None:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    empty = [i for i, cell in enumerate(cells) if not cell_source(cell).strip()]
    assert not empty, f"{path.name}: cell {empty[0]} is empty; delete it"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_every_output_left_uncompared_says_why(path: Path) -> None:
    for i, cell in _code_cells(path):
        reason = cell.get("metadata", {}).get(REASON, "")
        if IGNORED in cell_tags(cell):
            assert len(reason.split()) >= 2, f"{path.name}, cell {i}: say in metadata['{REASON}'] why nbval ignores it"
        else:
            assert not reason, f"{path.name}, cell {i}: a reason without the tag `{IGNORED}`"


# --------------------------------------------------------------------------
# Every exercise has its hints, and the README's lesson table names it.

_HINT = re.compile(r"<details>\s*<summary>\s*Hint\s*\d+\s*</summary>(.*?)</details>", re.DOTALL | re.IGNORECASE)


def _exercises_with_hints(path: Path) -> list[tuple[str, list[str], list[str]]]:
    """(exercise, its solution's substantive lines, the hints between its cell and its checker cell) per exercise."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found = []
    for i, cell in enumerate(cells):
        source = cell_source(cell)
        regions = find_regions(source) if cell["cell_type"] == "code" else []
        if not regions:
            continue
        tree = parse_cell(source)
        names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))] if tree else []
        lines = source.split("\n")
        solution = [line.strip() for r in regions for line in lines[r.body_start:r.end]
                    if line.strip() and not line.strip().startswith("#")]
        hints: list[str] = []
        for later in cells[i + 1:]:
            if later["cell_type"] == "code":
                break  # the checker cell
            hints += _HINT.findall(cell_source(later))
        found.append((names[0] if names else f"cell {i}", solution, hints))
    return found


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_every_exercise_has_two_hints_the_last_not_the_whole_solution(path: Path) -> None:
    for exercise, solution, hints in _exercises_with_hints(path):
        assert len(hints) >= 2, f"{path.name}: {exercise} has {len(hints)} hint(s) before its checker cell; give two or more"
        shown = [line for line in solution if line in hints[-1]]
        assert len(solution) < 3 or len(shown) <= 0.6 * len(solution), (
            f"{path.name}: the last hint of {exercise} shows {len(shown)} of its {len(solution)} solution lines: "
            f"a hint may show a key line, never the whole solution")


def test_the_readme_lesson_table_names_every_exercise() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\d\d_\w+)` \|.*$", readme, re.MULTILINE)}
    for path in SOLUTIONS:
        assert path.stem in rows, f"README.md's lesson table has no row for {path.stem}"
        for exercise, _, _ in _exercises_with_hints(path):
            assert f"`{exercise}`" in rows[path.stem], f"README.md's row for {path.stem} does not name `{exercise}`"


# --------------------------------------------------------------------------
# Each lesson's header comes from course_utils.lessons, and says what the notebook really does.


def test_every_solution_notebook_has_an_entry_in_the_lessons_table() -> None:
    from course_utils import lessons

    missing = [path.stem for path in SOLUTIONS if path.stem not in lessons.BY_STEM]
    assert not missing, f"add a Lesson(...) to course_utils/lessons.py for {missing}"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_the_notebooks_a_lesson_says_it_loads_are_the_ones_its_code_loads(path: Path) -> None:
    from course_utils import lessons

    entry = lessons.BY_STEM.get(path.stem)
    if entry is None:
        pytest.skip("not in the lessons table (the test above fails)")
    code = "\n".join(cell_source(cell) for _, cell in _code_cells(path))
    loaded = set(re.findall(r"load_exercises\(\s*\"(\d\d_\w+)\.ipynb\"", code))
    assert loaded == set(entry.loads), f"{path.stem} loads {sorted(loaded)}; course_utils/lessons.py says {sorted(entry.loads)}"
    wants_checkpoint = "06_transformer.pt" in code
    assert wants_checkpoint == ("06_transformer.pt" in entry.checkpoint), (
        f"{path.stem}: its code {'uses' if wants_checkpoint else 'does not use'} lesson 06's checkpoint; "
        "say so in its entry's `checkpoint`")


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_every_lesson_starts_with_its_title_needs_and_map(path: Path) -> None:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    tags = [cell_tags(c) for c in cells[:5]]
    assert cell_source(cells[2]).startswith(f"# Lesson {path.stem[:2]}"), f"{path.name}: the title comes after the setup cell"
    assert tags[3:5] == [["lesson-needs"], ["lesson-map"]], f"{path.name}: run `python -m course_utils.generate`"
    assert any("image/png" in o.get("data", {}) for o in cells[4].get("outputs", [])), (
        f"{path.name}: its map cell has no stored picture; re-run the notebook as the README says")
    assert "**Prerequisites:**" not in cell_source(cells[2]), f"{path.name}: the needs box says what it needs"
