"""Grade a class with otter-grader: one otter assignment per lesson, whose tests are the course's checkers.

    python -m course_utils.grading build DIR               # every lesson
    python -m course_utils.grading build DIR 01 05         # only these lessons
    python -m course_utils.grading build DIR --seed 1234   # a chosen hidden seed (default: a random one)
    python -m course_utils.grading build DIR --cpu-torch   # grading images with torch's CPU build

For every ``solutions/NN_topic.ipynb`` it writes ``DIR/NN_topic/master/NN_topic.ipynb``, an otter master
notebook (otter assign's format), and runs ``otter assign`` on it, which writes

* ``DIR/NN_topic/student/NN_topic.ipynb``: the notebook to hand out (its code cells are those of
  ``notebooks/NN_topic.ipynb``; the tests print nothing there: learners keep the course's checker cells);
* ``DIR/NN_topic/autograder/NN_topic-autograder_<time>.zip``: the autograder for ``otter grade``,
  ``otter run`` and Gradescope.

What a grade means (docs/grading.md says it for instructors):

* Each exercise of the lesson is one question, worth :func:`points` (one point unless :data:`POINTS` says
  otherwise). Its one test (hidden) calls ``course_utils.autograde.grade``, which runs the exercise's checker
  and fails with the checker's first message unless it says PASSED.
* The checker draws its cases with ``$COURSE_CHECK_SEED`` set to a seed written only into the autograder's
  tests, so an answer tuned to the cases of the learner's checker cell meets others.
* The submission's cells are never run as a notebook: the course's otter plugin
  (``course_utils.otter_plugin``) hands otter an empty notebook, and each test loads its own exercise from the
  submission the way later lessons load it (``notebook.load_exercises``), on top of the course's reference
  code for the earlier lessons. One exercise that hangs, exits or fails to load costs that exercise only.
* The autograder carries the course (``course_utils``, ``solutions/`` and ``pyproject.toml``, as
  ``files/course``); its requirements install that copy, so grading needs nothing but otter's image.

An authoring tool, like ``generate``: it reads notebooks and never imports torch or the checkers.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import dataclasses
import json
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import Iterator, Sequence

from ._schema import NOTEBOOK_NAME, TAG_CHECKER_DEMO, TAG_COLAB_BADGE, TAG_SOLUTION_ONLY, cell_source, cell_tags, find_regions, names_defined, parse_cell
from .generate import GenerateError, check_markers, find_root, read_json

#: Points per exercise, where an exercise is worth other than one point. The one table of points: a
#: per-exercise declaration (issue 30) takes it over by giving :func:`points` its value.
POINTS: dict[str, float] = {}

#: Where otter's images unpack an autograder (its ``autograder_dir``): the course travels in ``files/course``.
AUTOGRADER_DIR = "/autograder"
#: The folder (in the master notebook's folder, then in the autograder's ``files/``) that carries the course.
COURSE_FOLDER = "course"
#: The otter plugin that keeps the submission's cells from running as a notebook.
PLUGIN = "course_utils.otter_plugin.ExercisesOnly"


def points(exercise: str) -> float:
    """What one exercise is worth in its lesson's grade."""
    return POINTS.get(exercise, 1)


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One graded exercise: the name the learner defines, its checker, and the solution cell that defines it."""

    name: str
    checker: str
    lesson: str  # "01_attention"
    cell: int  # index of the defining cell in the solution notebook

    @property
    def points(self) -> float:
        return points(self.name)


def _checker_calls(nb: dict) -> dict[str, str]:
    """exercise -> the checker a (non-demonstration) checker cell calls on it: ``check_x(name)``."""
    found: dict[str, str] = {}
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code" or TAG_CHECKER_DEMO in cell_tags(cell):
            continue
        tree = parse_cell(cell_source(cell))
        for node in ast.walk(tree) if tree is not None else ():
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith("check_")
                    and node.args and isinstance(node.args[0], ast.Name)):
                found.setdefault(node.args[0].id, node.func.id)
    return found


def lesson_exercises(nb: dict, lesson: str) -> list[Exercise]:
    """The exercises of one lesson, in notebook order: each name that a checker cell checks and a solution cell defines.

    (``tests/test_grading.py`` checks that these are the lesson's contracts, one each.)
    """
    checkers = _checker_calls(nb)
    found: dict[str, Exercise] = {}
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code" or not find_regions(cell_source(cell)):
            continue
        tree = parse_cell(cell_source(cell))
        for node in tree.body if tree is not None else ():
            for name in names_defined(node):
                if name in checkers and name not in found:
                    found[name] = Exercise(name, checkers[name], lesson, index)
    if not found:
        raise GenerateError(f"{lesson}: no solution cell defines what a checker cell checks")
    return list(found.values())


# ---------------------------------------------------------------------------
# The master notebook


def otter_source(source: str) -> str:
    """A solution cell in otter assign's markers: each region's solution, then the course's stub as otter's prompt.

    Otter's student version keeps the prompt lines (the course's stub or starter lines, exactly as the exercise
    notebook has them); its autograder version keeps the solution, and the prompt as a string that does nothing.
    """
    lines = source.split("\n")
    out: list[str] = []
    done = 0
    for region in find_regions(source):
        out += lines[done:region.begin]
        out.append(f"{region.indent}# BEGIN SOLUTION NO PROMPT")
        out += lines[region.body_start:region.end]
        out.append(f"{region.indent}# END SOLUTION")
        out.append(f'{region.indent}""" # BEGIN PROMPT')
        out += region.replacement()
        out.append(f'{region.indent}""" # END PROMPT')
        done = region.end + 1
    out += lines[done:]
    return "\n".join(out)


