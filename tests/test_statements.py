"""What the learner reads of each exercise: a short statement, then the contract box made from contracts.py.

* The statement (the markdown cell right before the exercise's cell, its
  contract box aside) keeps the task and the idea: no more than 300 visible
  words (text inside a collapsed ``<details>`` box is not visible until
  opened), and the course aims for 250.
* Right before each exercise's cell sits its collapsed box "What later lessons
  rely on", exactly as ``course_utils.contracts.box_markdown`` makes it, in the
  solution and in the exercise notebook; ``generate --check`` fails when a box
  is out of step with contracts.py.
* Every promise of a contract names the checker function or stage that
  verifies it, and that name exists: in the exercise's checker module
  (``course_utils/checks/<topic>.py``, found by its source text so that private
  helpers may be renamed), in another topic module (``topic.name``) or in the
  stage library (``stages.name``).
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import pytest

from course_utils import contracts, grading
from course_utils._schema import TAG_CONTRACT_BOX, cell_source, cell_tags, parse_cell
from course_utils.contracts import CONTRACTS, box_markdown
from course_utils.generate import exercises_defined, main

ROOT = Path(__file__).resolve().parent.parent
CHECKS = ROOT / "course_utils" / "checks"
LIMIT, AIM = 300, 250
_DETAILS = re.compile(r"<details\b.*?</details>", re.DOTALL | re.IGNORECASE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def visible_words(markdown: str) -> int:
    """Words a learner sees without opening anything: collapsed boxes and comments left out, symbols not counted."""
    shown = _COMMENT.sub(" ", _DETAILS.sub(" ", markdown))
    return sum(1 for token in shown.split() if re.search(r"[A-Za-z0-9]", token))


@functools.lru_cache(maxsize=None)
def _cells(folder: str, stem: str) -> tuple[dict, ...]:
    return tuple(json.loads((ROOT / folder / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"])


def _defined(folder: str, source: str) -> list[str]:
    """The exercises a cell defines: in a solution, around a solution region; in an exercise, the stub's definition."""
    if folder == "solutions":
        return exercises_defined(source)
    tree = parse_cell(source)
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))] if tree is not None else []


def _exercise_cell(folder: str, name: str) -> int:
    cells = _cells(folder, CONTRACTS[name].lesson)
    found = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and name in _defined(folder, cell_source(c))]
    assert found, f"{folder}/{CONTRACTS[name].lesson}: no cell defines the exercise {name}"
    return found[0]


def statement(name: str) -> str:
    """The exercise's statement: the markdown cell right before its cell, its contract box aside."""
    cells = _cells("solutions", CONTRACTS[name].lesson)
    at = _exercise_cell("solutions", name) - 1
    while at >= 0 and TAG_CONTRACT_BOX in cell_tags(cells[at]):
        at -= 1
    assert cells[at]["cell_type"] == "markdown", f"{name}: no statement right before its cell"
    return cell_source(cells[at])


def test_visible_words_leave_out_collapsed_boxes_comments_and_symbols() -> None:
    text = "Write `f(x)`: it - returns $x$.\n\n<details><summary>Hint 1</summary>\n\nmany more words\n</details>\n<!-- a b -->"
    assert visible_words(text) == 5


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_no_visible_statement_is_over_300_words(name: str) -> None:
    words = visible_words(statement(name))
    assert words <= LIMIT, (f"{name}'s statement shows {words} words (at most {LIMIT}, aim {AIM}): keep the task and "
                            f"the idea; what later lessons rely on goes into contracts.py, whose box the generator makes")


def test_the_statements_aim_for_250_words(capsys) -> None:
    """The measurement itself, printed: three quarters of the statements or more within the aim (23 of 29 today)."""
    words = {name: visible_words(statement(name)) for name in CONTRACTS}
    with capsys.disabled():
        print("\nvisible words per exercise statement:",
              ", ".join(f"{name} {n}" for name, n in sorted(words.items(), key=lambda kv: -kv[1])))
    assert sum(n <= AIM for n in words.values()) >= 3 / 4 * len(words), words


@pytest.mark.parametrize("folder", ["solutions", "notebooks"])
@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_each_exercise_has_its_contract_box_right_before_its_cell(folder: str, name: str) -> None:
    cells = _cells(folder, CONTRACTS[name].lesson)
    before = cells[_exercise_cell(folder, name) - 1]
    assert TAG_CONTRACT_BOX in cell_tags(before), f"{folder}: no contract box before {name}'s cell: run the generator"
    assert cell_source(before) == box_markdown(name), f"{folder}: {name}'s box is out of step with contracts.py"
    assert sum(TAG_CONTRACT_BOX in cell_tags(c) for c in cells) == sum(c.lesson == CONTRACTS[name].lesson
                                                                       for c in CONTRACTS.values())


def test_the_box_is_collapsed_and_keeps_must_and_may_apart() -> None:
    box = box_markdown("sample_decode")
    assert box.startswith("<details><summary><b>What the rest of this notebook relies on</b>") and box.endswith("</details>")
    must, may = box.split("**must**")[1].split("**may**")
    assert "temperature &lt;= 0 raises ValueError" in must and "torch.multinomial" in may and "multinomial" not in must
    assert box_markdown("MultiHeadAttention").startswith("<details><summary><b>What later lessons rely on</b>")
    assert "**may**" not in box_markdown("noam_lr")


