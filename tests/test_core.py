"""The checker engine: outcomes, formatting, and leaving no trace."""

import importlib
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


def test_an_input_named_in_may_change_may_be_written_into():
    def write_into_cache(x, cache):
        cache["buffer"][0] = x.sum()  # a preallocated cache, written in place
        x.mul_(1.0)  # not a change: equal values
        return x + cache["buffer"]

    def also_changes_x(x, cache):
        x.add_(1.0)
        return x

    def body(check: Check, fn, allow: bool):
        x, cache = torch.ones(3), {"buffer": torch.zeros(3)}
        check.call(fn, x, cache, may_change=(cache,) if allow else ())
        check.ok("ran")

    expect(run_check("cached", body, write_into_cache, True), "passed")
    expect(run_check("cached", body, write_into_cache, False), "failed", "changed its input `cache` in place")
    expect(run_check("cached", body, also_changes_x, True), "failed", "changed its input `x` in place")


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


# -- the public API -------------------------------------------------------------

import signal
import sys
import time

import pytest

from course_utils.checks._core import (
    ATOL,
    Raised,
    close_enough,
    identical,
    last_result,
)


def _fast_body(check: Check, fn):
    out = check.call(fn, torch.ones(2, 3), torch.ones(2, 3), time_limit=0.5)
    check.tensor(out, "the output", shape=(2, 3))
    check.ok("runs")


def test_close_enough_and_identical_are_different_questions():
    a = torch.tensor([1.0, 2.0])
    assert close_enough(a, a + ATOL / 2) and not identical(a, a + ATOL / 2)
    assert not close_enough(a, a[:1]) and not close_enough(a, "a")
    assert identical(torch.tensor([float("nan")]), torch.tensor([float("nan")]))
    assert not identical(a, a.double())


def test_attempt_returns_a_sentinel_instead_of_raising():
    seen = {}

    def body(check, fn):
        seen["value"] = check.attempt(fn, 3)
        seen["crash"] = check.attempt(lambda x: 1 / 0, 3)

    run_check("probe", body, lambda x: x + 1)
    assert seen["value"] == 4
    assert isinstance(seen["crash"], Raised) and not seen["crash"]
    assert isinstance(seen["crash"].exception, ZeroDivisionError) and "ZeroDivisionError" in seen["crash"].message


def test_hint_and_builds_on_are_attached():
    def body(check, fn):
        check.call(fn, 1, hint="Hint: look at the exponent.", builds_on="It builds on lesson 01.")

    expect(run_check("x", body, lambda a: 1 / 0), "error", "ZeroDivisionError", "look at the exponent")
    def stub(a):
        raise NotImplementedError

    expect(run_check("x", body, stub), "not attempted", "builds on lesson 01")


def test_a_type_error_names_the_signature_only_when_the_call_itself_failed():
    """A TypeError raised inside the learner's code (a torch call) keeps torch's list of signatures and is no
    signature problem; one raised by the call itself (too many arguments) is."""
    def body(check, fn):
        check.call(fn, torch.zeros(2, 3))

    def inside(x):
        return x.argsort(1, stable=True)

    try:  # torch's own message is the oracle: its list of signatures differs between releases
        inside(torch.zeros(2, 3))
    except TypeError as error:
        signatures = [line.strip() for line in str(error).splitlines() if line.strip().startswith("* (")]
    assert signatures, "this torch accepts the call: the test needs another failing torch call"
    result = run_check("x", body, inside)
    expect(result, "error", "expected one of", *signatures)
    assert "match the signature the exercise gives" not in str(result)
    expect(run_check("x", body, lambda: None), "error", "match the signature the exercise gives")


def test_an_endless_loop_is_stopped_with_a_named_error():
    def endless(x, y):
        while True:
            pass

    start = time.monotonic()
    result = run_check("add", _fast_body, endless)
    assert time.monotonic() - start < 10  # without the limit it never returns; the margin is for a busy machine
    expect(result, "error", "did not return within 0.5 s", "x = tensor of shape (2, 3)", "stopping condition")


def test_a_sleep_and_a_swallowed_limit_are_stopped_too():
    def sleepy(x, y):
        time.sleep(60)

    def stubborn(x, y):
        for _ in range(10**9):
            try:
                time.sleep(60)
            except Exception:  # the limit is not an Exception: it still ends the call
                pass

    for fn in (sleepy, stubborn):
        start = time.monotonic()
        expect(run_check("add", _fast_body, fn), "error", "did not return within")
        assert time.monotonic() - start < 10  # 60 s without the limit