def _raw(source: str) -> dict:
    return {"cell_type": "raw", "metadata": {}, "source": source}


def _code(source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}


def question_test(exercise: Exercise, seed: int) -> str:
    """The question's one test: the course's checker, under the hidden seed, through ``autograde.grade``."""
    return "\n".join([
        '""" # BEGIN TEST CONFIG',
        "hidden: true",
        '""" # END TEST CONFIG',
        f"def test_{exercise.name}():",
        "    from course_utils.autograde import grade",
        f"    seed = {seed}",  # on a line of its own: otter's report quotes the line that failed, the call below
        f"    grade({exercise.lesson!r}, {exercise.name!r}, {exercise.checker!r}, seed=seed)",
    ])


def assignment_config(lesson: str) -> str:
    """Otter assign's configuration (YAML) for one lesson."""
    return "\n".join([
        "# ASSIGNMENT CONFIG",
        "init_cell: false",  # the student notebook needs no otter: the course's checker cells stay
        "check_all_cell: false",
        "export_cell: false",
        "run_tests: false",  # tests/test_grading.py runs them on every solution notebook with `otter run`
        "strip_solutions_from_all_cells: true",
        "tests:",
        "  ok_format: false",
        "requirements: requirements.txt",
        "autograder_files:",
        f"  - {COURSE_FOLDER}",
        "plugins:",
        f"  - {PLUGIN}",
        "generate:",
        "  show_stdout: true",
        "  show_hidden: true",  # the checkers' messages reach learners once grades are published
        "  force_public_test_summary: false",  # (there are no public tests to sum up)
    ])


def master_notebook(solution: dict, lesson: str, seed: int) -> tuple[dict, list[Exercise]]:
    """The otter master notebook of one lesson, and its exercises (the questions, in order)."""
    exercises = lesson_exercises(solution, lesson)
    by_cell = {e.cell: e for e in exercises}
    cells: list[dict] = [_raw(assignment_config(lesson))]
    for index, cell in enumerate(solution.get("cells", [])):
        if TAG_SOLUTION_ONLY in cell_tags(cell) or TAG_COLAB_BADGE in cell_tags(cell):
            continue  # (the badge opens the course's public notebook, not this assignment's)
        new = copy.deepcopy(cell)
        if new.get("cell_type") == "code":
            new["source"] = otter_source(cell_source(cell))
            new["outputs"], new["execution_count"] = [], None
        exercise = by_cell.get(index)
        if exercise is None:
            cells.append(new)
            continue
        cells.append(_raw("\n".join(["# BEGIN QUESTION", f"name: {exercise.name}", f"points: {exercise.points}",
                                     "check_cell: false"])))
        cells.append(new)
        cells += [_raw("# BEGIN TESTS"), _code(question_test(exercise, seed)), _raw("# END TESTS"), _raw("# END QUESTION")]
    nb = {"cells": cells, "metadata": copy.deepcopy(solution.get("metadata", {})),
          "nbformat": solution.get("nbformat", 4), "nbformat_minor": solution.get("nbformat_minor", 5)}
    for cell in nb["cells"]:
        cell.pop("id", None)  # otter adds and strips cells: let nbformat give the new ones ids
    nb["nbformat_minor"] = min(nb["nbformat_minor"], 4)
    return nb, exercises


# ---------------------------------------------------------------------------
# Building


