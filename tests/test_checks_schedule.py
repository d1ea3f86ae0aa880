"""The checkers of lesson 06 for the Noam schedule: noam_lr and make_noam_scheduler."""

from __future__ import annotations

import functools
import math
import random

import numpy as np
import pytest
import torch
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

from course_utils.checks.schedule import check_noam_lr, check_noam_scheduler
from helpers import expect


# --------------------------------------------------------------------------
# noam_lr: correct implementations


def noam_lr(step, d_model, warmup_steps):
    step = max(step, 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def noam_lr_torch(step, d_model, warmup_steps):
    step = torch.tensor(float(max(step, 1)))
    return torch.rsqrt(torch.tensor(float(d_model))) * torch.minimum(step.rsqrt(), step * warmup_steps**-1.5)


def noam_lr_branches(step, d_model, warmup_steps):
    if step == 0:
        step = 1
    if step < warmup_steps:
        rate = step / warmup_steps**1.5
    else:
        rate = 1 / math.sqrt(step)
    return rate / math.sqrt(d_model)


def noam_lr_numpy(step, d_model, warmup_steps):
    step = np.float32(step or 1)
    return np.float32(d_model) ** -0.5 * np.minimum(step ** -0.5, step * np.float32(warmup_steps) ** -1.5)


def noam_lr_peak_form(step, d_model, warmup_steps):
    """The same curve written as peak * shape."""
    step = max(1, step)
    peak = (d_model * warmup_steps) ** -0.5
    return peak * min(step / warmup_steps, (warmup_steps / step) ** 0.5)


# noam_lr: wrong implementations, each with the words of its diagnosis


def no_step_zero(step, d_model, warmup_steps):
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def no_step_zero_torch(step, d_model, warmup_steps):
    step = torch.tensor(float(step))
    return d_model**-0.5 * torch.minimum(step**-0.5, step * warmup_steps**-1.5)


def warmup_sign(step, d_model, warmup_steps):
    step = max(step, 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**1.5)


def d_model_sign(step, d_model, warmup_steps):
    step = max(step, 1)
    return d_model**0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def uses_max(step, d_model, warmup_steps):
    step = max(step, 1)
    return d_model**-0.5 * max(step**-0.5, step * warmup_steps**-1.5)


def no_d_model(step, d_model, warmup_steps):
    step = max(step, 1)
    return min(step**-0.5, step * warmup_steps**-1.5)


def plus_one(step, d_model, warmup_steps):
    step = step + 1
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def peak_moved(step, d_model, warmup_steps):
    step = max(step, 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.0)


def floor_division(step, d_model, warmup_steps):
    step = max(step, 1)
    return (1 // d_model**0.5) * min(step**-0.5, step * warmup_steps**-1.5)


def integer_tensor(step, d_model, warmup_steps):
    step = max(step, 1)
    return torch.tensor(d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)).long()


def only_warmup_term(step, d_model, warmup_steps):
    step = max(step, 1)
    return d_model**-0.5 * step * warmup_steps**-1.5


def returns_list(step, d_model, warmup_steps):
    return [noam_lr(step, d_model, warmup_steps)]


def forgets_return(step, d_model, warmup_steps):
    noam_lr(step, d_model, warmup_steps)


def stub(*args, **kwargs):
    raise NotImplementedError()


@pytest.mark.parametrize("fn", [noam_lr, noam_lr_branches, noam_lr_numpy, noam_lr_peak_form])
def test_noam_lr_accepts_correct_variants(fn):
    result = check_noam_lr(fn)
    expect(result, "passed")
    assert "treats step 0 as step 1" in result.checked


@pytest.mark.parametrize(
    "fn, phrases",
    [
        (no_step_zero, ["step 0", "ZeroDivisionError", "calls your schedule once with step 0", "max(step, 1)"]),
        (no_step_zero_torch, ["step 0", "0.0", "same value as step 1", "calls your schedule once with step 0"]),
        (warmup_sign, ["no warmup", "** -1.5"]),
        (d_model_sign, ["d_model times too large", "d_model ** -0.5"]),
        (uses_max, ["larger of the two", "min("]),
        (no_d_model, ["missing the factor", "d_model ** -0.5"]),
        (plus_one, ["one step ahead", "step + 1"]),
        (peak_moved, ["peak should be exactly at step == warmup_steps"]),
        (floor_division, ["0.0 everywhere", "integer arithmetic", "//"]),
        (integer_tensor, ["returns integers", "integer arithmetic"]),
        (noam_lr_torch, ["returns them as a tensor", "foreach=True"]),
        (only_warmup_term, ["keeps growing after warmup_steps"]),
        (returns_list, ["should return a number", "a list of 1 item"]),
        (forgets_return, ["returned None", "return"]),
    ],
)
def test_noam_lr_diagnoses_mistakes(fn, phrases):
    expect(check_noam_lr(fn), "failed", *phrases)


def test_noam_lr_outcomes():
    expect(check_noam_lr(stub), "not attempted", "NotImplementedError")
    expect(check_noam_lr(lambda step, d_model, warmup_steps: d_model / "x"), "error", "TypeError")
    expect(check_noam_lr(3.0), "failed", "expected a function")


def test_noam_lr_only_step_zero_wrong_still_reports_the_rest_as_fine():
    result = check_noam_lr(no_step_zero)
    assert len(result.messages) == 1  # the curve itself is right


def test_noam_lr_that_draws_random_numbers_still_passes():
    def noisy(step, d_model, warmup_steps):
        torch.randn(2)
        random.random()
        return noam_lr(step, d_model, warmup_steps)

    expect(check_noam_lr(noisy), "passed")


# --------------------------------------------------------------------------
# make_noam_scheduler: correct implementations (each relies on the correct noam_lr above)


def make_noam_scheduler(optimizer, d_model, warmup_steps):
    return LambdaLR(optimizer, lambda step: noam_lr(step + 1, d_model, warmup_steps))


def _factor(step, d_model, warmup_steps):
    return noam_lr(step + 1, d_model, warmup_steps)


def scheduler_partial(optimizer, d_model, warmup_steps):
    return LambdaLR(optimizer, lr_lambda=functools.partial(_factor, d_model=d_model, warmup_steps=warmup_steps))


class HandWritten:
    """Writes param_group['lr'] itself, but has none of get_last_lr, state_dict, load_state_dict."""

    def __init__(self, optimizer, d_model, warmup_steps):
        self.optimizer, self.d_model, self.warmup_steps = optimizer, d_model, warmup_steps
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.step_count = 0
        self._apply()

    def _apply(self):
        rate = noam_lr(self.step_count + 1, self.d_model, self.warmup_steps)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = base * rate

    def step(self):
        self.step_count += 1
        self._apply()


class HandWrittenComplete(HandWritten):
    """A hand-written scheduler with everything lesson 06 uses: get_last_lr and a plain-data state."""

    def get_last_lr(self):
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self):
        return {"step_count": self.step_count, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state):
        self.step_count, self.base_lrs = state["step_count"], list(state["base_lrs"])
        self._apply()


