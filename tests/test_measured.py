"""The course's figures and the learner's, told apart (course_utils.measured), and lesson 08 using them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from course_utils._schema import cell_source
from course_utils.measured import COURSE_CPU, COURSE_HEADER, CourseMeasurement, YourRun, course_header, fast_run_notice

LESSON_08 = Path(__file__).resolve().parent.parent / "solutions" / "08_real_data.ipynb"


def test_a_course_measurement_names_itself_its_machine_and_its_date():
    table = pd.DataFrame({"BLEU": [35.7]}, index=["paper-dropout"])
    box = CourseMeasurement("what each lever bought", table, date="26 November 2026", note="one run per row")
    markdown = box._repr_markdown_()
    lines = markdown.splitlines()
    assert lines[0] == f"> {COURSE_HEADER} · {COURSE_CPU}, 26 November 2026: not your run's figures."
    assert all(line.startswith(">") for line in lines)  # one quote, as in a lesson's Markdown cells
    assert "> What each lever bought (one run per row):" in lines
    assert ">  | BLEU |" not in lines and "> |  | BLEU |" in lines and "> | paper-dropout | 35.7 |" in lines
    assert not hasattr(box, "_repr_html_"), "one style: the Markdown quote, not an HTML box"
    assert str(box).startswith("== The course's measurement: what each lever bought ==\n(measured on a 2-core")


def test_a_course_measurement_in_lines_is_quoted_verbatim():
    markdown = CourseMeasurement("timings", ["a | b", "<b>x</b>"], date="27 November 2026")._repr_markdown_()
    assert markdown.splitlines()[-4:] == ["> ```", "> a | b", "> <b>x</b>", "> ```"]


def test_your_run_is_told_apart_and_escapes_what_it_shows():
    box = YourRun("test BLEU", ["test BLEU: 0.1", "<b>not bold</b>"], "fast-test on cpu")
    html = box._repr_html_()
    assert "Your run: test BLEU" in html and "fast-test on cpu" in html and "&lt;b&gt;not bold&lt;/b&gt;" in html
    assert "course" not in html.lower()
    assert str(box) == "== Your run: test BLEU == (fast-test on cpu)\ntest BLEU: 0.1\n<b>not bold</b>"


def test_the_fast_notice_says_the_figures_mean_nothing():
    notice = fast_run_notice("This is a fast run")
    assert "mean nothing" in str(notice) and "Your run" in str(notice) and "The course's measurement" in str(notice)
    assert "in the text wherever it says what we measured" in str(notice)  # the prose holds course figures too


def _outputs(cell: dict) -> str:
    return json.dumps(cell.get("outputs", []), ensure_ascii=False)


def test_lesson_08_shows_the_courses_figures_as_the_courses_and_says_once_that_a_fast_run_means_nothing():
    cells = json.loads(LESSON_08.read_text(encoding="utf-8"))["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    notices = [c for c in code if "mean nothing" in _outputs(c)]
    assert len(notices) == 1, "the fast run's notice, once"
    assert sum("Your run:" in _outputs(c) for c in code) >= 6
    measured = [c for c in code if "levers-15min.jsonl" in cell_source(c)]
    assert measured and all("CourseMeasurement(" in cell_source(c) for c in measured)
    assert any(f"> {COURSE_HEADER} · {COURSE_CPU}" in _outputs(c) for c in measured)
    assert not any("The course&#x27;s measurement:" in _outputs(c) for c in code), "one style: no HTML box"
    quotes = [c for c in cells if c["cell_type"] == "markdown" and COURSE_HEADER in cell_source(c)]
    assert len(quotes) >= 2 and all(cell_source(c).startswith(f"> {COURSE_HEADER}") or f"\n> {COURSE_HEADER}" in cell_source(c)
                                    for c in quotes)
    for cell in quotes:  # the header CourseMeasurement writes: the same machine, the same words
        header = next(line for line in cell_source(cell).splitlines() if COURSE_HEADER in line)
        assert header.startswith(f"> {course_header('')[:-len(': not your run' + chr(39) + 's figures.')]}")
        assert header.endswith(": not your run's figures.")
