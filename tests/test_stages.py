"""The stage library's notebook-facing stage: later lessons load only the exercise's own cell.

Cells are run as an IPython kernel runs them (each compiled from a file name in
one ``ipykernel_<pid>`` folder, its source in linecache, the code in
``__main__``), so the stage sees the notebook's other cells as it does in
JupyterLab and Colab.
"""

from __future__ import annotations

import itertools
import linecache

from helpers import expect
from course_utils.checks import check_causal_mask

_FOLDERS = itertools.count()


def run_cells(*sources: str) -> dict:
    """Run ``sources`` as the cells of one notebook, in order; the kernel's namespace."""
    folder = f"/tmp/ipykernel_test{next(_FOLDERS)}"
    namespace = {"__name__": "__main__"}
    for i, source in enumerate(sources):
        filename = f"{folder}/{i}.py"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)
    return namespace


IMPORTS = "import torch\nfrom course_utils.data import PAD\n"
EXERCISE = "def make_causal_mask(size):\n    return {body}\n"


def test_a_helper_in_a_cell_of_its_own_is_a_failure_that_says_where_to_move_it():
    cells = run_cells(IMPORTS, "def lower(size):\n    return torch.ones(size, size).tril().bool()\n",
                      EXERCISE.format(body="lower(size)"))
    expect(check_causal_mask(cells["make_causal_mask"]), "failed", "uses `lower`, which another cell",
           "Later lessons load your make_causal_mask on its own", "Move `lower` into the cell")


def test_a_constant_assigned_in_another_cell_is_named_too():
    cells = run_cells(IMPORTS, "DIAGONAL = 0\n",
                      EXERCISE.format(body="torch.ones(size, size, dtype=torch.bool).tril(DIAGONAL)"))
    expect(check_causal_mask(cells["make_causal_mask"]), "failed", "uses `DIAGONAL`")


def test_imports_and_what_the_exercise_cell_itself_defines_are_fine():
    same_cell = "SHIFT = 0\n\n\ndef lower(size):\n    return torch.ones(size, size).tril(SHIFT).bool()\n\n\n"
    cells = run_cells(IMPORTS, same_cell + EXERCISE.format(body="lower(size) if PAD else None"))
    expect(check_causal_mask(cells["make_causal_mask"]), "passed")


def test_code_that_later_lessons_load_from_elsewhere_is_not_the_exercises_concern():
    """Cells compiled under another notebook's name (as load_exercises runs them) are loaded there too."""
    lower = run_cells(IMPORTS)
    exec(compile("def lower(size):\n    return torch.ones(size, size).tril().bool()\n",
                 "<01_other.ipynb, code cell 3>", "exec"), lower)
    cells = run_cells(IMPORTS, EXERCISE.format(body="lower(size)"))
    cells["make_causal_mask"].__globals__["lower"] = lower["lower"]
    expect(check_causal_mask(cells["make_causal_mask"]), "passed")


def test_a_decorated_exercise_is_looked_at_through_its_decorator():
    """``@torch.no_grad()`` (as on greedy_decode and beam_search) wraps the function in torch's own code."""
    helper = "def lower(size):\n    return torch.ones(size, size).tril().bool()\n"
    cells = run_cells(IMPORTS, helper, "@torch.no_grad()\n" + EXERCISE.format(body="lower(size)"))
    expect(check_causal_mask(cells["make_causal_mask"]), "failed", "uses `lower`, which another cell")
    cells = run_cells(IMPORTS, helper + "\n\n@torch.no_grad()\n" + EXERCISE.format(body="lower(size)"))
    expect(check_causal_mask(cells["make_causal_mask"]), "passed")


def test_a_name_read_when_the_def_statement_runs_is_named_too():
    """Default values (and decorators, annotations) run when a later lesson loads the cell, before any call."""
    cells = run_cells(IMPORTS, "SIZE = 4\n", "def make_causal_mask(size=SIZE):\n"
                      "    return torch.ones(size, size, dtype=torch.bool).tril()\n")
    expect(check_causal_mask(cells["make_causal_mask"]), "failed", "uses `SIZE`, which another cell")
    cells = run_cells(IMPORTS, "SIZE = 4\n\n\ndef make_causal_mask(size=SIZE):\n"
                      "    return torch.ones(size, size, dtype=torch.bool).tril()\n")
    expect(check_causal_mask(cells["make_causal_mask"]), "passed")