class NoamSubclass(LRScheduler):
    def __init__(self, optimizer, d_model, warmup_steps):
        self.d_model, self.warmup_steps = d_model, warmup_steps
        super().__init__(optimizer)

    def get_lr(self):
        rate = noam_lr(self.last_epoch + 1, self.d_model, self.warmup_steps)
        return [base * rate for base in self.base_lrs]


def hand_written_complete(optimizer, d_model, warmup_steps):
    return HandWrittenComplete(optimizer, d_model, warmup_steps)


def noam_subclass(optimizer, d_model, warmup_steps):
    return NoamSubclass(optimizer, d_model, warmup_steps)


def scheduler_list_of_lambdas(optimizer, d_model, warmup_steps):
    rate = lambda step: noam_lr(step + 1, d_model, warmup_steps)  # noqa: E731
    return LambdaLR(optimizer, [rate] * len(optimizer.param_groups))


# make_noam_scheduler: wrong implementations


class NeverWrites:
    """The reference code of seed 004: computes the rate and drops it."""

    def __init__(self, optimizer, d_model, warmup_steps):
        self.optimizer, self.d_model, self.warmup_steps = optimizer, d_model, warmup_steps
        self.n = 0

    def step(self):
        self.n += 1
        rate = noam_lr(self.n, self.d_model, self.warmup_steps)  # noqa: F841


