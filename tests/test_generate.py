"""The notebook generator (course_utils.generate), against the golden notebooks in tests/golden/.

Golden files are stored as ``.json`` (not ``.ipynb``) so that nbval does not
collect them. ``<case>.solution.json`` is an input; ``<case>.exercise.json``
is the exercise notebook it must produce, byte for byte. After an intended
change to the output, rewrite the expected files with
``UPDATE_GOLDEN=1 pytest tests/test_generate.py`` and review the diff.

The last part of this file runs over the real solutions/ and notebooks/
folders (skipped while they are empty): nothing leaks, blanks map back onto
the solutions exactly, and the committed solutions show every check passing.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils import _schema
from course_utils import lessons as course_lessons
from course_utils._schema import (META_HASH, META_KEY, TAG_COLAB_BADGE, TAG_COLAB_SETUP, TAG_LESSON_MAP, TAG_LESSON_NEEDS,
                                  TAG_SOLUTION_ONLY, cell_source, cell_tags)
from course_utils.generate import dumps, fill_blanks, main, raises_when_run, strip_solutions

GOLDEN = Path(__file__).parent / "golden"
REPO_ROOT = Path(__file__).resolve().parent.parent
CASES = ["default_region", "indented_region", "starter", "solution_only", "multiple_regions", "outputs_and_metadata"]
NAME = "01_case.ipynb"

PYPROJECT = """\
[project]
name = "example"
dependencies = ["torch>=2.1", "numpy", "sacrebleu>=2", "jupyterlab", "datasets"]

