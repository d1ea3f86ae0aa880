"""The otter assignments that `python -m course_utils.grading build` writes, graded by `otter run` (no Docker).

Needs the grading extra (`pip install -e ".[grading]"`); skipped without otter-grader. `otter run` starts a
kernel per submission (about 10 s of CPU each), so by default the solutions of three representative lessons
are graded (01: one exercise; 05: five, on the reference code of lessons 01-04; 07: beam_search, loaded with a
helper of another cell) and the exercise notebook of lesson 05; `COURSE_GRADING_ALL_LESSONS=1` grades the
solution and the exercise notebook of every lesson (.ci/run does).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("otter", reason='the grading extra is not installed: pip install -e ".[grading]"')

from course_utils._schema import cell_source  # noqa: E402
from test_grading import HIDDEN, ROOT, SOLUTIONS, exercises, tuned_notebook, with_cell  # noqa: E402

pytestmark = pytest.mark.integration

LESSONS = [p.stem for p in SOLUTIONS]
ALL = os.environ.get("COURSE_GRADING_ALL_LESSONS") == "1"
GRADED = LESSONS if ALL else ["01_attention", "05_transformer", "07_inference"]
FRESH = LESSONS if ALL else ["05_transformer"]
#: What the notebook with a hanging exercise may take to grade, all of it (kernel start included), in seconds:
#: each bad exercise costs the checker's 5 s time limit; the run took 44 s on a 2-core machine at load 9.
HANG_BOUND = 120

#: Lesson 00 with one exercise that never returns and one that prints without end; the other two are right.
BAD = {
    "build_vocab": "def build_vocab(token_lists, min_freq=1):\n    while True:\n        pass\n",
    "pad_batch": "def pad_batch(sequences, pad_id):\n    while True:\n        print('padding...')\n",
}


def otter_run(submission: Path, autograder: Path, out: Path) -> dict:
    """`otter run` on one submission: the seconds it took, its exit status and {question: (score, possible, output)}."""
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "otter", "run", "--no-logo", "-a", str(autograder), "-o", str(out),
                           str(submission)], capture_output=True, text=True, timeout=600, cwd=out)
    seconds = time.monotonic() - start
    results = out / "results.json"
    tests = json.loads(results.read_text())["tests"] if results.is_file() else []
    scores = {t["name"]: (t["score"], t["max_score"], t.get("output", "")) for t in tests if "score" in t}
    return {"seconds": seconds, "returncode": done.returncode, "scores": scores, "log": done.stdout + done.stderr}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("assignments")
    done = subprocess.run([sys.executable, "-m", "course_utils.grading", "build", str(out), "--seed", str(HIDDEN)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def autograder(built: Path, lesson: str) -> Path:
    (found,) = (built / lesson / "autograder").glob("*.zip")
    return found


@pytest.fixture(scope="module")
def runs(built, tmp_path_factory) -> dict:
    """Every `otter run` of this file, a few at a time: (kind, lesson) -> its outcome."""
    work = tmp_path_factory.mktemp("submissions")
    (work / "bad").mkdir()
    (work / "tuned").mkdir()
    bad = with_cell("00_setup_and_data", "build_vocab", BAD["build_vocab"], work / "bad")
    bad = with_cell("00_setup_and_data", "pad_batch", BAD["pad_batch"], work / "bad", base=bad)
    jobs = {("solution", lesson): ROOT / "solutions" / f"{lesson}.ipynb" for lesson in GRADED}
    jobs |= {("exercise", lesson): ROOT / "notebooks" / f"{lesson}.ipynb" for lesson in FRESH}
    jobs[("bad", "00_setup_and_data")] = bad
    jobs[("tuned", "01_attention")] = tuned_notebook(work / "tuned")
    workers = max(1, min(4, (os.cpu_count() or 2)))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {key: pool.submit(otter_run, path, autograder(built, key[1]), work / "out" / "-".join(key))
                   for key, path in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


def test_the_build_writes_an_otter_assignment_for_every_lesson(built) -> None:
    by_lesson: dict[str, list] = {}
    for e in exercises():
        by_lesson.setdefault(e.lesson, []).append(e)
    assert sorted(p.name for p in built.iterdir()) == LESSONS
    for lesson, found in by_lesson.items():
        student = json.loads((built / lesson / "student" / f"{lesson}.ipynb").read_text())
        course = json.loads((ROOT / "notebooks" / f"{lesson}.ipynb").read_text())
        assert [cell_source(c) for c in student["cells"] if c["cell_type"] == "code"] == \
               [cell_source(c) for c in course["cells"] if c["cell_type"] == "code"], \
               f"{lesson}: the student notebook's code is the exercise notebook's"
        for path in (built / lesson / "student").rglob("*"):
            if path.is_file():
                assert str(HIDDEN) not in path.read_text(errors="replace"), f"the hidden seed is in {path}"
        with zipfile.ZipFile(autograder(built, lesson)) as z:
            names = set(z.namelist())
            for e in found:
                test = z.read(f"tests/{e.name}.py").decode()
                assert f"seed = {HIDDEN}\n" in test and f"grade({lesson!r}, {e.name!r}, {e.checker!r}, seed=seed)" in test
                assert "hidden=True" in test
            assert {"files/course/course_utils/autograde.py", "files/course/pyproject.toml",
                    "files/course/solutions/00_setup_and_data.ipynb"} <= names
            config = json.loads(z.read("otter_config.json"))
            assert config["plugins"] == ["course_utils.otter_plugin.ExercisesOnly"]
            assert "/autograder/source/files/course" in z.read("environment.yml").decode()


@pytest.mark.parametrize("lesson", GRADED)
def test_otter_run_gives_full_marks_to_the_solution(lesson, runs) -> None:
    run = runs[("solution", lesson)]
    assert run["returncode"] == 0, run["log"][-3000:]
    expected = {e.name for e in exercises() if e.lesson == lesson}
    assert set(run["scores"]) == expected, run["log"][-3000:]
    assert all(score == possible == 1 for score, possible, _ in run["scores"].values()), run["scores"]


@pytest.mark.parametrize("lesson", FRESH)
def test_otter_run_gives_zero_without_error_to_the_fresh_exercise_notebook(lesson, runs) -> None:
    run = runs[("exercise", lesson)]
    assert run["returncode"] == 0, run["log"][-3000:]
    assert set(run["scores"]) == {e.name for e in exercises() if e.lesson == lesson}
    for name, (score, possible, output) in run["scores"].items():
        assert score == 0 and possible == 1, (name, output)
        assert "NOT ATTEMPTED" in output, (name, output)


def test_a_hanging_exercise_and_an_endless_print_cost_those_exercises_only(runs) -> None:
    run = runs[("bad", "00_setup_and_data")]
    assert run["returncode"] == 0, run["log"][-3000:]
    scores = {name: score for name, (score, _, _) in run["scores"].items()}
    assert scores == {"build_vocab": 0, "encode": 1, "decode": 1, "pad_batch": 0}, run["scores"]
    for name in BAD:
        assert f"{name}: ERROR" in run["scores"][name][2] and "did not return within" in run["scores"][name][2]
    assert run["seconds"] < HANG_BOUND, f"grading took {run['seconds']:.0f} s"
    assert run["log"].count("padding...") < 1000, "what the endless print wrote is not passed on"


def test_an_answer_tuned_to_the_checker_cell_scores_nothing_in_the_autograder(runs) -> None:
    run = runs[("tuned", "01_attention")]
    assert run["returncode"] == 0, run["log"][-3000:]
    score, possible, output = run["scores"]["scaled_dot_product_attention"]
    assert (score, possible) == (0, 1) and "FAILED" in output, output
    assert str(HIDDEN) not in output, "the report learners see after publication does not show the hidden seed"
