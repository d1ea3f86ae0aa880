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
    Crash,
    Progress,
    Row,
    blame,
    checker_calls,
    crashes,
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


def check_quadrupling(fn):
    return run_check("quadruple", _times(4), fn)


def check_quintupling(fn):
    return run_check("quintuple", _times(5), fn)


def check_sextupling(fn):
    return run_check("sextuple", _times(6), fn)
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


def parse_table(out: str) -> dict[tuple[str, str], list[str]]:
    """The report's table: (notebook, exercise) -> [status, message lines...]."""
    table: dict[tuple[str, str], list[str]] = {}
    for line in out.split("\n\nCells that raised an error:")[0].splitlines():
        if line.startswith("0"):
            notebook_, exercise, status = line.split(None, 2)
            row = table[(notebook_, exercise)] = [status]
        elif line.startswith("    "):
            row.append(line.strip())
    return table


def parse_crashes(out: str) -> dict[str, list[str]]:
    """The report's list of the cells that raised: notebook -> lines."""
    if "\n\nCells that raised an error:\n" not in out:
        return {}
    listed: dict[str, list[str]] = {}
    for line in out.split("\n\nCells that raised an error:\n")[1].split("\n\n")[0].splitlines():
        if line.startswith("    "):
            listed[list(listed)[-1]].append(line.strip())
        else:
            listed[line.strip()] = []
    return listed


@pytest.mark.integration
def test_report_reads_each_outcome(run) -> None:
    code, out, _ = run
    assert code == 0
    table = parse_table(out)
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
    assert parse_crashes(out) == {
        "02_second": [
            "code cell 3: ZeroDivisionError: division by zero (this notebook's own code; raised at line 1: `1 / 0`)",
            "code cell 4: NameError: name 'triple' is not defined (this notebook's own code; "
            "raised at line 1: `check_tripling(triple)`)",
        ]
    }, "every cell that raised is listed, even when no exercise is to blame"
    assert out.rstrip().endswith(
        "2 of 6 exercises passed (1 failed, 1 not attempted, 1 error, 1 not reached); "
        "cells that raised an error: 02_second (code cells 3, 4)"
    )


@pytest.mark.integration
def test_the_learners_files_are_untouched(run, learner: Path) -> None:
    _, _, before = run
    assert snapshot(learner) == before
    assert not (learner / "written_by_the_run.txt").exists()


# ---------------------------------------------------------------------------
# Checkers that passed, then a crash in the same code later on.
# Each exercise passes its checker (called on 3.0) and crashes on an int, in
# three ways: an error output in a later cell, a note from `with requires(...)`
# (no error output), and a later lesson that loads it and crashes inside it.


def crashing_notebook() -> nbformat.NotebookNode:
    def exercise(name: str, factor: int) -> str:
        return f"def {name}(x):\n    return {factor} * x if isinstance(x, float) else x.size"

    return notebook(
        new_code_cell(
            "from fake_checks import check_doubling, check_quadrupling, check_quintupling, check_sextupling\n"
            "from course_utils.notebook import requires"
        ),
        new_code_cell(exercise("quadruple", 4)),
        new_code_cell("check_quadrupling(quadruple)"),
        new_code_cell(exercise("quintuple", 5)),
        new_code_cell("check_quintupling(quintuple)"),
        new_code_cell(exercise("sextuple", 6)),
        new_code_cell("check_sextupling(sextuple)"),
        new_code_cell("def double(x):\n    return 2 * x"),
        new_code_cell("check_doubling(double)"),
        new_code_cell("def show(x):\n    return quadruple(x)\n\n\nshow(8)"),  # 10: an error output, inside quadruple
        new_code_cell('with requires("quintuple"):\n    print(quintuple(8))'),  # 11: a note, inside quintuple
        new_code_cell('{}["missing"]'),  # 12: nobody's exercise
    )


def loading_notebook() -> nbformat.NotebookNode:
    return notebook(
        new_code_cell(
            "from course_utils.notebook import load_exercises\nfrom fake_checks import check_doubling\n"
            'sextuple = load_exercises("01_crash.ipynb", ["sextuple"])["sextuple"]'
        ),
        new_code_cell("def double(x):\n    return 2 * x"),
        new_code_cell("check_doubling(double)"),
        new_code_cell("sextuple(7)"),  # 4: inside lesson 01's sextuple
    )