class SetsRateDirectly(HandWritten):
    def _apply(self):
        for group in self.optimizer.param_groups:
            group["lr"] = noam_lr(self.step_count + 1, self.d_model, self.warmup_steps)


class FirstGroupOnly(HandWritten):
    def _apply(self):
        group = self.optimizer.param_groups[0]
        group["lr"] = self.base_lrs[0] * noam_lr(self.step_count + 1, self.d_model, self.warmup_steps)


class NotSetAtConstruction(HandWritten):
    def __init__(self, optimizer, d_model, warmup_steps):
        self.optimizer, self.d_model, self.warmup_steps = optimizer, d_model, warmup_steps
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.step_count = 0


class StepNeedsArgument:
    def __init__(self, optimizer, d_model, warmup_steps):
        self.optimizer = optimizer

    def step(self, step_num):
        pass


def one_behind(optimizer, d_model, warmup_steps):
    return LambdaLR(optimizer, lambda step: noam_lr(step, d_model, warmup_steps))


def one_ahead(optimizer, d_model, warmup_steps):
    return LambdaLR(optimizer, lambda step: noam_lr(step + 2, d_model, warmup_steps))


def crashes_at_step_zero(optimizer, d_model, warmup_steps):
    return LambdaLR(optimizer, lambda step: d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5))


def zero_at_step_zero(optimizer, d_model, warmup_steps):
    def rate(step):
        step = torch.tensor(float(step))
        return float(d_model**-0.5 * torch.minimum(step**-0.5, step * warmup_steps**-1.5))

    return LambdaLR(optimizer, rate)


def wrong_formula(optimizer, d_model, warmup_steps):
    return LambdaLR(optimizer, lambda step: uses_max(step + 1, d_model, warmup_steps))


def swapped_arguments(optimizer, d_model, warmup_steps):
    return LambdaLR(optimizer, lambda step: noam_lr(step + 1, warmup_steps, d_model))


def warmup_written_in(optimizer, d_model, warmup_steps):
    return LambdaLR(optimizer, lambda step: noam_lr(step + 1, d_model, 4000))


def d_model_written_in(optimizer, d_model, warmup_steps):
    return LambdaLR(optimizer, lambda step: noam_lr(step + 1, 512, warmup_steps))


def rates_as_tensors(optimizer, d_model, warmup_steps):
    return LambdaLR(optimizer, lambda step: torch.tensor(noam_lr(step + 1, d_model, warmup_steps)))


def forgets_to_return(optimizer, d_model, warmup_steps):
    LambdaLR(optimizer, lambda step: noam_lr(step + 1, d_model, warmup_steps))


def returns_the_function(optimizer, d_model, warmup_steps):
    return lambda step: noam_lr(step + 1, d_model, warmup_steps)


def compounding(optimizer, d_model, warmup_steps):
    from torch.optim.lr_scheduler import MultiplicativeLR

    return MultiplicativeLR(optimizer, lambda step: noam_lr(step + 1, d_model, warmup_steps))


@pytest.mark.parametrize(
    "fn",
    [make_noam_scheduler, scheduler_partial, hand_written_complete, noam_subclass, scheduler_list_of_lambdas],
)
def test_noam_scheduler_accepts_correct_variants(fn):
    expect(check_noam_scheduler(fn), "passed")


def divides_by_the_second_lr(optimizer, d_model, warmup_steps):
    base = optimizer.param_groups[1]["lr"]  # 2.0, whose inverse is the first group's lr: both readings named
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: noam_lr(n + 1, d_model, warmup_steps) / base)


def divides_by_the_first_lr(optimizer, d_model, warmup_steps):
    base = optimizer.param_groups[0]["lr"]
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: noam_lr(n + 1, d_model, warmup_steps) / base)


