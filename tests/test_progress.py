"""The progress report (course_utils.progress).

The integration test runs two small learner notebooks in real kernels: one
with a passed, a failed and a not-attempted exercise (plus a demonstration
check that must not count), one that loads code from the first, errors midway
and then kills its kernel. Their checkers are a tiny module written next to
them that returns real CheckResults from the real engine (``run_check``), so
the test does not depend on the state of the course's own checkers. The
checkers' names differ from the exercises' (``check_doubling(double)``), as
``check_causal_mask(make_causal_mask)`` does in the course: the report names
the exercise.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from course_utils import _schema
from course_utils.progress import (
    ERROR,
    FAILED,
    NOT_ATTEMPTED,
    NOT_REACHED,
    PASSED,
    Progress,
    Row,
    checker_calls,
    exercises,
    grade,
    kernel_environment,
    main,
    show,
)

FAKE_CHECKS = '''\
"""Three checkers built on the real engine."""
from course_utils.checks._core import run_check


def _times(factor):
    def body(check, fn):
        check.callable_(fn, "fn")
        out = check.call(fn, 3.0)
        check.require(out == factor * 3.0, f"fn(3.0) should be {factor * 3.0}, got {out!r}.\\nMultiply, do not add.")
        check.ok(f"multiplies by {factor}")
    return body


def check_doubling(fn):
    return run_check("double", _times(2), fn)


def check_tripling(fn):
    return run_check("triple", _times(3), fn)


def check_halving(fn):
    return run_check("halve", _times(0.5), fn)
'''


def notebook(*cells) -> nbformat.NotebookNode:
    nb = new_notebook(cells=list(cells))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for i, cell in enumerate(nb.cells):
        cell.id = f"c{i}"
    return nb


STALE = new_output(
    "display_data",
    data={"text/plain": "[PASSED] halve", _schema.RESULT_MIME_TYPE: {"exercise": "halve", "status": "passed", "messages": [], "checked": []}},
)


def first_notebook() -> nbformat.NotebookNode:
    stale = new_code_cell("check_halving(halve)")
    stale.outputs = [STALE]  # left over from an earlier session: must not be believed
    stale.execution_count = 9
    return notebook(
        new_markdown_cell("# First lesson"),
        new_code_cell("import os\nfrom fake_checks import check_doubling, check_halving, check_tripling"),
        # passes only when the report sets COURSE_FAST=1 in the kernel's environment
        new_code_cell('def double(x):\n    return 2 * x if os.environ.get("COURSE_FAST") == "1" else x'),
        new_code_cell("check_doubling(double)"),
        new_code_cell("def triple(x):\n    return x + x"),
        new_code_cell("check_tripling(triple)"),
        new_code_cell("def halve(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"),
        stale,
        new_code_cell("def double_wrong(x):\n    return x\n\n\ncheck_doubling(double_wrong)"),  # a demonstration
        new_code_cell('open("written_by_the_run.txt", "w").write("x")'),
    )


def second_notebook() -> nbformat.NotebookNode:
    return notebook(
        new_code_cell(
            "from course_utils.notebook import load_exercises\nfrom fake_checks import check_doubling, check_halving, check_tripling\n"
            'double = load_exercises("01_first.ipynb", ["double"])["double"]'
        ),
        new_code_cell("check_doubling(double)"),
        new_code_cell("1 / 0"),
        new_code_cell("check_tripling(triple)"),  # not loaded into this notebook
        new_code_cell("import os\nos._exit(1)"),
        new_code_cell("check_halving(halve)"),
    )


@pytest.fixture(scope="module")
def learner(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("learner") / "notebooks"
    folder.mkdir()
    (folder / "fake_checks.py").write_text(FAKE_CHECKS)
    nbformat.write(first_notebook(), str(folder / "01_first.ipynb"))
    nbformat.write(second_notebook(), str(folder / "02_second.ipynb"))
    nbformat.write(notebook(new_code_cell("x = 1")), str(folder / "03_no_exercises.ipynb"))
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run(learner: Path):
    """Run the command once (it starts real kernels): its exit code, what it printed, the files before."""
    before = snapshot(learner)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main([str(learner), "--timeout", "60", "--fast"])
    return code, buffer.getvalue(), before


@pytest.mark.integration
def test_report_reads_each_outcome(run) -> None:
    code, out, _ = run
    assert code == 0
    table: dict[tuple[str, str], list[str]] = {}  # (notebook, exercise) -> [status, message lines...]
    for line in out.splitlines():
        if line.startswith("0"):
            notebook_, exercise, status = line.split(None, 2)
            row = table[(notebook_, exercise)] = [status]
        elif line.startswith("    "):
            row.append(line.strip())
    assert table[("01_first", "double")] == [PASSED], "the exercise's name, not the checker's (doubling)"
    assert table[("01_first", "triple")] == [FAILED, "fn(3.0) should be 9.0, got 6.0.", "Multiply, do not add."], (
        "the checker's first message, in full, beneath its row"
    )
    assert table[("01_first", "halve")] == [NOT_ATTEMPTED], "the stale output is not believed"
    assert table[("02_second", "double")] == [PASSED], "later notebooks load earlier ones from the copy"
    assert table[("02_second", "triple")] == [ERROR, "NameError: name 'triple' is not defined"]
    assert table[("02_second", "halve")][0] == NOT_REACHED
    assert table[("02_second", "halve")][1].startswith("the notebook stopped before this cell ran (DeadKernelError")
    assert len(table) == 6, "the demonstration check and the notebook without exercises add no rows"
    assert out.rstrip().endswith("2 of 6 exercises passed (1 failed, 1 not attempted, 1 error, 1 not reached)")


@pytest.mark.integration
def test_the_learners_files_are_untouched(run, learner: Path) -> None:
    _, _, before = run
    assert snapshot(learner) == before
    assert not (learner / "written_by_the_run.txt").exists()


# ---------------------------------------------------------------------------
# Reading notebooks without running them


def test_checker_calls_are_found_in_the_source() -> None:
    assert checker_calls("check_noam_lr(noam_lr)") == ["noam_lr"]
    assert checker_calls("from course_utils import checks\nchecks.check_causal_mask(make_causal_mask)") == ["make_causal_mask"], (
        "named as the learner defines it (the checker's argument)"
    )
    assert checker_calls("check_positional_encoding_module(PositionalEncoding)") == ["PositionalEncoding"]
    assert checker_calls("check_transformer(models.Transformer)") == ["transformer"], "not a plain name: the checker's"
    assert checker_calls("%time check_a(a)\nx = check_b(b)") == ["b"], "magic lines are blanked"
    assert checker_calls("from course_utils.checks import check_a\n") == []
    assert checker_calls("def bad(x):\n    return x\n\ncheck_a(bad)") == [], "a demonstration on a local definition"
    assert checker_calls("check_causal_mask(make_causal_mask) +") == ["make_causal_mask"], "a pattern when the cell does not parse"
    assert checker_calls("check_a(x.y) +") == ["a"]


def test_exercises_skip_setup_and_demo_cells() -> None:
    nb = {
        "cells": [
            {"cell_type": "code", "metadata": {"tags": [_schema.TAG_COLAB_SETUP]}, "source": "check_x(x)"},
            {"cell_type": "markdown", "metadata": {}, "source": "check_y(y)"},
            {"cell_type": "code", "metadata": {"tags": [_schema.TAG_CHECKER_DEMO]}, "source": "check_z(wrong)"},
            {"cell_type": "code", "metadata": {}, "source": ["check_z(", "z)"]},
        ]
    }
    assert exercises(nb) == [(3, ["z"])]


def test_grade_pairs_results_with_calls_and_counts_each_exercise_once() -> None:
    def result(name, status, message=""):
        data = {"text/plain": "...", _schema.RESULT_MIME_TYPE: {"exercise": name, "status": status, "messages": [message] if message else []}}
        return {"output_type": "display_data", "data": data, "metadata": {}}

    nb = {
        "cells": [
            {"cell_type": "code", "metadata": {}, "source": "check_a(a)", "execution_count": 1, "outputs": [result("a", FAILED, "Wrong.\nDetails.")]},
            {"cell_type": "code", "metadata": {}, "source": "check_a(a)", "execution_count": 2, "outputs": [result("a", PASSED)]},
            {"cell_type": "code", "metadata": {}, "source": "check_b(b)", "execution_count": 3, "outputs": []},
            {"cell_type": "code", "metadata": {}, "source": "check_c(c)", "execution_count": None, "outputs": []},
            {"cell_type": "code", "metadata": {}, "source": "check_d(fn)", "execution_count": 4, "outputs": [result("delta", PASSED)]},
        ]
    }
    assert grade("01_x", nb) == [
        Row("01_x", "a", FAILED, "Wrong.\nDetails."),
        Row("01_x", "b", ERROR, "the checker cell ran but showed no result (is the check the cell's last line?)"),
        Row("01_x", "c", NOT_REACHED, "the notebook stopped before this cell ran"),
        Row("01_x", "delta", PASSED, ""),  # the name the checker gives the exercise wins
    ]


def test_the_table_shows_each_failures_first_message_beneath_its_row() -> None:
    progress = Progress([Row("01_a", "make_causal_mask", FAILED, "Row 0 may see position 1.\nUse tril, not triu."), Row("01_a", "x", PASSED)])
    assert str(progress).splitlines()[:5] == [
        "notebook  exercise          status",
        "--------  ----------------  ------",
        "01_a      make_causal_mask  failed",
        "    Row 0 may see position 1.",
        "    Use tril, not triu.",
    ]


def test_fast_mode_sets_course_fast_in_the_kernels_only_when_asked(monkeypatch) -> None:
    monkeypatch.delenv("COURSE_FAST", raising=False)
    assert kernel_environment(fast=True)["COURSE_FAST"] == "1"
    assert "COURSE_FAST" not in kernel_environment(fast=False), "without --fast: your environment as it is"
    assert kernel_environment()[_schema.PROGRESS_ENV] == "1"


def test_help_documents_the_fast_mode(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--fast" in text and "COURSE_FAST=1" in text and "first message" in text


# ---------------------------------------------------------------------------
# Showing the report in a notebook


PROGRESS = Progress([Row("01_a", "x", PASSED), Row("01_a", "y", FAILED, "Wrong <shape>."), Row("02_b", "z", NOT_REACHED, "")])


def test_html_table_is_coloured_and_escaped() -> None:
    page = PROGRESS._repr_html_()
    assert "#e8f5e9" in page and "#ffebee" in page
    assert "Wrong &lt;shape&gt;." in page
    assert "1 of 3 exercises passed (1 failed, 1 not reached)" in page


def test_bar_chart() -> None:
    import matplotlib

    matplotlib.use("Agg")
    ax = PROGRESS.plot()
    assert ax.get_title() == PROGRESS.summary()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [PASSED, FAILED, NOT_REACHED]


def test_show_displays_the_report(monkeypatch, capsys, tmp_path) -> None:
    import course_utils.progress as progress

    monkeypatch.delenv(_schema.PROGRESS_ENV, raising=False)
    monkeypatch.setattr(progress, "report", lambda folder, timeout, fast: PROGRESS)
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    assert show(tmp_path) is None
    assert shown == [PROGRESS]


def test_show_does_not_run_inside_a_progress_run(monkeypatch, capsys) -> None:
    monkeypatch.setenv(_schema.PROGRESS_ENV, "1")
    show()
    assert "does not run inside a progress run" in capsys.readouterr().out
