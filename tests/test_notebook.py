"""Helpers the lesson notebooks use: requires, pick_device, load_exercises."""

from __future__ import annotations

import json

import nbformat
import pytest
import torch

from course_utils.notebook import load_exercises, pick_device, requires


def test_requires_turns_an_unfinished_exercise_into_a_note(capsys):
    def attention(*args):
        raise NotImplementedError()

    with requires("scaled_dot_product_attention"):
        attention(1)
        raise AssertionError("the block must stop at the first unfinished call")
    out = capsys.readouterr().out
    assert "`scaled_dot_product_attention`" in out and "Finish that exercise first" in out


def test_requires_reports_a_bug_in_one_line(capsys):
    with requires("make_causal_mask"):
        raise ValueError("shapes do not match\nsecond line")
    out = capsys.readouterr().out
    assert "ValueError: shapes do not match" in out and "second line" not in out
    assert "checker" in out


def test_requires_is_silent_when_all_is_well(capsys):
    with requires("x"):
        value = 1 + 1
    assert value == 2 and capsys.readouterr().out == ""


def test_pick_device_says_which(capsys):
    device = pick_device()
    assert isinstance(device, torch.device)
    assert capsys.readouterr().out.strip() == f"Using device: {device.type}"
    pick_device(verbose=False)
    assert capsys.readouterr().out == ""


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, str(path))
    return path


def test_load_exercises_runs_only_imports_and_definitions(tmp_path):
    first = _notebook(
        tmp_path / "01.ipynb",
        "import math\n%matplotlib inline",
        "def scale(x):\n    return x / math.sqrt(4)\n\nprint('side effect')\nraise RuntimeError('must not run')",
        "scale(8)  # a demo cell, not run",
    )
    second = _notebook(
        tmp_path / "02.ipynb",
        "class Doubler:\n    def __call__(self, x):\n        return 2 * scale(x)",
        "FACTOR = 3",
    )
    ns: dict = {}
    (scale,) = load_exercises(first, ["scale"], namespace=ns).values()
    found = load_exercises(second, ["Doubler", "FACTOR"], namespace=ns)
    assert scale(8) == 4.0
    assert found["Doubler"]()(8) == 8.0, "a class from one notebook sees a function from another"
    assert found["FACTOR"] == 3


def test_load_exercises_loads_another_exercise_of_the_lesson_that_a_loaded_cell_uses(tmp_path):
    """Lesson 05 invites layers built on the lesson's own LayerNorm; later lessons load only the layers."""
    lesson = _notebook(
        tmp_path / "05.ipynb",
        "import torch\nfrom torch import nn",
        "class LayerNorm(nn.Module):\n    def forward(self, x):\n        return x - x.mean(-1, keepdim=True)",
        "class FeedForward(nn.Module):\n    def forward(self, x):\n        return x",
        "class EncoderLayer(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.norm1 = LayerNorm()",
        "def not_an_exercise():\n    raise RuntimeError('never loaded')\nnot_an_exercise()",
    )
    ns: dict = {}
    (layer,) = load_exercises(lesson, ["EncoderLayer"], namespace=ns).values()
    assert type(layer().norm1).__name__ == "LayerNorm"
    assert "FeedForward" not in ns and "not_an_exercise" not in ns, "only what the loaded cells use"


def test_load_exercises_explains_missing_notebooks_and_names(tmp_path):
    with pytest.raises(FileNotFoundError, match="keep the course notebooks together"):
        load_exercises(tmp_path / "99_no_such_lesson.ipynb", ["scaled_dot_product_attention"])  # no reference either
    nb = _notebook(tmp_path / "01.ipynb", "def other():\n    pass")
    with pytest.raises(LookupError, match="does not define scaled_dot_product_attention"):
        load_exercises(nb, ["scaled_dot_product_attention"])