def test_an_import_is_never_cut_short_by_the_limit(tmp_path, monkeypatch):
    """A slow first import inside learner code (torch imports sympy so) ends whole; the limit stops the call after it."""
    package = tmp_path / "slow_package_for_the_limit"
    package.mkdir()
    (package / "__init__.py").write_text("from .first import VALUE\nfrom . import slow\n")  # as sympy imports .core
    (package / "first.py").write_text("VALUE = 1\n")
    (package / "slow.py").write_text("import time\ntime.sleep(1.5)\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def imports_then_loops(x, y):
        import slow_package_for_the_limit  # noqa: F401
        while True:
            pass

    try:
        expect(run_check("add", _fast_body, imports_then_loops), "error", "did not return within")
        import slow_package_for_the_limit as imported

        assert imported.first.VALUE == 1  # cut short, `first` would stay loaded but no attribute of the package
    finally:
        for name in ("slow_package_for_the_limit", "slow_package_for_the_limit.first", "slow_package_for_the_limit.slow"):
            sys.modules.pop(name, None)


def test_an_import_that_never_ends_is_stopped_after_the_grace(tmp_path, monkeypatch):
    import course_utils.checks._core as core

    (tmp_path / "endless_module_for_the_limit.py").write_text("while True:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(core, "IMPORT_GRACE", 0.5)

    def imports(x, y):
        import endless_module_for_the_limit  # noqa: F401

    start = time.monotonic()
    expect(run_check("add", _fast_body, imports), "error", "did not return within")
    assert time.monotonic() - start < 10
    sys.modules.pop("endless_module_for_the_limit", None)


def test_the_total_time_of_a_check_is_bounded():
    def body(check, fn):
        check.total_time = 0.6
        for _ in range(10):
            check.call(fn, 0.25)

    start = time.monotonic()
    expect(run_check("slow", body, time.sleep), "error", "in all across this checker's calls")
    assert time.monotonic() - start < 2


def test_after_a_limit_no_alarm_is_left_behind():
    run_check("add", _fast_body, lambda x, y: time.sleep(5))
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    time.sleep(0.3)  # an alarm left armed would raise here


def test_a_learners_interrupt_still_interrupts_and_state_is_restored():
    def interrupted(x, y):
        torch.set_grad_enabled(False)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_check("add", _fast_body, interrupted)
    assert torch.is_grad_enabled() and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_sys_exit_becomes_an_error_result():
    expect(run_check("add", _fast_body, lambda x, y: sys.exit(3)), "error", "sys.exit()")
    def raises_base(x, y):
        raise GeneratorExit

    expect(run_check("add", _fast_body, raises_base), "error", "GeneratorExit")


@pytest.mark.parametrize(
    "change, setting",
    [
        (lambda: torch.set_grad_enabled(False), "grad mode"),
        (lambda: torch.set_default_dtype(torch.float64), "default dtype"),
        (lambda: torch.use_deterministic_algorithms(True), "deterministic algorithms"),
        (lambda: torch.set_num_threads(2), "number of threads"),
    ],
)
def test_a_global_setting_changed_by_learner_code_is_named_and_put_back(change, setting):
    def changes(x, y):
        change()
        return x + y

    if setting == "deterministic algorithms":
        importlib.import_module("torch._inductor.config")  # its first import takes seconds: not the learner's time
    threads = torch.get_num_threads()
    result = run_check("add", _body, changes)
    expect(result, "failed", f"{setting} was", "put the setting back")
    assert "could not" not in str(result)
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32
    assert not torch.are_deterministic_algorithms_enabled() and torch.get_num_threads() == threads


def test_reseeding_inside_learner_code_is_named_with_its_line():
    def reseeds(x, y):
        torch.manual_seed(0)
        return x + y

    expect(run_check("add", _body, reseeds), "failed", "resets a global random seed", "torch.manual_seed(0)")


def test_printing_is_capped(capsys):
    def chatty(x, y):
        for _ in range(10_000):
            print("x" * 100)
        return x + y

    assert run_check("add", _body, chatty).passed
    assert len(capsys.readouterr().out) < 3000


def test_a_class_passed_as_an_instance_gets_the_fix():
    class Thing(torch.nn.Module):
        pass

    def body(check, cls):
        check.callable_(cls, "Thing", want_class=True)

    expect(run_check("Thing", body, Thing()), "failed", "pass the class `Thing`, not an instance")
    expect(run_check("add", _body, "add"), "failed", "without quotes")


def test_a_generator_result_is_explained():
    def gen(x, y):
        yield x + y

    expect(run_check("add", _body, gen), "failed", "use `return`")


def test_last_result_is_remembered_per_implementation():
    def wrong(x, y):
        return x - y

    run_check("add_remembered", _body, good)
    assert last_result("add_remembered", good).passed
    run_check("add_remembered", _body, wrong)
    assert last_result("add_remembered", good).passed, "a check of another object keeps this one's result"
    assert not last_result("add_remembered").passed and not last_result("add_remembered", wrong).passed


def test_without_a_timer_signal_a_trace_function_stops_python_loops(monkeypatch):
    """Windows and threads other than the main one have no SIGALRM: the fallback still ends loops."""
    from course_utils.checks import _core

    monkeypatch.setattr(_core, "_can_use_signal", lambda: False)

    def endless(x, y):
        n = 0
        while True:
            n += 1

    start = time.monotonic()
    expect(run_check("add", _fast_body, endless), "error", "did not return within 0.5 s")
    assert time.monotonic() - start < 10 and sys.gettrace() is None


def test_a_combined_checker_blames_the_failing_component_first():
    def check_component(fn):
        return run_check("component", _body, fn)

    def combined(check, fn):
        check.require_component(check_component, fn, "add")
        check.ok("the rest")

    expect(run_check("combined", combined, lambda x, y: x - y), "failed", "your add fails its own checker: fix that first")
    expect(run_check("combined", combined, stub), "not attempted", "uses your add, which is not done yet")
    assert run_check("combined", combined, good).passed