@pytest.mark.parametrize(
    "fn, phrases",
    [
        (NeverWrites, ["never change", "never writes it into the optimizer"]),
        (SetsRateDirectly, ["same lr", "ignores the optimizer's own lr"]),
        (FirstGroupOnly, ["only the first param group"]),
        (NotSetAtConstruction, ["before the first scheduler.step()", "noam_lr(1)"]),
        (StepNeedsArgument, ["requires the argument 'step_num'"]),
        (one_behind, ["one step behind", "noam_lr(n + 1)", "0 before the first"]),
        (one_ahead, ["one step ahead", "noam_lr(n + 2)"]),
        (crashes_at_step_zero, ["crashed while building", "ZeroDivisionError", "calls your schedule once with step 0", "step 0"]),
        (zero_at_step_zero, ["lr is 0", "step 0"]),
        (wrong_formula, ["same factor", "not the paper's", "check_noam_lr"]),
        (swapped_arguments, ["d_model and warmup_steps are swapped", "noam_lr(step + 1, d_model, warmup_steps)"]),
        (warmup_written_in, ["uses warmup_steps = 4000 whatever it is given"]),
        (d_model_written_in, ["uses d_model = 512 whatever it is given"]),
        (rates_as_tensors, ["as tensors", "on a gpu", "python float"]),
        (forgets_to_return, ["returned None", "return"]),
        (returns_the_function, ["should return a scheduler", "step()"]),
        (compounding, ["factors compound", "initial lr times noam_lr(n + 1)"]),
        # a third hidden set: the factor divided by the optimizer's (first) lr
        (divides_by_the_first_lr, ["times the contract's", "which is 1 / 0.5", "return the factor itself"]),
        (divides_by_the_second_lr, ["0.5 times the contract's", "exactly 0.5, which is 1 / 2", "multiplies by one "
                                    "group's lr, or divides by the other's"]),
    ],
)
def test_noam_scheduler_diagnoses_mistakes(fn, phrases):
    if isinstance(fn, type):
        cls = fn
        fn = lambda optimizer, d_model, warmup_steps: cls(optimizer, d_model, warmup_steps)  # noqa: E731
    expect(check_noam_scheduler(fn), "failed", *phrases)


def test_noam_scheduler_outcomes():
    expect(check_noam_scheduler(stub), "not attempted", "NotImplementedError")

    def crashes(optimizer, d_model, warmup_steps):
        return LambdaLR(optimizer, lambda step: noam_lr(step + 1, d_model, warmup_steps)["lr"])

    expect(check_noam_scheduler(crashes), "error", "TypeError")


def test_noam_scheduler_shows_expected_and_actual_values():
    text = "\n".join(check_noam_scheduler(one_behind).messages)
    assert "after 1 step: expected" in text and "got" in text
    assert "lr are 0.5 and 2.0" in text


def test_noam_scheduler_that_draws_random_numbers_still_passes():
    def noisy(optimizer, d_model, warmup_steps):
        torch.randn(3)
        return make_noam_scheduler(optimizer, d_model, warmup_steps)

    expect(check_noam_scheduler(noisy), "passed")


# --------------------------------------------------------------------------
# Red-team catalogue: less common mistakes and unusual correct solutions.


@functools.lru_cache(maxsize=None)
def noam_lr_cached(step, d_model, warmup_steps):
    return noam_lr(step, d_model, warmup_steps)


def noam_lr_extra_factor_argument(step, d_model, warmup_steps, factor=1.0):
    return factor * noam_lr(step, d_model, warmup_steps)


def noam_lr_float32_numpy_scalar(step, d_model, warmup_steps):
    return np.float32(noam_lr(step, d_model, warmup_steps))


@pytest.mark.parametrize("fn", [noam_lr_cached, noam_lr_extra_factor_argument, noam_lr_float32_numpy_scalar])
def test_noam_lr_accepts_unusual_correct_variants(fn):
    expect(check_noam_lr(fn), "passed")


def tensor_requiring_grad(step, d_model, warmup_steps):
    return torch.tensor(noam_lr(step, d_model, warmup_steps), requires_grad=True)