[tool.course]
repository = "https://github.com/example/course"
branch = "main"
"""


@pytest.fixture
def course(tmp_path: Path) -> Path:
    """A tiny course repository: pyproject with [tool.course], solutions/, notebooks/."""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "solutions").mkdir()
    (tmp_path / "notebooks").mkdir()
    return tmp_path


def put(root: Path, case: str, name: str = NAME) -> Path:
    path = root / "solutions" / name
    shutil.copyfile(GOLDEN / f"{case}.solution.json", path)
    return path


def generate(root: Path, *args: str, capsys=None) -> tuple[int, str, str]:
    code = main(["--root", str(root), *args])
    if capsys is None:
        return code, "", ""
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def body_cells(nb: dict) -> list[dict]:
    """The cells after the stamped badge and setup cells."""
    return [c for c in nb["cells"] if TAG_COLAB_BADGE not in cell_tags(c) and TAG_COLAB_SETUP not in cell_tags(c)]


# ---------------------------------------------------------------------------
# Golden notebooks


@pytest.mark.parametrize("case", CASES)
def test_exercise_matches_golden(course: Path, case: str) -> None:
    put(course, case)
    assert generate(course)[0] == 0
    produced = (course / "notebooks" / NAME).read_bytes()
    expected_path = GOLDEN / f"{case}.exercise.json"
    if os.environ.get("UPDATE_GOLDEN"):
        expected_path.write_bytes(produced)
    assert produced == expected_path.read_bytes()


def exercise_sources(course: Path, case: str) -> list[str]:
    put(course, case)
    assert generate(course)[0] == 0
    nb = load(course / "notebooks" / NAME)
    return [cell_source(c) for c in body_cells(nb)]


def test_default_region_becomes_the_stub(course: Path) -> None:
    sources = exercise_sources(course, "default_region")
    assert sources[1] == "import math\n\n# YOUR CODE HERE\nraise NotImplementedError()\nprint(answer)"


def test_cells_that_raise_when_run_are_tagged_for_nbval(course: Path) -> None:
    put(course, "default_region")
    generate(course)
    assert cell_tags(body_cells(load(course / "notebooks" / NAME))[1]) == [_schema.TAG_RAISES_EXCEPTION]
    put(course, "indented_region")
    generate(course)
    assert [cell_tags(c) for c in body_cells(load(course / "notebooks" / NAME))] == [[], [], []]


def test_raises_when_run() -> None:
    assert raises_when_run("# YOUR CODE HERE\nraise NotImplementedError()")
    assert raises_when_run("class A:\n    # YOUR CODE HERE\n    raise NotImplementedError()")
    assert raises_when_run("for i in range(3):\n    raise NotImplementedError")
    assert not raises_when_run("def f():\n    raise NotImplementedError()")
    assert not raises_when_run("class A:\n    def f(self):\n        raise NotImplementedError()")
    assert not raises_when_run("raise ValueError()")


def test_indented_region_keeps_its_indentation(course: Path) -> None:
    sources = exercise_sources(course, "indented_region")
    assert sources[1] == 'def scale(x, d_k):\n    """Divide by sqrt(d_k)."""\n    # YOUR CODE HERE\n    raise NotImplementedError()\n'
    assert sources[2] == "class Box:\n    def size(self):\n        # YOUR CODE HERE\n        raise NotImplementedError()\n"


def test_starter_lines_replace_the_stub(course: Path) -> None:
    sources = exercise_sources(course, "starter")
    assert sources[1] == (
        'def noam(step, d_model, warmup_steps):\n    """The learning rate at a step."""\n'
        "    step = max(step, 1)\n\n    return ...  # your formula\n        # (extra indentation is kept)\n"
    )
    assert "warmup_steps ** -1.5" not in "".join(sources)


def test_solution_only_cells_are_removed(course: Path) -> None:
    put(course, "solution_only")
    generate(course)
    nb = load(course / "notebooks" / NAME)
    assert not any(TAG_SOLUTION_ONLY in cell_tags(c) for c in nb["cells"])
    assert [cell_source(c) for c in body_cells(nb)][1:] == ["x = 2"]
    assert cell_tags(body_cells(nb)[1]) == ["keep-me"]
    assert "reasoning" not in (course / "notebooks" / NAME).read_text()


def test_multiple_regions_in_one_cell(course: Path) -> None:
    sources = exercise_sources(course, "multiple_regions")
    assert sources[1] == (
        "def first(a):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\n\n"
        "def second(b):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\n\n"
        "# YOUR CODE HERE\nraise NotImplementedError()"
    )
    assert sources[2] == "check_first(first)", "checker cells are kept as they are"


def test_outputs_counts_and_volatile_metadata_are_stripped(course: Path) -> None:
    put(course, "outputs_and_metadata")
    generate(course)
    nb = load(course / "notebooks" / NAME)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
        for key in ("execution", "ExecuteTime", "scrolled", "collapsed"):
            assert key not in cell["metadata"]
    assert cell_tags(body_cells(nb)[2]) == ["demo"], "tags are kept"
    assert set(nb["metadata"]) == {"kernelspec", "language_info", META_KEY}
    assert nb["metadata"]["language_info"] == {"name": "python"}
    # Markers inside markdown are prose, not regions.
    assert "### BEGIN SOLUTION" in cell_source(body_cells(nb)[1])


def test_cell_ids_come_from_the_solution(course: Path) -> None:
    put(course, "default_region")
    generate(course)
    ids = [c["id"] for c in load(course / "notebooks" / NAME)["cells"]]
    assert ids == [TAG_COLAB_BADGE, TAG_COLAB_SETUP, "cell-0", "cell-1"]


def test_fill_blanks_inverts_strip_solutions() -> None:
    for case in CASES:
        for cell in load(GOLDEN / f"{case}.solution.json")["cells"]:
            if cell["cell_type"] == "code":
                source = cell_source(cell)
                assert fill_blanks(strip_solutions(source), source) == source


# ---------------------------------------------------------------------------
# Malformed markers fail loudly, naming notebook, cell and line, and write nothing


@pytest.mark.parametrize(
    "case, line, phrase",
    [
        ("unclosed", 2, "is never closed"),
        ("nested", 3, "nested '### BEGIN SOLUTION'"),
        ("stray_end", 2, "without a '### BEGIN SOLUTION' before it"),
        ("misspelt", 1, "looks like a solution marker but is not one"),
        ("starter_late", 3, "must come right after '### BEGIN SOLUTION'"),
    ],
)
def test_bad_markers_are_errors(course: Path, capsys, case: str, line: int, phrase: str) -> None:
    solution = put(course, f"bad_{case}")
    before = solution.read_bytes()
    code, _, err = generate(course, capsys=capsys)
    assert code == 2
    assert f"solutions/{NAME}, cell 3 (id cell-2), line {line}: " in err
    assert phrase in err
    assert list((course / "notebooks").iterdir()) == []
    assert solution.read_bytes() == before


def test_a_bad_notebook_stops_the_good_ones_too(course: Path) -> None:
    put(course, "default_region", "01_good.ipynb")
    put(course, "bad_unclosed", "02_bad.ipynb")
    assert generate(course)[0] == 2
    assert list((course / "notebooks").iterdir()) == []


# ---------------------------------------------------------------------------
# Determinism, hand edits, --check


def test_byte_stable(course: Path, tmp_path_factory) -> None:
    other = tmp_path_factory.mktemp("other")
    shutil.copytree(course, other, dirs_exist_ok=True)
    for root in (course, other):
        for case in CASES:
            put(root, case, f"0{CASES.index(case)}_{case}.ipynb")
        assert generate(root)[0] == 0
    files = sorted(p.relative_to(course) for p in course.rglob("*.ipynb"))
    assert len(files) == 2 * len(CASES)
    for rel in files:
        assert (course / rel).read_bytes() == (other / rel).read_bytes()
        assert (course / rel).read_bytes().endswith(b"}\n")
    # A second run changes nothing at all.
    stamps = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in course.rglob("*.ipynb")}
    assert generate(course)[0] == 0
    assert stamps == {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in course.rglob("*.ipynb")}


def test_command_line_finds_the_repository_from_the_current_folder(course: Path) -> None:
    put(course, "default_region")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-m", "course_utils.generate"], cwd=course / "notebooks", env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert f"wrote notebooks/{NAME}" in done.stdout
    assert (course / "notebooks" / NAME).exists()


def test_the_hash_of_the_content_is_recorded(course: Path) -> None:
    put(course, "default_region")
    generate(course)
    meta = load(course / "notebooks" / NAME)["metadata"][META_KEY]
    assert meta["generated_from"] == f"solutions/{NAME}"
    assert len(meta[META_HASH]) == 64


def test_an_edited_exercise_is_never_overwritten_without_force(course: Path, capsys) -> None:
    solution = put(course, "default_region")
    generate(course)
    exercise = course / "notebooks" / NAME
    nb = load(exercise)
    body_cells(nb)[1]["source"] = "import math\nanswer = 4.0  # my own work\nprint(answer)"
    exercise.write_text(json.dumps(nb))
    edited = exercise.read_bytes()

    # The solution changes: regenerating would lose the learner's work.
    text = solution.read_text().replace("print(answer)", "print(answer + 1)")
    solution.write_text(text)
    code, _, err = generate(course, capsys=capsys)
    assert code == 1
    assert f"refused: notebooks/{NAME} was edited since it was generated" in err and "--force" in err
    assert exercise.read_bytes() == edited

    code, _, err = generate(course, "--check", capsys=capsys)
    assert code == 1
    assert exercise.read_bytes() == edited

    code, out, _ = generate(course, "--force", capsys=capsys)
    assert code == 0 and f"wrote notebooks/{NAME}" in out
    assert "print(answer + 1)" in exercise.read_text()
    assert "my own work" not in exercise.read_text()


def test_reformatting_alone_is_not_an_edit(course: Path) -> None:
    solution = put(course, "default_region")
    generate(course)
    exercise = course / "notebooks" / NAME
    exercise.write_text(json.dumps(load(exercise), indent=2))  # another editor's formatting, same content
    solution.write_text(solution.read_text().replace("print(answer)", "print(answer / 2)"))
    assert generate(course)[0] == 0
    assert "print(answer / 2)" in exercise.read_text()


def test_a_notebook_that_was_never_generated_is_not_overwritten(course: Path, capsys) -> None:
    put(course, "default_region")
    exercise = course / "notebooks" / NAME
    exercise.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n')
    code, _, err = generate(course, capsys=capsys)
    assert code == 1 and f"refused: notebooks/{NAME}" in err


def test_an_unedited_exercise_follows_its_solution(course: Path) -> None:
    solution = put(course, "default_region")
    generate(course)
    solution.write_text(solution.read_text().replace("print(answer)", "print(answer * 2)"))
    assert generate(course)[0] == 0
    assert "print(answer * 2)" in (course / "notebooks" / NAME).read_text()


def test_check_changes_nothing_and_names_what_is_out_of_date(course: Path, capsys) -> None:
    solution = put(course, "default_region")
    before = solution.read_bytes()
    code, out, _ = generate(course, "--check", capsys=capsys)
    assert code == 1
    assert f"out of date: notebooks/{NAME}" in out
    assert (f"out of date: solutions/{NAME} (its Colab badge/setup cells, its needs/map cells, or the contract boxes "
            f"made from course_utils/contracts.py need refreshing)") in out
    assert solution.read_bytes() == before and not (course / "notebooks" / NAME).exists()

    assert generate(course)[0] == 0
    code, out, _ = generate(course, "--check", capsys=capsys)
    assert code == 0 and "up to date" in out

    solution.write_text(solution.read_text().replace("print(answer)", "print(answer - 1)"))
    code, out, _ = generate(course, "--check", capsys=capsys)
    assert code == 1 and f"out of date: notebooks/{NAME}" in out and "solutions/" not in out

    generate(course)
    shutil.copyfile(course / "notebooks" / NAME, course / "notebooks" / "02_gone.ipynb")
    code, out, _ = generate(course, "--check", capsys=capsys)
    assert code == 1 and "no solution: notebooks/02_gone.ipynb" in out


# ---------------------------------------------------------------------------
# The stamped cells


def test_badges_point_to_each_notebook_in_the_repository(course: Path) -> None:
    put(course, "default_region")
    generate(course)
    base = "https://colab.research.google.com/github/example/course/blob/main"
    for folder in ("solutions", "notebooks"):
        nb = load(course / folder / NAME)
        badge, setup = nb["cells"][:2]
        assert badge["cell_type"] == "markdown" and cell_tags(badge) == [TAG_COLAB_BADGE]
        assert f"({base}/{folder}/{NAME})" in cell_source(badge)
        assert setup["cell_type"] == "code" and cell_tags(setup) == [TAG_COLAB_SETUP]


def test_branch_and_repository_can_be_overridden(course: Path) -> None:
    put(course, "default_region")
    generate(course, "--repository", "https://github.com/fork/other", "--branch", "dev")
    badge = cell_source(load(course / "notebooks" / NAME)["cells"][0])
    assert "github/fork/other/blob/dev/notebooks/" in badge


def test_setup_cell_clones_the_course_on_colab_and_is_short(course: Path) -> None:
    put(course, "default_region")
    generate(course)
    cell = load(course / "notebooks" / NAME)["cells"][1]
    source = cell_source(cell)
    ast.parse(source)
    assert source.startswith("# @title ") and 'display-mode: "form"' in source.splitlines()[0]
    assert cell["metadata"]["cellView"] == "form" and cell["metadata"]["jupyter"] == {"source_hidden": True}
    assert 'if "google.colab" in sys.modules:' in source
    assert '"--depth", "1", "--branch", "main"' in source
    assert 'os.environ.get("COURSE_UTILS_REPOSITORY", "https://github.com/example/course")' in source
    assert "\ncourse_utils.colab.setup()\n" in source and source.rstrip().endswith("shows the reference code")
    assert len(source.splitlines()) <= 20, "the logic lives in course_utils.colab"


def test_stamping_keeps_every_other_byte_of_the_solution(course: Path) -> None:
    solution = put(course, "outputs_and_metadata")
    original = solution.read_bytes()
    generate(course)
    stamped = load(solution)
    assert [cell_tags(c) for c in stamped["cells"][:2]] == [[TAG_COLAB_BADGE], [TAG_COLAB_SETUP]]
    stamped["cells"] = stamped["cells"][2:]
    assert dumps(stamped).encode() == original
    assert load(solution)["cells"][4]["outputs"], "outputs stay in the solution"


def test_restamping_refreshes_in_place_and_keeps_executed_cells(course: Path) -> None:
    solution = put(course, "default_region")
    generate(course)
    nb = load(solution)
    nb["cells"][1]["execution_count"] = 7  # the solution was executed
    solution.write_text(dumps(nb))
    executed = solution.read_bytes()
    generate(course)
    assert solution.read_bytes() == executed, "an up-to-date stamp is a no-op"

    # A stale stamp (another branch) that was moved down is replaced, not duplicated.
    nb["cells"].append(nb["cells"].pop(0))
    solution.write_text(dumps(nb))
    generate(course, "--branch", "dev")
    nb = load(solution)
    tags = [cell_tags(c) for c in nb["cells"]]
    assert tags.count([TAG_COLAB_BADGE]) == 1 and tags.count([TAG_COLAB_SETUP]) == 1
    assert tags[:2] == [[TAG_COLAB_BADGE], [TAG_COLAB_SETUP]]
    assert "/blob/dev/solutions/" in cell_source(nb["cells"][0])
    assert '"--branch", "dev"' in cell_source(nb["cells"][1]) and nb["cells"][1]["execution_count"] is None


# ---------------------------------------------------------------------------
# The real course: solutions/ and notebooks/. Each property is a function that
# lists problems, run on the real folders and (to test the test) on a small
# course built from the golden notebooks, with and without a planted fault.


def pairs_in(root: Path) -> list[tuple[Path, Path]]:
    solutions = sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb"))
    return [(s, root / "notebooks" / s.name) for s in solutions]


def real_pairs() -> list[tuple[Path, Path]]:
    pairs = pairs_in(REPO_ROOT)
    if not pairs:
        pytest.skip("solutions/ holds no notebooks yet")
    return pairs


def region_lines(source: str) -> tuple[set[str], set[str]]:
    """(stripped lines inside solution regions, stripped lines outside them) of a code cell."""
    lines = source.split("\n")
    inside: set[str] = set()
    for region in _schema.find_regions(source):
        inside.update(line.strip() for line in lines[region.body_start : region.end])
    outside = {line.strip() for line in strip_solutions(source).split("\n")}
    return inside, outside


def is_secret(line: str) -> bool:
    """Lines worth protecting: 12 characters or more and not a comment (so not ``pass``, ``return x``, brackets)."""
    return len(line) >= 12 and not line.startswith("#")


def strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    return []


def leaks(pairs: list[tuple[Path, Path]]) -> list[str]:
    """Solution lines (inside regions or solution-only cells) and solution outputs that appear in notebooks/.

    A line counts only if it is not trivial and appears nowhere outside the
    regions of any solution notebook (code given to the learner elsewhere is
    public). Solution output lines of 40 characters or more count likewise,
    unless they appear within the public text (a given ``print("...")``).
    """
    secret: set[str] = set()
    public: set[str] = set()
    outputs: set[str] = set()
    for solution, _ in pairs:
        for cell in load(solution)["cells"]:
            source = cell_source(cell)
            if TAG_SOLUTION_ONLY in cell_tags(cell):
                secret.update(line.strip() for line in source.split("\n"))
            elif cell["cell_type"] != "code":
                public.update(line.strip() for line in source.split("\n"))
            else:
                inside, outside = region_lines(source)
                secret |= inside
                public |= outside
            for text in strings(cell.get("outputs", [])):
                outputs.update(line.strip() for line in text.split("\n") if len(line.strip()) >= 40)
    secret = {line for line in secret - public if is_secret(line)}
    public_text = "\n".join(public)
    outputs = {line for line in outputs if line not in public_text}  # e.g. printed by a given print(...)

    problems = []
    for _, exercise in pairs:
        if not exercise.exists():
            problems.append(f"{exercise.name} was not generated")
            continue
        nb = load(exercise)
        lines = {line.strip() for c in nb["cells"] for line in cell_source(c).split("\n")}
        problems += [f"{exercise.name} shows the solution line {line!r}" for line in sorted(lines & secret)]
        if any(c.get("outputs") or c.get("execution_count") is not None for c in nb["cells"] if c["cell_type"] == "code"):
            problems.append(f"{exercise.name} has outputs or execution counts")
        haystack = "\n".join(strings(nb))
        problems += [f"{exercise.name} contains the solution output {o!r}" for o in sorted(outputs) if o in haystack]
    return problems


def round_trip_problems(pairs: list[tuple[Path, Path]]) -> list[str]:
    """Fill every blank of each exercise with its solution region: the result must be the solution, cell for cell."""
    problems = []
    for solution, exercise in pairs:
        if not exercise.exists():
            problems.append(f"{exercise.name} was not generated")
            continue
        sol = [c for c in body_cells(load(solution)) if TAG_SOLUTION_ONLY not in cell_tags(c)]
        ex = body_cells(load(exercise))
        if [c["cell_type"] for c in ex] != [c["cell_type"] for c in sol]:
            problems.append(f"{exercise.name}: its cells do not match the solution's")
            continue
        for number, (e, s) in enumerate(zip(ex, sol), start=1):
            expected = cell_source(s)
            try:
                got = fill_blanks(cell_source(e), expected) if e["cell_type"] == "code" else cell_source(e)
            except ValueError as exc:
                got = f"<{exc}>"
            if got != expected:
                problems.append(f"{exercise.name}, cell {number} after the setup cell, filled in, differs from the solution")
    return problems


def solution_only_problems(pairs: list[tuple[Path, Path]]) -> list[str]:
    """Names defined only in solution-only cells but used by later cells (which would break the exercise)."""
    problems = []
    for solution, _ in pairs:
        defined: set[str] = set()
        for number, cell in enumerate(load(solution)["cells"], start=1):
            if cell["cell_type"] != "code":
                continue
            try:
                tree = ast.parse(cell_source(cell))
            except SyntaxError:
                continue  # magics
            if TAG_SOLUTION_ONLY in cell_tags(cell):
                for node in tree.body:
                    if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                        defined.add(node.name)
                    elif isinstance(node, (ast.Import, ast.ImportFrom)):
                        defined.update((a.asname or a.name).split(".")[0] for a in node.names)
                    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                            defined.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                continue
            used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            if used & defined:
                problems.append(f"{solution.name}, cell {number} uses {sorted(used & defined)}, defined only in a solution-only cell")
    return problems


def failing_checks(pairs: list[tuple[Path, Path]]) -> list[str]:
    """Checker calls in the committed solution notebooks whose stored result is not "passed"."""
    from course_utils.progress import exercises, grade

    problems = []
    for solution, _ in pairs:
        nb = load(solution)
        problems += [f"{solution.name}: {r.exercise} {r.status} {r.message}" for r in grade(solution.stem, nb, exercises(nb)) if r.status != "passed"]
    return problems


@pytest.fixture
def golden_course(course: Path) -> Path:
    for number, case in enumerate(CASES):
        put(course, case, f"{number:02d}_{case}.ipynb")
    assert generate(course)[0] == 0
    return course


def test_the_real_folder_checks_find_nothing_in_a_good_course(golden_course: Path) -> None:
    pairs = pairs_in(golden_course)
    assert leaks(pairs) == []
    assert round_trip_problems(pairs) == []
    assert solution_only_problems(pairs) == []


def test_the_real_folder_checks_find_planted_faults(golden_course: Path) -> None:
    pairs = pairs_in(golden_course)
    exercise = golden_course / "notebooks" / "01_indented_region.ipynb"
    nb = load(exercise)
    body_cells(nb)[1]["source"] += "\nfactor = d_k ** -0.5"  # a solution line
    body_cells(nb)[2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x"}]
    exercise.write_text(dumps(nb))
    found = leaks(pairs)
    assert "01_indented_region.ipynb shows the solution line 'factor = d_k ** -0.5'" in found
    assert "01_indented_region.ipynb has outputs or execution counts" in found
    assert any("01_indented_region.ipynb, cell 2" in p for p in round_trip_problems(pairs))

    solution = golden_course / "solutions" / "03_solution_only.ipynb"
    nb = load(solution)
    nb["cells"][-1]["source"] = "x = secret + 2"
    solution.write_text(dumps(nb))
    assert solution_only_problems(pairs) == ["03_solution_only.ipynb, cell 6 uses ['secret'], defined only in a solution-only cell"]


def test_real_notebooks_are_up_to_date(capsys) -> None:
    real_pairs()
    code, out, err = generate(REPO_ROOT, "--check", capsys=capsys)
    assert code == 0, f"notebooks/ is out of date: run `python -m course_utils.generate`\n{out}{err}"


def generated_pairs() -> list[tuple[Path, Path]]:
    """The real pairs whose exercise exists (a missing one fails test_real_notebooks_are_up_to_date)."""
    pairs = [(s, e) for s, e in real_pairs() if e.exists()]
    if not pairs:
        pytest.skip("notebooks/ holds no generated notebooks yet")
    return pairs


def test_real_exercises_leak_no_solution() -> None:
    assert leaks(generated_pairs()) == []


def test_real_exercises_filled_in_are_the_solutions() -> None:
    """With this, running a filled-in exercise is running its solution notebook (minus solution-only
    cells, next test); nbval runs the solutions and compares their committed checker outputs (last test)."""
    assert round_trip_problems(generated_pairs()) == []


def test_real_solution_only_cells_define_nothing_the_exercise_needs() -> None:
    assert solution_only_problems(real_pairs()) == []


def test_real_solutions_show_every_check_passing() -> None:
    assert failing_checks(real_pairs()) == []


def test_solution_notebooks_record_no_execution_timings() -> None:
    """Solutions stay diffable: nbconvert's per-cell timestamps are not committed (README: record_timing=False)."""
    timed = [
        f"{path.name}, cell {i}"
        for path in sorted((REPO_ROOT / "solutions").glob("*.ipynb"))
        for i, cell in enumerate(json.loads(path.read_text())["cells"], start=1)
        if "execution" in cell.get("metadata", {})
    ]
    assert not timed, "execution timings stored in: " + ", ".join(timed[:5])