def test_generate_check_fails_when_a_box_is_out_of_step(tmp_path: Path, capsys) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.course]\nrepository = "https://github.com/example/course"\n')
    for folder in ("solutions", "notebooks"):
        (tmp_path / folder).mkdir()
    solution = tmp_path / "solutions" / "06_training.ipynb"
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Lesson\n\nWrite `noam_lr`."},
                    {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                     "source": "def noam_lr(step, d_model, warmup_steps):\n    ### BEGIN SOLUTION\n    return 1.0\n"
                               "    ### END SOLUTION"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 4}
    solution.write_text(json.dumps(nb))
    assert main(["--root", str(tmp_path)]) == 0
    stamped = json.loads(solution.read_text())
    boxes = [c for c in stamped["cells"] if TAG_CONTRACT_BOX in cell_tags(c)]
    assert [cell_source(c) for c in boxes] == [box_markdown("noam_lr")]
    assert main(["--root", str(tmp_path), "--check"]) == 0
    boxes[0]["source"] = cell_source(boxes[0]).replace("step 0 gives", "step 0 may give")  # edited by hand
    solution.write_text(json.dumps(stamped))
    capsys.readouterr()
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert "out of date: solutions/06_training.ipynb" in capsys.readouterr().out
    assert main(["--root", str(tmp_path)]) == 0 and main(["--root", str(tmp_path), "--check"]) == 0


# ---------------------------------------------------------------------------
# Every promise names the stage that checks it.


@functools.lru_cache(maxsize=None)
def checker_of() -> dict[str, str]:
    """exercise -> the checker function the lessons call on it (check_x)."""
    found = {}
    for name in {c.lesson for c in CONTRACTS.values()}:
        nb = json.loads((ROOT / "solutions" / f"{name}.ipynb").read_text(encoding="utf-8"))
        found.update({e.name: e.checker for e in grading.lesson_exercises(nb, name)})
    return found


def _defines(path: Path, name: str) -> bool:
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    return re.search(rf"^\s*(def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*[:=]", text, re.MULTILINE) is not None


def resolves(exercise: str, reference: str) -> bool:
    """Whether a ``checked_by`` name exists: the stage library, another topic module, or the exercise's own."""
    from course_utils import checks
    from course_utils.checks import stages

    where, _, name = reference.rpartition(".")
    if where == "stages":
        return hasattr(stages, name)
    if where:
        return _defines(CHECKS / f"{where}.py", name)
    topic = checks._TOPICS[checker_of()[exercise]]
    return _defines(CHECKS / f"{topic}.py", name)


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_every_promise_names_the_check_that_verifies_it(name: str) -> None:
    found = CONTRACTS[name]
    assert len(found.checked_by) == len(found.promises), (
        f"{name}: give each of its {len(found.promises)} promises the checker function or stage that verifies it "
        f"(checked_by in contracts.py)")
    missing = [f"{promise!r} -> {ref!r}" for promise, refs in zip(found.promises, found.checked_by)
               for ref in [r.strip() for r in refs.split(",")] if not ref or not resolves(name, ref)]
    assert not missing, f"{name}: these promises name no existing check: {missing}"


def test_a_name_that_does_not_exist_does_not_resolve() -> None:
    assert resolves("LayerNorm", "check_layer_norm") and resolves("LayerNorm", "stages.sweep")
    assert not resolves("LayerNorm", "check_nothing_of_the_kind") and not resolves("LayerNorm", "stages.no_such_stage")
    assert resolves("PreLNEncoderLayer", "stages.encoder_layer_stages") and resolves("PreLNEncoderLayer", "layers.own_norm_problem")
    assert contracts.contract("LayerNorm").checked_by


# ---------------------------------------------------------------------------
# Demonstrations: a checker run on a deliberately wrong version is titled with that version's name.


def test_a_demonstration_is_titled_with_what_it_checked_and_publishes_no_result() -> None:
    from course_utils._schema import RESULT_MIME_TYPE
    from course_utils.checks import check_padding_mask
    from course_utils.notebook import demonstrate

    def padding_mask_on_queries(tokens, pad_id):
        return (tokens != pad_id).unsqueeze(1).unsqueeze(3)

    shown = demonstrate(check_padding_mask, padding_mask_on_queries)
    text, page = str(shown), shown._repr_html_()
    assert text.startswith("[DEMONSTRATION: check_padding_mask(padding_mask_on_queries), a deliberately wrong version]")
    assert "rejects it, as it should" in text and "FAILED" not in text and "FAILED" not in page
    assert "padding_mask_on_queries" in page and "wrong shape" in text
    assert RESULT_MIME_TYPE not in shown._repr_mimebundle_(), "a progress report must not count it"


def test_every_demonstration_in_the_lessons_goes_through_demonstrate() -> None:
    """A checker called on something its own cell defines is a demonstration: shown by `demonstrate`, tagged."""
    from course_utils._schema import TAG_CHECKER_DEMO
    from course_utils.progress import checker_calls

    found = []
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            source = cell_source(cell)
            if cell["cell_type"] != "code" or "check_" not in source:
                continue
            bare = re.findall(r"(?<![\w.])(check_\w+)\(", source)
            if "demonstrate(" in source:
                found.append(path.stem)
                assert TAG_CHECKER_DEMO in cell_tags(cell), f"{path.name}, cell {i}: tag it `{TAG_CHECKER_DEMO}`"
            elif bare and not checker_calls(source):
                raise AssertionError(f"{path.name}, cell {i}: a demonstration shown as a failing check; use "
                                     f"demonstrate({bare[0]}, the_wrong_version)")
    assert {"01_attention", "02_masks", "03_positional_encoding", "04_multi_head_attention"} <= set(found)