def half_precision_tensor(step, d_model, warmup_steps):
    step = torch.tensor(float(max(step, 1)), dtype=torch.float16)
    return d_model**-0.5 * torch.minimum(step**-0.5, step * warmup_steps**-1.5)


def complex_power(step, d_model, warmup_steps):
    return noam_lr(step, d_model, warmup_steps) + 0 * (step - warmup_steps) ** 0.5


def fixed_d_model(step, d_model, warmup_steps):
    return noam_lr(step, 512, warmup_steps)


def decay_one_step_ahead(step, d_model, warmup_steps):
    step = max(step, 1)
    return d_model ** -0.5 * min((step + 1) ** -0.5, step * warmup_steps ** -1.5)


def fixed_both(step, d_model, warmup_steps):
    return noam_lr(step, 512, 4000)


def fixed_warmup(step, d_model, warmup_steps):
    return noam_lr(step, d_model, 4000)


def doubled(step, d_model, warmup_steps):
    return 2 * noam_lr(step, d_model, warmup_steps)


def step_and_d_model_swapped(d_model, step, warmup_steps):
    return noam_lr(step, d_model, warmup_steps)


def clamped_to_warmup(step, d_model, warmup_steps):
    return noam_lr(min(step, warmup_steps), d_model, warmup_steps)


def negative(step, d_model, warmup_steps):
    return -noam_lr(step, d_model, warmup_steps)


def both_terms_as_an_array(step, d_model, warmup_steps):
    """The two terms of the min, returned side by side: the min itself is forgotten."""
    return d_model ** -0.5 * np.array([step ** -0.5, step * warmup_steps ** -1.5])


@pytest.mark.parametrize(
    "fn, phrases",
    [
        (tensor_requiring_grad, ["requires grad", "plain number", "float"]),
        (half_precision_tensor, ["float16", "significant digits"]),
        (complex_power, ["complex number", "fractional power"]),
        (fixed_d_model, ["uses d_model = 512 whatever it is given", "own arguments"]),
        (fixed_warmup, ["uses warmup_steps = 4000 whatever it is given", "own arguments"]),
        (decay_one_step_ahead, ["decay term is one step ahead", "`step ** -0.5`"]),
        (fixed_both, ["uses d_model = 512 and warmup_steps = 4000 whatever it is given"]),
        (doubled, ["2.0000 times the paper's"]),
        (step_and_d_model_swapped, ["in the order (d_model, step, warmup_steps)", "(step, d_model, warmup_steps)",
                                    "by position"]),
        (clamped_to_warmup, ["after warmup the rate should fall like step ** -0.5"]),
        (negative, ["0 or negative", "always positive"]),
        (both_terms_as_an_array, ["one number", "holding 2 values", "min(...)"]),
    ],
)
def test_noam_lr_diagnoses_unusual_mistakes(fn, phrases):
    expect(check_noam_lr(fn), "failed", *phrases)


def test_noam_lr_reports_a_wrong_formula_before_step_zero():
    result = check_noam_lr(plus_one)  # wrong at step 0 too, but the shift is the cause
    expect(result, "failed")
    assert "one step ahead" in result.messages[0]
    assert any("step 0" in message for message in result.messages[1:])


def scheduler_sequential(optimizer, d_model, warmup_steps):
    from torch.optim.lr_scheduler import SequentialLR

    warm = LambdaLR(optimizer, lambda step: noam_lr(step + 1, d_model, warmup_steps))
    decay = LambdaLR(optimizer, lambda step: noam_lr(step + 1 + warmup_steps, d_model, warmup_steps))
    return SequentialLR(optimizer, [warm, decay], milestones=[warmup_steps])


class OptionalEpoch(HandWrittenComplete):
    """step() accepts an optional step number, like old torch schedulers."""

    def step(self, epoch=None):
        self.step_count = self.step_count + 1 if epoch is None else epoch
        self._apply()


class CallableRate:
    def __init__(self, d_model, warmup_steps):
        self.d_model, self.warmup_steps = d_model, warmup_steps

    def __call__(self, step):
        return noam_lr(step + 1, self.d_model, self.warmup_steps)


