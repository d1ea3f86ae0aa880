"""The checker engine: outcomes, formatting, and leaving no trace."""

import random

import torch

from course_utils.checks._core import RESULT_MIME_TYPE, Check, Status, run_check
from helpers import expect


def _body(check: Check, fn):
    check.callable_(fn, "add")
    a = torch.arange(6.0).reshape(2, 3)
    out = check.call(fn, a, a)
    out = check.tensor(out, "the output", shape=(2, 3), dtype=torch.float32)
    check.ok("returns a (2, 3) float tensor")
    check.close(out, a + a, "the output", hint="Did you add the two inputs?")
    check.ok("adds its inputs")


def good(x, y):
    return x + y


def stub(x, y):
    raise NotImplementedError()


def test_passed_result_lists_what_was_checked():
    result = run_check("add", _body, good)
    assert result and result.passed and result.status is Status.PASSED
    assert "all 2 checks passed" in str(result)
    assert result.checked == ["returns a (2, 3) float tensor", "adds its inputs"]


def test_outcomes_are_told_apart():
    expect(run_check("add", _body, stub), "not attempted", "NotImplementedError")
    expect(run_check("add", _body, lambda x, y: x @ y), "error", "RuntimeError", "x = tensor of shape (2, 3)")
    expect(run_check("add", _body, lambda x, y: x - y), "failed", "wrong values", "Did you add")
    expect(run_check("add", _body, lambda x, y: None), "failed", "forget a `return`")
    expect(run_check("add", _body, lambda x, y: (x + y)[:1]), "failed", "wrong shape", "(1, 3)")
    expect(run_check("add", _body, lambda x, y: (x + y).long()), "failed", "dtype torch.int64")
    expect(run_check("add", _body, lambda x, y: x / 0), "failed", "NaN")
    expect(run_check("add", _body, "add"), "failed", "expected a function")


def test_in_place_change_of_an_input_is_reported():
    def sneaky(x, y):
        x += y
        return x

    expect(run_check("add", _body, sneaky), "failed", "changed its input `x` in place")


def test_result_renders_for_terminal_html_and_tools():
    result = run_check("add", _body, lambda x, y: x - y)
    assert str(result).startswith("[FAILED] add")
    html = result._repr_html_()
    assert "FAILED" in html and "wrong values" in html and "0x" not in html
    bundle = result._repr_mimebundle_()
    assert bundle[RESULT_MIME_TYPE]["status"] == "failed"
    assert bundle["text/plain"] == str(result)


def test_output_is_deterministic():
    first = str(run_check("add", _body, lambda x, y: x - y + torch.randn_like(x)))
    second = str(run_check("add", _body, lambda x, y: x - y + torch.randn_like(x)))
    assert first == second


def test_no_trace_rng_dtype_grad():
    def messy(x, y):
        torch.randn(3)
        random.random()
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        return x + y

    torch.manual_seed(123)
    random.seed(5)
    before = (torch.get_rng_state(), random.getstate())
    with torch.no_grad():
        run_check("add", _body, messy)
        assert not torch.is_grad_enabled()
    assert torch.get_default_dtype() == torch.float32
    assert torch.equal(before[0], torch.get_rng_state()) and before[1] == random.getstate()