@pytest.fixture(scope="module")
def crashed(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("crashing") / "notebooks"
    folder.mkdir()
    (folder / "fake_checks.py").write_text(FAKE_CHECKS)
    nbformat.write(crashing_notebook(), str(folder / "01_crash.ipynb"))
    nbformat.write(loading_notebook(), str(folder / "02_later.ipynb"))
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main([str(folder), "--timeout", "60"]) == 0, "the exit status stays 0"
    return buffer.getvalue()


@pytest.mark.integration
def test_a_passed_exercise_whose_code_crashes_later_is_not_passed(crashed: str) -> None:
    table = parse_table(crashed)
    assert table[("01_crash", "quadruple")] == [
        ERROR,
        "its checker passed, but code cell 10 of 01_crash crashed inside it: AttributeError: 'int' object has no "
        "attribute 'size' (raised in `quadruple`, line 2: `return 4 * x if isinstance(x, float) else x.size`)",
    ], "an error output whose traceback goes through the exercise"
    assert table[("01_crash", "quintuple")] == [
        ERROR,
        "its checker passed, but code cell 11 of 01_crash crashed inside it: AttributeError: 'int' object has no "
        "attribute 'size' (raised in `quintuple`, line 2: `return 5 * x if isinstance(x, float) else x.size`)",
    ], "a crash that `with requires(...)` turned into a note"
    assert table[("01_crash", "sextuple")] == [
        ERROR,
        "its checker passed, but code cell 4 of 02_later crashed inside it: AttributeError: 'int' object has no "
        "attribute 'size' (raised in `sextuple`, line 2: `return 6 * x if isinstance(x, float) else x.size`)",
    ], "a crash in a later lesson, inside the code it loaded from this one"
    assert table[("01_crash", "double")] == [PASSED] and table[("02_later", "double")] == [PASSED]


@pytest.mark.integration
def test_the_report_lists_every_cell_that_raised_and_whose_code_it_was(crashed: str) -> None:
    assert parse_crashes(crashed) == {
        "01_crash": [
            "code cell 10: AttributeError: 'int' object has no attribute 'size' (your `quadruple`; "
            "raised in `quadruple`, line 2: `return 4 * x if isinstance(x, float) else x.size`)",
            "code cell 11: AttributeError: 'int' object has no attribute 'size' (your `quintuple`; "
            "raised in `quintuple`, line 2: `return 5 * x if isinstance(x, float) else x.size`)",
            "code cell 12: KeyError: 'missing' (this notebook's own code; raised at line 1: `{}[\"missing\"]`)",
        ],
        "02_later": [
            "code cell 4: AttributeError: 'int' object has no attribute 'size' (your `sextuple` from 01_crash; "
            "raised in `sextuple`, line 2: `return 6 * x if isinstance(x, float) else x.size`)",
        ],
    }
    assert crashed.rstrip().endswith(
        "2 of 5 exercises passed (3 error); cells that raised an error: 01_crash (code cells 10, 11, 12), 02_later (code cell 4)"
    )


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


def _error_output(*entries: str, ename: str = "RuntimeError", evalue: str = "shapes do not match") -> dict:
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [*entries, f"{ename}: {evalue}"]}


def _executed(*outputs: list) -> dict:
    return {"cells": [{"cell_type": "markdown", "source": "# x"}]
            + [{"cell_type": "code", "source": "...", "execution_count": i + 1, "outputs": o} for i, o in enumerate(outputs)]}


def test_whose_code_raised_is_read_from_the_traceback_frames() -> None:
    """Frames of this notebook's cells and of loaded cells name functions and methods; library frames do not count."""
    output = _error_output(
        "\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[29]\x1b[39m\x1b[32m, line 2\x1b[39m\n\x1b[32m----> \x1b[39m\x1b[32m2\x1b[39m out = translate(model)\n",
        "Cell In[12], line 4, in greedy_decode(model, src)\n      3 memory = model.encode(src)\n----> 4 return model.decode(memory)\n",
        "File <Copy of 05_transformer.ipynb, code cell 9>:7, in Transformer.decode(self, memory)\n----> 7 return self.layers(memory)\n",
        "File /site-packages/torch/nn/modules/transformer.py:88, in Transformer.forward(self, x)\n----> 88 raise RuntimeError\n",
    )
    (crash,) = crashes("07_inference", _executed([], [output]), {"greedy_decode", "Transformer", "beam_search"})
    assert crash == Crash(
        "07_inference", 2, "RuntimeError: shapes do not match",
        [("greedy_decode", "07_inference"), ("Transformer", "05_transformer")],
        "raised in `Transformer.decode`, line 7: `return self.layers(memory)`",
    ), "torch's own Transformer.forward is not the learner's Transformer"


