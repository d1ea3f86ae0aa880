"""show_solution (course_utils.solutions): finding and showing a solution, only when asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils.solutions import SolutionsNotFound, find_solution, find_solutions_dir, show_solution

REPO_ROOT = Path(__file__).resolve().parent.parent

CELLS = [
    ("markdown", "# Lesson\n\n    ### BEGIN SOLUTION\n    in prose: not a region"),
    ("code", "import math\n\n\ndef scale(x, d_k):\n    \"\"\"Divide by sqrt(d_k).\"\"\"\n    ### BEGIN SOLUTION\n    ### STARTER: return ...\n    return x / math.sqrt(d_k)\n    ### END SOLUTION"),
    ("code", "### BEGIN SOLUTION\n@staticmethod_like\ndef make_causal_mask(size):\n    \"\"\"True on and below the diagonal.\"\"\"\n    return size\n### END SOLUTION\n\n\nother = 1"),
    ("code", "check_causal_mask(make_causal_mask)"),
    ("code", "class Box:\n    \"\"\"A box.\"\"\"\n\n    def size(self):\n        ### BEGIN SOLUTION\n        return 42\n        ### END SOLUTION\n\n    def colour(self):\n        return 'red'"),
    ("code", "%matplotlib inline\nwarmup = 4000  # given, not an exercise"),
]


@pytest.fixture
def solutions(tmp_path: Path) -> Path:
    folder = tmp_path / "solutions"
    folder.mkdir()
    (tmp_path / "notebooks").mkdir()
    cells = [{"cell_type": kind, "metadata": {}, "source": source, **({"outputs": [], "execution_count": None} if kind == "code" else {})} for kind, source in CELLS]
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 4}
    (folder / "01_lesson.ipynb").write_text(json.dumps(nb))
    (folder / "notes.ipynb").write_text("not a lesson notebook, ignored")
    return folder


def test_a_function_with_a_region_inside(solutions: Path) -> None:
    found = find_solution("scale", solutions)
    assert found.source == 'def scale(x, d_k):\n    """Divide by sqrt(d_k)."""\n    return x / math.sqrt(d_k)'
    assert (found.notebook.name, found.cell) == ("01_lesson.ipynb", 2)


def test_a_definition_inside_a_region_and_by_its_checker(solutions: Path) -> None:
    expected = '@staticmethod_like\ndef make_causal_mask(size):\n    """True on and below the diagonal."""\n    return size'
    assert find_solution("make_causal_mask", solutions).source == expected
    assert find_solution("causal_mask", solutions).source == expected
    assert find_solution("check_causal_mask", solutions).source == expected


def test_a_class_is_shown_whole(solutions: Path) -> None:
    source = find_solution("Box", solutions).source
    assert source.startswith("class Box:") and "return 42" in source and "return 'red'" in source
    assert "### " not in source


def test_unknown_names_list_what_exists(solutions: Path, capsys) -> None:
    with pytest.raises(LookupError, match="Solutions exist for: Box, make_causal_mask, scale"):
        find_solution("warmup", solutions)
    show_solution("nothing_like_it", solutions)
    assert "defines 'nothing_like_it'" in capsys.readouterr().out


def test_plain_text_outside_jupyter(solutions: Path, capsys) -> None:
    show_solution("scale", solutions)
    out = capsys.readouterr().out
    assert out.startswith("Solution: scale (from 01_lesson.ipynb, cell 2)")
    assert "return x / math.sqrt(d_k)" in out


def test_highlighted_in_jupyter(solutions: Path, monkeypatch) -> None:
    import course_utils.solutions as module

    shown = []
    monkeypatch.setattr(module, "_in_notebook", lambda: True)
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    show_solution("scale", solutions)
    (markdown,) = shown
    assert "```python\ndef scale(x, d_k):" in markdown.data


def test_found_from_the_notebooks_folder(solutions: Path, monkeypatch) -> None:
    monkeypatch.chdir(solutions.parent / "notebooks")
    assert find_solutions_dir().resolve() == solutions.resolve()


def test_without_the_solutions_folder_it_says_where_to_get_them(tmp_path: Path, capsys) -> None:
    show_solution("scale", tmp_path / "missing")
    out = capsys.readouterr().out
    assert "The solutions folder is not here" in out
    assert "On Colab, run the setup cell at the top of the notebook first" in out
    assert "git clone https://github.com/" in out and "/tree/" in out
    with pytest.raises(SolutionsNotFound):
        find_solution("scale", tmp_path / "missing")


def test_every_real_exercise_has_a_solution_to_show() -> None:
    from course_utils.progress import exercises

    notebooks = sorted((REPO_ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    if not notebooks:
        pytest.skip("solutions/ holds no notebooks yet")
    for path in notebooks:
        nb = json.loads(path.read_text())
        for _, names in exercises(nb):
            for name in names:
                assert find_solution(name, REPO_ROOT / "solutions").source, f"{path.name}: {name}"