def writes_the_lr_and_returns_the_factor(optimizer, d_model, warmup_steps):
    """Writes into the groups too (needlessly: LambdaLR overwrites it with the same value right away)."""
    base_lrs = [group["lr"] for group in optimizer.param_groups]

    def rate(step):
        factor = noam_lr(step + 1, d_model, warmup_steps)
        for group, base in zip(optimizer.param_groups, base_lrs):
            group["lr"] = base * factor
        return factor

    return LambdaLR(optimizer, rate)


@pytest.mark.parametrize(
    "fn",
    [
        scheduler_sequential,
        lambda optimizer, d_model, warmup_steps: OptionalEpoch(optimizer, d_model, warmup_steps),
        lambda optimizer, d_model, warmup_steps: LambdaLR(optimizer, CallableRate(d_model, warmup_steps)),
        writes_the_lr_and_returns_the_factor,
    ],
)
def test_noam_scheduler_accepts_unusual_correct_variants(fn):
    expect(check_noam_scheduler(fn), "passed")


def resumes_with_last_epoch_zero(optimizer, d_model, warmup_steps):
    return LambdaLR(optimizer, lambda step: noam_lr(step + 1, d_model, warmup_steps), last_epoch=0)


def builds_its_own_optimizer(optimizer, d_model, warmup_steps):
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return LambdaLR(torch.optim.SGD(params, lr=1.0), lambda step: noam_lr(step + 1, d_model, warmup_steps))


class WritesDefaults(HandWritten):
    def _apply(self):
        self.optimizer.defaults["lr"] = noam_lr(self.step_count + 1, self.d_model, self.warmup_steps)


class FirstGroupsLrForAll(HandWritten):
    def _apply(self):
        for group in self.optimizer.param_groups:
            group["lr"] = self.base_lrs[0] * noam_lr(self.step_count + 1, self.d_model, self.warmup_steps)


def steps_once_when_built(optimizer, d_model, warmup_steps):
    scheduler = LambdaLR(optimizer, lambda step: noam_lr(step + 1, d_model, warmup_steps))
    scheduler.step()
    return scheduler


def tensor_rate_with_grad(optimizer, d_model, warmup_steps):
    return LambdaLR(optimizer, lambda step: tensor_requiring_grad(step + 1, d_model, warmup_steps))


class WritesAList(HandWritten):
    def _apply(self):
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = [base * noam_lr(self.step_count + 1, self.d_model, self.warmup_steps)]


_SHARED = {"steps": 0}


class GlobalCounter(HandWritten):
    """Counts steps in a module-level dict, so a second scheduler starts where the first stopped."""

    def _apply(self):
        rate = noam_lr(_SHARED["steps"] + 1, self.d_model, self.warmup_steps)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = base * rate

    def step(self):
        _SHARED["steps"] += 1
        self._apply()


def writes_the_lr_and_returns_one(optimizer, d_model, warmup_steps):
    base_lrs = [group["lr"] for group in optimizer.param_groups]

    def rate(step):
        for group, base in zip(optimizer.param_groups, base_lrs):
            group["lr"] = base * noam_lr(step + 1, d_model, warmup_steps)
        return 1.0  # LambdaLR then sets each lr to base * 1.0, over the write above

    return LambdaLR(optimizer, rate)


def writes_the_rate_and_returns_one(optimizer, d_model, warmup_steps):
    def rate(step):
        optimizer.param_groups[0]["lr"] = noam_lr(step + 1, d_model, warmup_steps)
        return 1

    return LambdaLR(optimizer, rate)


def writes_the_lr_and_returns_nothing(optimizer, d_model, warmup_steps):
    def rate(step):
        for group in optimizer.param_groups:
            group["lr"] = noam_lr(step + 1, d_model, warmup_steps)

    return LambdaLR(optimizer, rate)


def returns_scheduler_and_rate(optimizer, d_model, warmup_steps):
    rate = lambda step: noam_lr(step + 1, d_model, warmup_steps)  # noqa: E731
    return LambdaLR(optimizer, rate), rate