def test_only_the_last_of_chained_exceptions_counts_and_ipython_7_frames_are_read() -> None:
    output = _error_output(
        "<ipython-input-3-5ac1d8e2> in beam_search(model)\n----> 2     raise KeyError(1)\n",
        "\nDuring handling of the above exception, another exception occurred:\n",
        "<ipython-input-4-77a0c2f1> in <module>\n----> 1 1 / 0\n",
        ename="ZeroDivisionError", evalue="division by zero",
    )
    (crash,) = crashes("07_inference", _executed([output]), {"beam_search"})
    assert crash.exercises == [] and crash.where == "raised at line 1: `1 / 0`"
    assert str(crash) == "code cell 1: ZeroDivisionError: division by zero (this notebook's own code; raised at line 1: `1 / 0`)"


def test_an_unfinished_exercise_is_named_as_such() -> None:
    record = {"error": "NotImplementedError", "exercises": ["greedy_decode"], "notebooks": {}, "function": "",
              "line": "", "unfinished": True, "note": "This cell uses `greedy_decode`. Finish that exercise first, ..."}
    display = {"output_type": "display_data", "metadata": {}, "data": {"text/plain": record["note"], _schema.CRASH_MIME_TYPE: record}}
    later = {"error": "NameError: name 'hypotheses' is not defined", "exercises": [], "notebooks": {}, "function": "",
             "line": "", "unfinished": False, "because": "`greedy_decode` is not done yet", "note": "..."}
    later_display = {"output_type": "display_data", "metadata": {}, "data": {"text/plain": "...", _schema.CRASH_MIME_TYPE: later}}
    crash, after = crashes("06_training", _executed([], [display], [later_display]), set())
    assert str(crash) == "code cell 2: NotImplementedError (`greedy_decode` is not done yet)"
    stub = _error_output("Cell In[5], line 3\n      2 # YOUR CODE HERE\n----> 3 raise NotImplementedError()\n",
                         ename="NotImplementedError", evalue="")
    (top_level,) = crashes("06_training", _executed([stub]), set())
    assert str(top_level) == (
        "code cell 1: NotImplementedError (an exercise not done yet; raised at line 3: `raise NotImplementedError()`)"
    ), "an exercise region outside any function raises in the cell itself"
    assert str(after) == (
        "code cell 3: NameError: name 'hypotheses' is not defined (an earlier cell stopped: `greedy_decode` is not done yet)"
    )


def test_only_passed_rows_turn_into_errors_and_several_crashes_are_counted() -> None:
    rows = [Row("06_t", "greedy_decode", PASSED), Row("06_t", "noam_lr", FAILED, "Wrong."), Row("07_i", "greedy_decode", PASSED)]
    found = [
        Crash("07_i", 5, "IndexError: out of range", [("greedy_decode", "06_t"), ("noam_lr", "06_t")]),
        Crash("07_i", 8, "IndexError: out of range", [("greedy_decode", "06_t")]),
    ]
    blame(rows, found)
    assert rows == [
        Row("06_t", "greedy_decode", ERROR, "its checker passed, but code cell 5 of 07_i crashed inside it: IndexError: out of range"
            "\n(and 1 more cell: see the cells listed below)"),
        Row("06_t", "noam_lr", FAILED, "Wrong."),  # already not passed: its own message stays
        Row("07_i", "greedy_decode", PASSED),  # the code that crashed was lesson 06's
    ]


def test_the_table_and_the_html_list_the_cells_that_raised_per_notebook() -> None:
    progress = Progress(
        [Row("01_a", "x", PASSED)],
        [Crash("01_a", 4, "KeyError: 'k'"), Crash("02_b", 1, "ValueError: <bad>", [("x", "01_a")], "raised in `x`, line 2: `f()`")],
    )
    assert str(progress).split("\n\n")[1:] == [
        "Cells that raised an error:\n"
        "  01_a\n"
        "    code cell 4: KeyError: 'k' (this notebook's own code)\n"
        "  02_b\n"
        "    code cell 1: ValueError: <bad> (your `x` from 01_a; raised in `x`, line 2: `f()`)",
        "1 of 1 exercise passed; cells that raised an error: 01_a (code cell 4), 02_b (code cell 1)",
    ]
    page = progress._repr_html_()
    assert "<li>02_b<ul><li>code cell 1: ValueError: &lt;bad&gt; (your `x` from 01_a;" in page
    assert "cells that raised an error: 01_a (code cell 4), 02_b (code cell 1)" in page


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
