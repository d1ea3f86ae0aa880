"""What an otter autograder's test runs: one exercise of a submission, through the course's checker.

Each question of an assignment that ``python -m course_utils.grading build`` writes has one test:

    def test_scaled_dot_product_attention():
        from course_utils.autograde import grade
        grade("01_attention", "scaled_dot_product_attention", "check_scaled_dot_product_attention", seed=...)

:func:`grade` returns when the checker says PASSED and raises AssertionError with the checker's verdict and
first message otherwise (FAILED, NOT ATTEMPTED and ERROR all score 0). For that it

1. loads the course's reference code of the earlier lessons (as a lesson does when the learner's earlier
   notebook is not at hand; a lesson's grade counts its own exercises only);
2. loads the exercise from the submission as later lessons load it (``notebook.load_exercises``: the
   notebook's imports and the exercise's own cell, nothing else), under a time limit, catching everything
   (``SystemExit`` included) and keeping at most a screenful of what the code prints;
3. runs the checker with ``$COURSE_CHECK_SEED`` set to the autograder's hidden seed, so that its random
   cases are other than those the learner's checker cell showed (see ``checks._core.seed_offset``).

Every exercise is loaded afresh into its own namespace and checked with the learner's state restored, so
one exercise that hangs, exits, prints without end or changes global settings costs that exercise only.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path
from typing import Any, Iterator

from . import contracts
from ._schema import NOTEBOOK_NAME, STATUS_LABELS

#: Where the submission is (set by ``course_utils.otter_plugin``); else the one notebook in the current folder.
SUBMISSION_ENV = "COURSE_SUBMISSION"
#: Seconds that loading one exercise from a submission may take (it only defines functions and classes).
LOAD_TIME_LIMIT = 10.0


def submission_path() -> Path:
    """The notebook being graded: ``$COURSE_SUBMISSION``, else the only ``.ipynb`` in the current folder."""
    given = os.environ.get(SUBMISSION_ENV)
    if given:
        return Path(given)
    found = sorted(Path.cwd().glob("*.ipynb"))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one submitted notebook in {Path.cwd()}, found {len(found)}")
    return found[0]


def solutions_dir() -> Path:
    """The course's reference notebooks: the copy an autograder carries (``course/solutions``), else the course's."""
    carried = Path.cwd() / "course" / "solutions"
    if carried.is_dir():
        return carried
    from .solutions import find_solutions_dir

    return find_solutions_dir()


def _earlier_namespace(lesson: str) -> dict[str, Any]:
    """The reference code of every lesson before ``lesson``, loaded into one namespace as lessons 05-09 do."""
    from .notebook import load_exercises

    folder = solutions_dir()
    namespace: dict[str, Any] = {}
    earlier = sorted({c.lesson for c in contracts.CONTRACTS.values() if c.lesson < lesson})
    for name in earlier:
        wanted = [n for c in contracts.CONTRACTS.values() if c.lesson == name for n in (*c.loaded_with, c.exercise)]
        load_exercises(folder / f"{name}.ipynb", list(dict.fromkeys(wanted)), namespace=namespace)
    return namespace


_EARLIER: dict[str, dict[str, Any]] = {}


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """Keep what loading prints (the first few thousand characters), out of the grader's output."""
    from .checks._core import _CappedOutput

    kept = io.StringIO()
    capped = _CappedOutput(kept)
    old = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = capped  # type: ignore[assignment]
    try:
        yield kept
    finally:
        sys.stdout, sys.stderr = old


def load_submitted(lesson: str, exercise: str) -> Any:
    """The learner's ``exercise``, loaded from the submission on top of the earlier lessons' reference code.

    Raises ``ExerciseLoadError``, ``LookupError`` or ``FileNotFoundError`` with a message for the learner, and
    ``TimeoutError`` when loading does not end within :data:`LOAD_TIME_LIMIT` seconds.
    """
    from .checks._core import _time_limit, _TimeLimit, preserved_state
    from .notebook import load_exercises

    if lesson not in _EARLIER:
        with _quiet():
            _EARLIER[lesson] = _earlier_namespace(lesson)
    namespace = dict(_EARLIER[lesson])
    names = [*contracts.contract(exercise).loaded_with, exercise]
    path = submission_path()
    try:
        with preserved_state(), _quiet(), _time_limit(LOAD_TIME_LIMIT):
            return load_exercises(path, names, namespace=namespace)[exercise]
    except _TimeLimit:
        raise TimeoutError(f"loading {exercise} from {path.name} took more than {LOAD_TIME_LIMIT:g} s: the cell that "
                           f"defines it runs something long (or endless) besides its definitions") from None
    except (KeyboardInterrupt, SystemExit) as exc:
        raise RuntimeError(f"loading {exercise} from {path.name} raised {type(exc).__name__}: {exc}") from None


def check(lesson: str, exercise: str, checker: str, seed: int) -> Any:
    """The checker's CheckResult on the submission's ``exercise``, its cases drawn under ``seed``; never raises."""
    from . import checks
    from .checks._core import SEED_ENV, CheckResult, Status

    try:
        implementation = load_submitted(lesson, exercise)
    except NotImplementedError:
        return CheckResult(exercise, Status.NOT_ATTEMPTED, [f"{exercise} is not written yet."])
    except LookupError as exc:
        return CheckResult(exercise, Status.NOT_ATTEMPTED, [str(exc)])
    except BaseException as exc:  # noqa: BLE001 - whatever the learner's cell raised: this exercise scores 0
        if isinstance(exc.__cause__, NotImplementedError):  # a stub outside any function raises as it is defined
            return CheckResult(exercise, Status.NOT_ATTEMPTED, [f"{exercise} is not written yet: {exc}"])
        return CheckResult(exercise, Status.ERROR, [f"{type(exc).__name__}: {exc}"])
    before = os.environ.get(SEED_ENV)
    os.environ[SEED_ENV] = str(seed)
    try:
        with _quiet():
            return getattr(checks, checker)(implementation)
    finally:
        if before is None:
            os.environ.pop(SEED_ENV, None)
        else:
            os.environ[SEED_ENV] = before


def grade(lesson: str, exercise: str, checker: str, seed: int) -> None:
    """Return if the submission's ``exercise`` passes its checker under ``seed``; else raise AssertionError."""
    if not NOTEBOOK_NAME.match(f"{lesson}.ipynb"):
        raise ValueError(f"not a lesson: {lesson!r}")
    result = check(lesson, exercise, checker, seed)
    if not result.passed:
        first = result.messages[0] if result.messages else ""
        raise AssertionError(f"{exercise}: {STATUS_LABELS[result.status.value]}\n{first}")
