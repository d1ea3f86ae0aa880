"""Every registered checker exists, tells "not attempted" apart, and leaves no trace."""

from __future__ import annotations

import ast
import inspect
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import course_utils.checks as checks
from course_utils._schema import cell_source, parse_cell
from course_utils.contracts import CONTRACTS
from course_utils.checks import CheckResult, Status

NAMES = sorted(checks._TOPICS)
SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"


def _checker_calls_in_solutions() -> dict[str, set[str]]:
    """checker name -> the names it is called on in the solution notebooks (``check_x(X)``)."""
    calls: dict[str, set[str]] = {}
    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            tree = parse_cell(cell_source(cell)) if cell["cell_type"] == "code" else None
            for node in ast.walk(tree) if tree else ():
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in checks._TOPICS:
                    args = [a.id for a in node.args[:1] if isinstance(a, ast.Name)]
                    calls.setdefault(node.func.id, set()).update(args)
    return calls


CALLS = _checker_calls_in_solutions()


def is_class_checker(name: str) -> bool:
    """A class checker says so in its signature: ``check_x(X: type[nn.Module])``."""
    parameter = next(iter(inspect.signature(getattr(checks, name)).parameters.values()))
    return "type[" in str(parameter.annotation)


CLASS_EXERCISES = {name for name in NAMES if is_class_checker(name)}


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_checker_is_called_in_a_solution_notebook(name):
    assert CALLS.get(name), f"{name} is registered but no solution notebook calls it: add its checker cell"


@pytest.mark.parametrize("name", NAMES)
def test_a_checker_of_a_class_says_so_in_its_signature(name):
    kinds = {CONTRACTS[arg].kind for arg in CALLS.get(name, ()) if arg in CONTRACTS}
    if "class" in kinds:
        assert is_class_checker(name), f"{name} checks a class: annotate its argument `type[nn.Module]`"
    if "function" in kinds:
        assert not is_class_checker(name), f"{name} checks a function, but its argument is annotated as a class"




def _stub_function(*args, **kwargs):
    raise NotImplementedError()


class _StubModule(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        raise NotImplementedError()


def _noisy_function(*args, **kwargs):
    """Wrong on purpose, and it consumes every RNG and flips global settings."""
    random.random()
    np.random.rand()
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    return torch.randn(3)


class _NoisyModule(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.W_q = self.W_k = self.W_v = self.W_o = nn.Linear(2, 2)

    def forward(self, *args, **kwargs):
        return _noisy_function()

    def encode(self, *args, **kwargs):
        return _noisy_function()

    def decode(self, *args, **kwargs):
        return _noisy_function()


def _state():
    return (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy(),
            torch.get_default_dtype(), torch.is_grad_enabled())


def _assert_same_state(before, after):
    assert torch.equal(before[0], after[0]), "torch RNG state changed"
    assert before[1] == after[1], "Python RNG state changed"
    assert np.array_equal(before[2], after[2]), "NumPy RNG state changed"
    assert before[3:] == after[3:], "default dtype or grad mode changed"


@pytest.mark.parametrize("name", NAMES)
def test_untouched_stub_is_not_attempted(name):
    checker = getattr(checks, name)
    stub = _StubModule if name in CLASS_EXERCISES else _stub_function
    result = checker(stub)
    assert isinstance(result, CheckResult)
    assert result.status is Status.NOT_ATTEMPTED, str(result)
    assert "NotImplementedError" in str(result)


@pytest.mark.parametrize("name", NAMES)
def test_checker_leaves_no_trace_and_never_raises(name):
    checker = getattr(checks, name)
    wrong = _NoisyModule if name in CLASS_EXERCISES else _noisy_function
    torch.manual_seed(2024)
    random.seed(7)
    np.random.seed(11)
    before = _state()
    result = checker(wrong)
    _assert_same_state(before, _state())
    assert isinstance(result, CheckResult) and not result.passed, str(result)
    assert result.messages and "0x" not in str(result)


@pytest.mark.parametrize("name", NAMES)
def test_checker_reports_something_that_is_not_code(name):
    result = getattr(checks, name)(None)
    assert result.status is Status.FAILED and result.messages