def test_load_exercises_reads_sources_stored_as_one_string_and_names_a_broken_file(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("def scale(x):\n    return 2 * x")])
    path = tmp_path / "01.ipynb"
    text = json.dumps(nb)  # each source as one string, as Jupyter may store it (nbformat.writes splits lines)
    path.write_text(text)
    assert load_exercises(path, ["scale"])["scale"](3) == 6
    path.write_text(text[: len(text) // 2])  # a save cut short
    with pytest.raises(ValueError, match="01.ipynb is not a readable notebook"):
        load_exercises(path, ["scale"])


def test_requires_asks_to_run_the_cells_above_on_a_name_error(capsys):
    with requires("encode"):
        undefined_vocabulary  # noqa: F821
    out = capsys.readouterr().out
    assert "undefined_vocabulary" in out and "Run the cells above" in out


def test_load_exercises_does_not_inherit_this_modules_future_imports(tmp_path):
    """A dataclass loaded from a notebook must work (annotations are not turned into strings)."""
    nb = _notebook(
        tmp_path / "06.ipynb",
        "from dataclasses import dataclass",
        "@dataclass\nclass TrainConfig:\n    d_model: int = 128",
    )
    (config,) = load_exercises(nb, ["TrainConfig"]).values()
    assert config().d_model == 128


# ---------------------------------------------------------------------------
# requires() knows what each exercise's checker last said in this kernel.
# The results below come from the real engine (run_check), about made-up
# exercises, so the tests do not depend on the course's own checkers.


def _record(exercise, implementation, passed=True, crash=False):
    """Run a real checker on ``implementation``: PASSED, FAILED or (crash) ERROR."""
    from course_utils.checks._core import run_check

    def body(check, impl):
        if crash:
            check.call(lambda: 1 / 0)
        check.require(passed, "Your output is transposed.\nSwap the last two dimensions.")
        check.ok("right values")

    return run_check(exercise, body, implementation)


@pytest.fixture
def contract(monkeypatch):
    """A contract for a made-up class exercise ``Heads`` and a made-up function ``make_schedule``."""
    from course_utils import contracts

    heads = contracts.Contract("Heads", "04_multi_head_attention", "class", "Heads()", attributes=("num_heads", "d_k"))
    schedule = contracts.Contract("make_schedule", "06_training", "function", "make_schedule(opt)", methods=("get_last_lr", "state_dict"))
    monkeypatch.setitem(contracts.CONTRACTS, "Heads", heads)
    monkeypatch.setitem(contracts.CONTRACTS, "make_schedule", schedule)


def test_requires_warns_before_running_when_the_exercise_last_failed(capsys):
    def halve(x):
        return x

    assert _record("halve", halve, passed=False).status == "failed"
    ran = []
    with requires("halve"):
        print("the block runs")
        ran.append(halve(2))
    out = capsys.readouterr().out
    assert ran == [2], "a warning, not a refusal"
    assert out.index("Warning") < out.index("the block runs"), "the warning comes before the cell's output"
    assert "`halve` FAILED its checker" in out and "Your output is transposed." in out
    assert "Swap" not in out, "only the first line of the checker's message"


def test_requires_warns_when_the_checker_ended_in_an_error(capsys):
    def third(x):
        return x / 3

    assert _record("third", third, crash=True).status == "error"
    with requires("third"):
        pass
    assert "`third` ended in an ERROR its checker" in capsys.readouterr().out


def test_requires_does_not_warn_about_another_object_or_a_passed_check(capsys):
    def quarter(x):
        return x / 4

    def wrong_quarter(x):  # a lesson shows what a failure looks like
        return x

    _record("quarter", quarter, passed=True)
    with requires("quarter"):
        pass
    _record("quarter", wrong_quarter, passed=False)
    with requires("quarter"):
        pass
    assert capsys.readouterr().out == "", "the failing check was about another object than the one this cell uses"


def test_a_demonstration_does_not_hide_the_learners_own_failure(capsys):
    def eighth(x):  # the learner's, wrong
        return x / 4

    def wrong_eighth(x):  # the lesson's demonstration of a failure, checked after the learner's cell
        return x

    _record("eighth", eighth, passed=False)
    _record("eighth", wrong_eighth, passed=False)
    with requires("eighth"):
        pass
    assert "`eighth` FAILED its checker" in capsys.readouterr().out


def test_attribute_error_after_a_green_checker_names_the_expected_attribute(capsys, contract):
    class Heads:  # stores its head count under another name
        def __init__(self):
            self.h = 2

    _record("Heads", Heads, passed=True)
    with requires("Heads"):
        Heads().num_heads
    out = capsys.readouterr().out
    assert "`num_heads` of your `Heads`" in out and "`num_heads`, `d_k`" in out
    assert "04_multi_head_attention" in out
    assert "passed its checker, so the checker should have caught this" in out
    assert "Run the cells above" not in out and "Run its checker" not in out


def test_attribute_error_on_what_a_function_exercise_returns(capsys, contract):
    class MyScheduler:  # a hand-written scheduler without get_last_lr
        def step(self):
            pass

    def make_schedule(optimizer):
        return MyScheduler()

    with requires("make_schedule"):
        make_schedule(None).get_last_lr()
    out = capsys.readouterr().out
    assert "`get_last_lr` of your `make_schedule`'s result" in out and "`get_last_lr`, `state_dict`" in out
    assert "Run its checker cell: it checks every name the course relies on." in out, "never checked: run it"


def test_attribute_error_inside_the_learners_own_code_shows_their_line(capsys, contract):
    class Heads:
        def __init__(self):
            self.num_heads = 2

        def forward(self):
            return self.d_model  # never set: the learner's own bug

    with requires("Heads"):
        Heads().forward()
    out = capsys.readouterr().out
    assert "raised AttributeError: 'Heads' object has no attribute 'd_model'" in out
    assert "return self.d_model" in out, "the learner's source line"
    assert "The course relies on these names" not in out


def test_name_error_for_the_exercise_itself_asks_to_run_its_cell(capsys):
    with requires("not_defined_anywhere"):
        not_defined_anywhere(1)  # noqa: F821
    out = capsys.readouterr().out
    assert "`not_defined_anywhere`, which is not defined yet. Run its exercise cell" in out


def test_name_error_inside_the_learners_code_does_not_ask_to_run_cells(capsys):
    def scale(x):
        return x / math_sqrt(4)  # noqa: F821 - a typo inside the exercise

    with requires("scale"):
        scale(8)
    out = capsys.readouterr().out
    assert "Your `scale` uses `math_sqrt`, which is not defined" in out and "x / math_sqrt(4)" in out
    assert "Run the cells above" not in out and "Run All Above" not in out


def test_a_bug_after_a_green_checker_says_the_checker_missed_it(capsys):
    def tenth(x):
        if x > 100:
            raise IndexError("index 7 is out of bounds")
        return x / 10

    _record("tenth", tenth, passed=True)
    with requires("tenth"):
        tenth(1000)
    out = capsys.readouterr().out
    assert "raised IndexError: index 7 is out of bounds" in out and 'raise IndexError("index 7' in out
    assert "passed its checker, so the checker should have caught this" in out


def test_unfinished_exercise_is_named_even_among_several(capsys):
    def done(x):
        return x

    def todo(x):
        raise NotImplementedError()

    with requires("done", "todo"):
        todo(done(1))
    assert "This cell uses `todo`. Finish that exercise first" in capsys.readouterr().out


def test_the_course_case_a_head_count_stored_as_h(capsys):
    """Lesson 04: a MultiHeadAttention that keeps its head count as `self.h`, green, then a demo reads `num_heads`."""
    from course_utils.contracts import contract

    assert "num_heads" in contract("MultiHeadAttention").attributes

    class MultiHeadAttention(torch.nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.h = num_heads

    def torch_copy(mha):  # like the lesson's helper
        return torch.nn.MultiheadAttention(8, mha.num_heads, batch_first=True)

    _record("MultiHeadAttention", MultiHeadAttention, passed=True)
    with requires("MultiHeadAttention"):
        torch_copy(MultiHeadAttention(8, 2))
    out = capsys.readouterr().out
    assert "This cell uses `num_heads` of your `MultiHeadAttention`, which has no such attribute." in out
    assert "`num_heads`, `d_k`, `attention_weights`" in out
    assert "passed its checker, so the checker should have caught this" in out
    assert "Run its checker" not in out


# ---------------------------------------------------------------------------
# A name left undefined by an earlier block that stopped at an exercise.
# The cells run as a notebook runs them: compiled under a filename whose source
# linecache holds (as IPython registers each cell), in one shared namespace.


@pytest.fixture(autouse=True)
def fresh_kernel(monkeypatch):
    """Each test starts with no memory of blocks that stopped in earlier tests."""
    from course_utils import notebook

    monkeypatch.setattr(notebook, "_stopped_blocks", {})


def run_cell(source: str, namespace: dict, number: list = [0]) -> None:  # noqa: B006 - a counter across calls
    import linecache

    number[0] += 1
    filename = f"/tmp/ipykernel_0/cell{number[0]}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), namespace)


SCHEDULER_CELL = """\
with requires("make_noam_scheduler"):
    optimizer = "adam"
    scheduler = make_noam_scheduler(optimizer)
    history = []
"""


def _make_noam_scheduler_stub(optimizer):
    raise NotImplementedError()


def test_a_name_an_unfinished_exercise_left_undefined_names_the_exercise(capsys):
    """Lesson 06 after Run All: the cell that defines `scheduler` stopped at an unfinished exercise."""
    ns = {"requires": requires, "make_noam_scheduler": _make_noam_scheduler_stub}
    run_cell(SCHEDULER_CELL, ns)
    assert "Finish that exercise first" in capsys.readouterr().out
    run_cell('with requires("Transformer", "make_noam_scheduler"):\n    print(scheduler)', ns)
    out = capsys.readouterr().out
    assert out.strip() == (
        "This cell uses `scheduler`, which was not defined because an earlier cell stopped: "
        "`make_noam_scheduler` is not done yet. Finish it, run its checker, then Run All again."
    )
    assert "Run the cells above" not in out


def test_the_reason_carries_through_later_blocks_that_stop_for_it(capsys):
    """A block that stops on the missing name leaves its own names undefined for the same reason."""
    ns = {"requires": requires, "make_noam_scheduler": _make_noam_scheduler_stub}
    run_cell(SCHEDULER_CELL, ns)
    run_cell('with requires("Transformer"):\n    for step in range(2):\n        losses = [scheduler]\n', ns)
    run_cell('with requires("Transformer"):\n    print(losses)', ns)
    out = capsys.readouterr().out.splitlines()[-1]
    assert out.startswith("This cell uses `losses`, which was not defined because an earlier cell stopped: "
                          "`make_noam_scheduler` is not done yet.")


def test_a_failing_exercise_is_named_with_its_error(capsys):
    def make_noam_scheduler(optimizer):
        return optimizer.lr  # a bug

    ns = {"requires": requires, "make_noam_scheduler": make_noam_scheduler}
    run_cell(SCHEDULER_CELL, ns)
    run_cell('with requires("Transformer"):\n    print(scheduler)', ns)
    out = capsys.readouterr().out.splitlines()[-1]
    assert out == (
        "This cell uses `scheduler`, which was not defined because an earlier cell stopped: your "
        "`make_noam_scheduler` raised AttributeError: 'str' object has no attribute 'lr'. Fix it, run its checker, "
        "then Run All again."
    )


def test_once_the_block_runs_to_its_end_the_old_reason_is_forgotten(capsys):
    ns = {"requires": requires, "make_noam_scheduler": _make_noam_scheduler_stub}
    run_cell(SCHEDULER_CELL, ns)
    ns["make_noam_scheduler"] = lambda optimizer: "noam"  # finished
    run_cell(SCHEDULER_CELL, ns)
    del ns["scheduler"]
    run_cell('with requires("Transformer"):\n    print(scheduler)', ns)
    out = capsys.readouterr().out
    assert "Run the cells above" in out and "earlier cell stopped" not in out


def test_a_name_no_stopped_block_would_have_defined_still_asks_to_run_the_cells_above(capsys):
    ns = {"requires": requires, "make_noam_scheduler": _make_noam_scheduler_stub}
    run_cell(SCHEDULER_CELL, ns)
    run_cell('with requires("Transformer"):\n    print(valid_batches)', ns)
    out = capsys.readouterr().out.splitlines()[-1]
    assert "valid_batches" in out and "Run the cells above" in out and "earlier cell stopped" not in out


def test_a_name_the_course_relies_on_missing_from_a_learners_class_is_named(capsys, contract):
    class Heads:
        def __init__(self):
            self.h = 2

    ns = {"requires": requires, "Heads": Heads}
    run_cell('with requires("Heads"):\n    heads = Heads()\n    count = heads.num_heads\n', ns)
    run_cell('with requires("Heads"):\n    print(count)', ns)
    out = capsys.readouterr().out.splitlines()[-1]
    assert out == (
        "This cell uses `count`, which was not defined because an earlier cell stopped: your `Heads` has no "
        "`num_heads`. Fix it, run its checker, then Run All again."
    )


def test_a_bug_in_the_cell_itself_is_not_blamed_on_an_exercise(capsys):
    ns = {"requires": requires, "make_noam_scheduler": lambda optimizer: "noam"}
    run_cell('with requires("make_noam_scheduler"):\n    ratio = 1 / 0\n', ns)
    run_cell('with requires("make_noam_scheduler"):\n    print(ratio)', ns)
    assert "Run the cells above" in capsys.readouterr().out.splitlines()[-1]


def test_without_the_blocks_source_the_note_says_what_may_have_happened(capsys):
    """Code whose source linecache lacks: the names the block would have defined are unknown."""
    ns = {"requires": requires, "make_noam_scheduler": _make_noam_scheduler_stub}
    exec(compile(SCHEDULER_CELL, "<no source>", "exec"), ns)
    run_cell('with requires("Transformer"):\n    print(scheduler)', ns)
    out = capsys.readouterr().out.splitlines()[-1]
    assert out.startswith("This cell uses `scheduler`, which is not defined. An earlier cell stopped early: "
                          "`make_noam_scheduler` is not done yet, so `scheduler` may never have been defined.")
    assert "Run > Run All Above Selected Cell" in out


# ---------------------------------------------------------------------------
# In a notebook, a stopped block's note carries a record of the crash for the progress report.


def test_in_a_notebook_the_note_is_displayed_with_a_crash_record(monkeypatch, capsys):
    import IPython
    import IPython.display

    from course_utils import _schema

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda bundle, raw=False: shown.append((bundle, raw)))

    def tenth(x):
        return x.size / 10

    with requires("tenth"):
        tenth(3)
    ((bundle, raw),) = shown
    assert raw and capsys.readouterr().out == ""
    assert bundle["text/plain"].startswith("This cell uses `tenth`, which raised AttributeError: 'int' object has no attribute 'size'")
    record = bundle[_schema.CRASH_MIME_TYPE]
    assert record == {
        "error": "AttributeError: 'int' object has no attribute 'size'",
        "exercises": ["tenth"],
        "notebooks": {},
        "function": "test_in_a_notebook_the_note_is_displayed_with_a_crash_record.<locals>.tenth",
        "line": f"line {tenth.__code__.co_firstlineno + 1}: `return x.size / 10`",
        "unfinished": False,
        "because": "",
        "note": bundle["text/plain"],
    }


def test_the_crash_record_of_a_name_an_earlier_stop_left_undefined_says_why(monkeypatch, capsys):
    import IPython
    import IPython.display

    from course_utils import _schema

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda bundle, raw=False: shown.append(bundle))
    ns = {"requires": requires, "make_noam_scheduler": _make_noam_scheduler_stub}
    run_cell(SCHEDULER_CELL, ns)
    run_cell('with requires("Transformer"):\n    print(scheduler)', ns)
    first, second = (bundle[_schema.CRASH_MIME_TYPE] for bundle in shown)
    assert first["unfinished"] and first["exercises"] == ["make_noam_scheduler"] and first["because"] == ""
    assert second["error"] == "NameError: name 'scheduler' is not defined" and second["exercises"] == []
    assert second["because"] == "`make_noam_scheduler` is not done yet"


def test_the_crash_record_names_the_lesson_a_loaded_exercise_came_from(tmp_path):
    from course_utils.notebook import crash_record

    lesson = _notebook(tmp_path / "Copy of 04_heads.ipynb", "class Heads:\n    def forward(self, x):\n        return x.shape")
    (Heads,) = load_exercises(lesson, ["Heads"]).values()
    try:
        Heads().forward(3)
    except AttributeError as exc:
        record = crash_record(exc, ["Heads"])
    assert record["exercises"] == ["Heads"] and record["notebooks"] == {"Heads": "04_heads"}
    assert record["function"] == "Heads.forward" and record["line"] == "line 3: `return x.shape`"
    assert record["unfinished"] is False


def test_load_exercises_names_the_cell_and_the_name_when_a_definition_fails(tmp_path):
    """A default value from another cell runs when the def runs: loading fails there, and says what to move."""
    nb = _notebook(tmp_path / "02_masks.ipynb", "import torch", "PAD_ID = 0",
                   "def make_padding_mask(tokens, pad_id=PAD_ID):\n    return tokens != pad_id")
    with pytest.raises(RuntimeError, match=r"02_masks.ipynb, code cell 3: defining `make_padding_mask` raised "
                                           r"NameError.*Move `PAD_ID` into the cell that defines"):
        load_exercises(nb, ["make_padding_mask"])