def steps_again_after_each_optimizer_step(optimizer, d_model, warmup_steps):
    """A convenience that backfires: the optimizer steps the scheduler, and so does the training loop."""
    scheduler = LambdaLR(optimizer, lambda n: noam_lr(n + 1, d_model, warmup_steps))
    optimizer.register_step_post_hook(lambda *_: scheduler.step())
    return scheduler


@pytest.mark.parametrize(
    "fn, phrases",
    [
        (resumes_with_last_epoch_zero, ["initial_lr", "last_epoch", "-1"]),
        (builds_its_own_optimizer, ["never change", "not on a new optimizer or a copy"]),
        (WritesDefaults, ["never change", "optimizer.defaults"]),
        (FirstGroupsLrForAll, ["first group's initial lr", "base_lrs"]),
        (steps_once_when_built, ["one step ahead", "inside make_noam_scheduler"]),
        (tensor_rate_with_grad, ["requires grad", "plain number"]),
        (WritesAList, ["a list of 1 item", "should be a number"]),
        (returns_scheduler_and_rate, ["should return a scheduler", "a tuple of 2 items"]),
        (writes_the_lr_and_returns_one, ["never change", "writes the rate into `optimizer.param_groups` itself",
                                         "returns 1", "overwrites your write", "return the factor"]),
        (writes_the_rate_and_returns_one, ["writes the rate into `optimizer.param_groups` itself", "returns 1",
                                           "overwrites your write"]),
        (writes_the_lr_and_returns_nothing, ["returned None", "multiplies", "return the factor"]),
        (steps_again_after_each_optimizer_step, ["two steps at every step", "noam_lr(2n + 1)", "hook"]),
    ],
)
def test_noam_scheduler_diagnoses_unusual_mistakes(fn, phrases):
    if isinstance(fn, type):
        cls = fn
        fn = lambda optimizer, d_model, warmup_steps: cls(optimizer, d_model, warmup_steps)  # noqa: E731
    expect(check_noam_scheduler(fn), "failed", *phrases)


def test_noam_scheduler_names_state_shared_between_calls():
    _SHARED["steps"] = 0
    expect(
        check_noam_scheduler(lambda optimizer, d_model, warmup_steps: GlobalCounter(optimizer, d_model, warmup_steps)),
        "failed",
        "first call of make_noam_scheduler",
        "global step counter",
    )


# --------------------------------------------------------------------------
# The scheduler's contract: what lesson 06's training and checkpoint cells call (issue 9).


class NoGetLastLr(HandWritten):
    def state_dict(self):
        return {"step_count": self.step_count}

    def load_state_dict(self, state):
        self.step_count = state["step_count"]
        self._apply()


class NoStateDict(HandWritten):
    def get_last_lr(self):
        return [group["lr"] for group in self.optimizer.param_groups]


