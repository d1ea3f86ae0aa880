"""Every registered checker against hostile input: it answers, in time, leaves no trace, and names the problem.

Issue 12: a checker never hangs, never raises, and never shows its own
failure ("could not finish") for anything a learner's code can do. The time
limits are lowered here so that the endless loops and sleeps below end fast;
the real defaults are tested in test_core.py.
"""

from __future__ import annotations

import inspect
import random
import sys
import time

import numpy as np
import pytest
import torch
from torch import nn

import course_utils.checks as checks
from course_utils.checks import _core

CALL_LIMIT, TOTAL_LIMIT = 0.25, 1.0  # the real defaults (5 s, 30 s) are tested in test_core.py
NAMES = sorted(checks._TOPICS)


def is_class_checker(name: str) -> bool:
    """Class checkers say so in their signature: ``check_x(X: type[nn.Module])``."""
    parameter = next(iter(inspect.signature(getattr(checks, name)).parameters.values()))
    return "type[" in str(parameter.annotation)


class Touchy:
    """An object that refuses to be compared or tested for truth."""

    def __bool__(self):
        raise ValueError("no truth value")

    def __eq__(self, other):
        raise ValueError("no equality")

    __hash__ = object.__hash__


def _loop_forever(*args, **kwargs):
    while True:
        pass


def _sleep(*args, **kwargs):
    time.sleep(30)


def _print_megabytes(*args, **kwargs):
    for _ in range(2000):
        print("#" * 1000)
    return torch.zeros(2)


def _exit(*args, **kwargs):
    sys.exit(1)


def _change_globals(*args, **kwargs):
    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
    return torch.zeros(2)


def _generator(*args, **kwargs):
    yield torch.zeros(2)


def _raw_result(value):
    return lambda *args, **kwargs: value


RESULTS = {
    "a generator": _generator,
    "a list": _raw_result([1.0, 2.0]),
    "NaN": lambda *a, **k: torch.full((2, 3), float("nan")),
    "non-contiguous": lambda *a, **k: torch.ones(4, 6).t(),
    "grad-requiring": lambda *a, **k: torch.ones(2, 3, requires_grad=True),
    "huge shape": lambda *a, **k: torch.zeros(1).expand(100_000, 100_000),
    "an untestable object": lambda *a, **k: Touchy(),
    "an endless loop": _loop_forever,
    "a sleep": _sleep,
    "megabytes of printing": _print_megabytes,
    "sys.exit": _exit,
    "global settings changed": _change_globals,
}


def _as_class(behaviour):
    """A module class whose every entry point behaves like ``behaviour``."""

    class Hostile(nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__()
            self.linear = nn.Linear(2, 2)

        def forward(self, *args, **kwargs):
            return behaviour(*args, **kwargs)

        encode = decode = forward

    Hostile.__name__ = Hostile.__qualname__ = "Hostile"
    return Hostile


class Tiny(nn.Module):
    def forward(self, x):
        return x


def _inputs(class_checker: bool) -> dict[str, object]:
    wrong_kind = {"None": None, "a string": "my_function", "a number": 3}
    if class_checker:
        wrong_kind["an instance, not the class"] = Tiny()
        wrong_kind["a function, not a class"] = lambda *a, **k: torch.zeros(2)
        wrong_kind["a class without the right arguments"] = Tiny
        return {**wrong_kind, **{name: _as_class(fn) for name, fn in RESULTS.items()}}
    wrong_kind["a class, not a function"] = Tiny
    wrong_kind["a lambda with no parameters"] = lambda: torch.zeros(2)
    wrong_kind["a lambda with one parameter"] = lambda x: x
    return {**wrong_kind, **RESULTS}


CASES = [(name, label) for name in NAMES for label in _inputs(is_class_checker(name))]


def _state():
    return (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy(),
            torch.get_default_dtype(), torch.is_grad_enabled(), torch.get_num_threads(),
            torch.are_deterministic_algorithms_enabled())


@pytest.fixture
def short_limits(monkeypatch):
    monkeypatch.setattr(_core, "DEFAULT_TIME_LIMIT", CALL_LIMIT)
    monkeypatch.setattr(_core, "DEFAULT_TOTAL_TIME", TOTAL_LIMIT)


@pytest.mark.parametrize("name, label", CASES, ids=[f"{n}-{l}" for n, l in CASES])
def test_hostile_input_gets_a_named_result_in_time(name, label, short_limits, capsys):
    hostile = _inputs(is_class_checker(name))[label]
    getattr(checks, name)(None)  # warm-up: the first call in a process pays for torch's lazy imports
    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)  # torch.optim's (torch._dynamo: seconds on torch 2.3)
    capsys.readouterr()
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    before = _state()
    start = time.monotonic()
    result = getattr(checks, name)(hostile)
    took = time.monotonic() - start
    text = str(result)
    assert isinstance(result, checks.CheckResult)
    assert not result.passed, text
    assert result.messages and all(m.strip() for m in result.messages), text
    assert "could not finish" not in text and "could not use" not in text, text
    assert "0x" not in text, text
    # a limit that does not work shows as a run far past it (the sleep below is of 30 s); the margin is wide
    # so that a busy machine is not mistaken for one (checker speed is measured by benchmarks, not here)
    assert took < TOTAL_LIMIT + CALL_LIMIT + 10, f"took {took:.1f} s:\n{text}"
    after = _state()
    assert torch.equal(before[0], after[0]) and before[1:2] == after[1:2] and np.array_equal(before[2], after[2])
    assert before[3:] == after[3:], "a global setting was left changed"
    assert len(capsys.readouterr().out) < 10_000, "the learner's printing is capped"