def _copy_course(root: Path, dest: Path) -> None:
    """What the autograder carries: the package, the reference notebooks (earlier lessons) and pyproject.toml."""
    if dest.exists():
        shutil.rmtree(dest)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(root / "course_utils", dest / "course_utils", ignore=ignore)
    shutil.copytree(root / "solutions", dest / "solutions", ignore=ignore)
    shutil.copy(root / "pyproject.toml", dest / "pyproject.toml")
    (dest / "README.md").write_text("The course package and reference notebooks, carried by an otter autograder.\n",
                                    encoding="utf-8")


#: Where pip finds torch's CPU-only builds (``--cpu-torch``: a far smaller grading image than PyPI's CUDA build).
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def requirements(cpu_torch: bool = False) -> str:
    """The autograder's requirements: the course package it carries (with its own dependencies)."""
    index = f"--extra-index-url {CPU_TORCH_INDEX}\n" if cpu_torch else ""
    return f"{index}{AUTOGRADER_DIR}/source/files/{COURSE_FOLDER}\n"


@dataclasses.dataclass
class Built:
    lesson: str
    folder: Path
    exercises: list[Exercise]

    @property
    def autograder(self) -> Path | None:
        zips = sorted((self.folder / "autograder").glob("*.zip"))
        return zips[-1] if zips else None

    @property
    def student(self) -> Path:
        return self.folder / "student" / f"{self.lesson}.ipynb"


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    """Run a block in ``folder`` (otter assign reads the master's files relative to the current folder)."""
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def build_lesson(solution_path: Path, out: Path, seed: int, root: Path, cpu_torch: bool = False) -> Built:
    """Write one lesson's master notebook under ``out/NN_topic/master`` and run ``otter assign`` on it."""
    try:
        from otter.assign import main as otter_assign
    except ImportError:
        raise GenerateError('otter-grader is not installed: pip install -e ".[grading]"') from None
    lesson = solution_path.stem
    solution = read_json(solution_path)
    check_markers(solution, solution_path.name)
    nb, exercises = master_notebook(solution, lesson, seed)
    folder = (out / lesson).resolve()
    master = folder / "master"
    for sub in ("student", "autograder"):
        shutil.rmtree(folder / sub, ignore_errors=True)
    master.mkdir(parents=True, exist_ok=True)
    _copy_course(root, master / COURSE_FOLDER)
    (master / "requirements.txt").write_text(requirements(cpu_torch), encoding="utf-8")
    (master / f"{lesson}.ipynb").write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    try:
        with _inside(master):
            otter_assign(f"{lesson}.ipynb", str(folder), no_pdfs=True, no_run_tests=True)
    except Exception as exc:  # otter's own errors (a bad master notebook) name the question
        raise GenerateError(f"otter assign failed on {master / (lesson + '.ipynb')}: {type(exc).__name__}: {exc}") from exc
    return Built(lesson, folder, exercises)


def build(out: Path, lessons: Sequence[str] = (), seed: int | None = None, root: Path | None = None,
          cpu_torch: bool = False) -> list[Built]:
    """Build the assignment of every lesson (or of those whose number or name is in ``lessons``)."""
    root = root or find_root()
    if root is None:
        raise GenerateError("cannot find the course (a folder with a [tool.course] pyproject.toml)")
    seed = secrets.randbelow(2**31 - 1) + 1 if seed is None else seed
    paths = sorted(p for p in (root / "solutions").glob("*.ipynb") if NOTEBOOK_NAME.match(p.name))
    if lessons:
        paths = [p for p in paths if any(p.stem == w or p.stem.split("_")[0] == w.zfill(2) for w in lessons)]
        if not paths:
            raise GenerateError(f"no lesson matches {', '.join(lessons)}")
    out.mkdir(parents=True, exist_ok=True)
    return [build_lesson(path, out, seed, root, cpu_torch) for path in paths]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.grading", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write an otter assignment (student notebook, autograder zip) per lesson")
    b.add_argument("dir", type=Path, help="output folder; DIR/NN_topic/ per lesson")
    b.add_argument("lessons", nargs="*", help="lesson numbers or names (default: all)")
    b.add_argument("--seed", type=int, default=None,
                   help="the hidden seed of the checkers' cases (default: a random one; it is written only into "
                        "the autograder's tests)")
    b.add_argument("--cpu-torch", action="store_true",
                   help=f"grading images take torch's CPU build ({CPU_TORCH_INDEX}), gigabytes smaller")
    args = parser.parse_args(argv)
    try:
        built = build(args.dir, args.lessons, args.seed, cpu_torch=args.cpu_torch)
    except GenerateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for b_ in built:
        total = sum(e.points for e in b_.exercises)
        print(f"{b_.lesson}: {len(b_.exercises)} exercises, {total:g} points -> {b_.autograder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