class StateWithoutTheStep(HandWrittenComplete):
    """Saves the base rates but not the step count: a resumed run warms up again."""

    def state_dict(self):
        return {"base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state):
        self.base_lrs = list(state["base_lrs"])


class LoadDoesNothing(HandWrittenComplete):
    def load_state_dict(self, state):
        pass


class StateHoldsTheOptimizer(HandWrittenComplete):
    """Its state is its __dict__: the optimizer object inside cannot be loaded with weights_only=True."""

    def state_dict(self):
        return dict(self.__dict__)

    def load_state_dict(self, state):
        self.step_count = state["step_count"]
        self._apply()


class StaleLastLr(HandWrittenComplete):
    def get_last_lr(self):
        return list(self.base_lrs)


class LastLrAsANumber(HandWrittenComplete):
    def get_last_lr(self):
        return self.optimizer.param_groups[0]["lr"]


class StateDictAttribute(HandWritten):
    """state_dict as a dict attribute, not a method."""

    def __init__(self, optimizer, d_model, warmup_steps):
        super().__init__(optimizer, d_model, warmup_steps)
        self.state_dict = {"step_count": 0}

    def get_last_lr(self):
        return [group["lr"] for group in self.optimizer.param_groups]

    def load_state_dict(self, state):
        pass


class LoadsIntoACopy(LambdaLR):
    """load_state_dict restores a copy of the scheduler, not the scheduler itself."""

    def __init__(self, optimizer, d_model, warmup_steps):
        super().__init__(optimizer, lambda step: noam_lr(step + 1, d_model, warmup_steps))

    def load_state_dict(self, state_dict):
        import copy

        LambdaLR.load_state_dict(copy.copy(self), state_dict)


@pytest.mark.parametrize(
    "fn, phrases",
    [
        (HandWritten, ["has no method `get_last_lr`", "scheduler.get_last_lr()[0]", "LRScheduler"]),
        (NoGetLastLr, ["has no method `get_last_lr`"]),
        (NoStateDict, ["has no method `state_dict`", "checkpoint"]),
        (StateDictAttribute, ["`state_dict` that is a dict", "not a method"]),
        (StateWithoutTheStep, ["restored", "warm-up starts again", "step count"]),
        (LoadDoesNothing, ["restored", "warm-up starts again"]),
        (LoadsIntoACopy, ["restored", "warm-up starts again"]),
        (StateHoldsTheOptimizer, ["weights_only=True", "plain data"]),
        (StaleLastLr, ["get_last_lr()", "returned [0.3000, 1.5000]", "current lr"]),
        (LastLrAsANumber, ["get_last_lr()", "a list with one lr per param group"]),
    ],
)
def test_noam_scheduler_contract(fn, phrases):
    if isinstance(fn, type):
        cls = fn
        fn = lambda optimizer, d_model, warmup_steps: cls(optimizer, d_model, warmup_steps)  # noqa: E731
    expect(check_noam_scheduler(fn), "failed", *phrases)


def test_noam_scheduler_passing_lists_the_contract():
    result = check_noam_scheduler(make_noam_scheduler)
    expect(result, "passed")
    assert any("get_last_lr" in item for item in result.checked)
    assert any("state_dict" in item and "weights_only" in item for item in result.checked)


def test_a_property_that_fails_later_is_not_listed_as_working():
    _SHARED["steps"] = 0
    result = check_noam_scheduler(lambda optimizer, d_model, warmup_steps: GlobalCounter(optimizer, d_model, warmup_steps))  # right on the first call only
    expect(result, "failed")
    assert not any("noam_lr(1)" in item or "noam_lr(n + 1)" in item for item in result.checked), result.checked


def test_noam_scheduler_is_called_by_keyword_as_lesson_06_does():
    def positional_names(opt, d, w):
        return make_noam_scheduler(opt, d, w)

    expect(check_noam_scheduler(positional_names), "failed", "d_model=512, warmup_steps=4000",
           "def make_noam_scheduler(optimizer, d_model, warmup_steps)")


def test_a_scheduler_built_on_a_noam_lr_that_fails_its_checker_blames_it_first():
    """As lesson 05's checkers do for their parts: the ZeroDivisionError is noam_lr's, so noam_lr is named."""
    ns = {"torch": torch}
    exec("def noam_lr(step, d_model, warmup_steps):\n"
         "    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)\n\n"
         "def make_noam_scheduler(optimizer, d_model, warmup_steps):\n"
         "    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: noam_lr(step, d_model, warmup_steps))\n",
         ns)
    expect(check_noam_scheduler(ns["make_noam_scheduler"]), "failed", "your noam_lr, which fails its own checker",
           "step = max(step, 1)")


# --------------------------------------------------------------------------
# Found by a fresh hidden set of mistakes (issue 30): a message that sent the learner to noam_lr.


def multiplies_the_current_lr(optimizer, d_model, warmup_steps):
    """The schedule function reads the optimizer's current lr and multiplies it in: LambdaLR multiplies again."""
    return LambdaLR(optimizer, lambda step: optimizer.param_groups[0]["lr"] * noam_lr(step + 1, d_model, warmup_steps))


def test_a_schedule_that_multiplies_the_current_lr_is_named_not_sent_to_noam_lr():
    expect(check_noam_scheduler(multiplies_the_current_lr), "failed", "multiplies by the optimizer's current lr",
           "return the factor alone")