# ---------------------------------------------------------------------------
# The lesson header: "What this lesson needs" and the map, from course_utils.lessons


def test_a_listed_lesson_gets_its_needs_and_map_right_after_its_title(course: Path) -> None:
    solution = put(course, "default_region", "05_transformer.ipynb")
    assert generate(course)[0] == 0
    for path in (solution, course / "notebooks" / "05_transformer.ipynb"):
        cells = load(path)["cells"]
        assert [cell_tags(c) for c in cells[:2]] == [[TAG_COLAB_BADGE], [TAG_COLAB_SETUP]]
        assert cell_source(cells[2]).startswith("# A golden notebook"), path
        assert cell_tags(cells[3]) == [TAG_LESSON_NEEDS] and cells[3]["cell_type"] == "markdown"
        assert cell_source(cells[3]) == course_lessons.needs_markdown("05_transformer")
        assert cell_tags(cells[4]) == [TAG_LESSON_MAP] and cells[4]["cell_type"] == "code"
        assert cell_source(cells[4]) == course_lessons.map_source("05_transformer")
        assert 'lesson_map("05_transformer")' in cell_source(cells[4])
    assert generate(course, "--check")[0] == 0


def test_a_stale_or_edited_header_is_out_of_date_and_restamped_in_place(course: Path, capsys) -> None:
    solution = put(course, "default_region", "05_transformer.ipynb")
    generate(course)
    nb = load(solution)
    nb["cells"][4]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "the map\n"}]  # executed
    nb["cells"][3]["source"] = "> **What this lesson needs**\n>\n> - an old list"
    solution.write_text(dumps(nb))
    code, out, _ = generate(course, "--check", capsys=capsys)
    assert code == 1 and "out of date: solutions/05_transformer.ipynb" in out
    assert generate(course)[0] == 0
    cells = load(solution)["cells"]
    assert cell_source(cells[3]) == course_lessons.needs_markdown("05_transformer")
    assert cells[4]["outputs"], "an up-to-date map cell keeps its outputs"
    assert [cell_tags(c) for c in cells].count([TAG_LESSON_NEEDS]) == 1


def test_a_notebook_not_in_the_lessons_table_gets_no_header_and_a_warning(course: Path, capsys) -> None:
    put(course, "default_region", "42_unlisted.ipynb")
    code, _, err = generate(course, capsys=capsys)
    assert code == 0 and "42_unlisted.ipynb has no entry in course_utils/lessons.py" in err
    tags = [t for c in load(course / "solutions" / "42_unlisted.ipynb")["cells"] for t in cell_tags(c)]
    assert TAG_LESSON_NEEDS not in tags and TAG_LESSON_MAP not in tags
