"""Helpers the lesson notebooks use: requires, pick_device, load_exercises."""

from __future__ import annotations

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


def test_load_exercises_explains_missing_notebooks_and_names(tmp_path):
    with pytest.raises(FileNotFoundError, match="keep the course notebooks together"):
        load_exercises(tmp_path / "01_attention.ipynb", ["scaled_dot_product_attention"])
    nb = _notebook(tmp_path / "01.ipynb", "def other():\n    pass")
    with pytest.raises(LookupError, match="does not define scaled_dot_product_attention"):
        load_exercises(nb, ["scaled_dot_product_attention"])


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
