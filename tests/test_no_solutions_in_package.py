"""course_utils must not ship the course's answers.

A learner who opens a checker's source should learn how we test, not the
solution. (The one exception, asked for by the course: ``course_utils.data``
holds the course's own tokenizer, vocabulary and batching, which lessons 05
and 06 build on; lesson 00's exercises re-implement them.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

from course_utils._schema import cell_source, find_regions

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "course_utils"
ALLOWED = {PACKAGE / "data"}  # see the module docstring
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def _package_files() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if not any(a in p.parents for a in ALLOWED)]


def _solution_lines() -> dict[str, str]:
    """Substantive lines written inside solution regions (lesson 00 excluded, see above) -> where."""
    found: dict[str, str] = {}
    for path in SOLUTIONS:
        if path.name.startswith("00_"):
            continue
        nb = nbformat.read(str(path), as_version=4)
        for number, cell in enumerate(nb.cells, start=1):
            if cell.cell_type != "code":
                continue
            source = cell_source(cell)
            lines = source.split("\n")
            for region in find_regions(source):
                for line in lines[region.body_start : region.end]:
                    text = line.strip()
                    if len(text) >= 24 and not text.startswith("#"):
                        found.setdefault(text, f"{path.name}, cell {number}")
    return found


def _exercise_names() -> set[str]:
    names = set()
    for path in SOLUTIONS:
        if path.name.startswith("00_"):
            continue
        nb = nbformat.read(str(path), as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code" and find_regions(cell_source(cell)):
                try:
                    tree = ast.parse(cell_source(cell))
                except SyntaxError:
                    continue
                names |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names


@pytest.mark.skipif(not SOLUTIONS, reason="no solution notebooks yet")
def test_no_solution_line_appears_in_the_package():
    lines = _solution_lines()
    assert lines, "the solution notebooks should contain solution regions"
    leaks = []
    for path in _package_files():
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.strip() in lines:
                leaks.append(f"{path.relative_to(ROOT)}:{number} repeats {lines[line.strip()]}: {line.strip()}")
    assert not leaks, "\n".join(leaks)


@pytest.mark.skipif(not SOLUTIONS, reason="no solution notebooks yet")
def test_the_package_defines_no_exercise():
    names = _exercise_names()
    assert "scaled_dot_product_attention" in names or len(names) > 3
    defined = []
    for path in _package_files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
                defined.append(f"{path.relative_to(ROOT)}:{node.lineno} defines {node.name}")
    assert not defined, "\n".join(defined)
