"""Checkers for lesson 06: the Noam learning-rate schedule and the scheduler built on it.

The oracle is the formula of the paper (section 5.3),
``d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`` with step 0 read
as step 1, evaluated in double precision. The known slips of each exercise
(``NOAM_LR_SLIPS``, ``SCHEDULER_SLIPS``) are mutants of that oracle, replayed
only to name a likely cause once a value is already known to be wrong; mistakes
seen in how the lrs relate (factors that compound, a constant scale, a number
written into the code) are named diagnoses beside them. ``NOAM_LR`` and
``NOAM_SCHEDULER``, at the bottom, declare the two exercises.

The scheduler is also held to what lesson 06 calls on it (its contract in
``course_utils.contracts``): ``step()``, ``get_last_lr()``, and a
``state_dict()`` that survives ``torch.save`` / ``torch.load(weights_only=True)``
and, loaded into a scheduler built the same way, resumes the schedule exactly.
"""

from __future__ import annotations

import inspect
import io
import math
import warnings
from typing import Any, Callable

import torch

from ..contracts import contract
from . import stages
from ._core import Check, CheckResult, Raised, close_enough, describe, fmt_number, generator
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip

_RTOL = 1e-4  # relative: learning rates are tiny, so an absolute tolerance would accept anything


def check_noam_lr(noam_lr: Callable) -> CheckResult:
    """Check ``noam_lr(step, d_model, warmup_steps)`` against the formula of the paper."""
    return NOAM_LR.check(noam_lr)


def check_noam_scheduler(make_noam_scheduler: Callable) -> CheckResult:
    """Check that ``make_noam_scheduler(optimizer, d_model, warmup_steps)`` scales every param group's lr."""
    return NOAM_SCHEDULER.check(make_noam_scheduler)


def _check_noam_lr(check: Check, noam_lr: Callable) -> None:
    check.callable_(noam_lr, "noam_lr")
    # 1. It runs on an ordinary step and returns a number.
    first = check.call(noam_lr, 1, 512, 4000, what="noam_lr")
    at_one, _ = _number(check, first, "at step=1, d_model=512, warmup_steps=4000")
    # 2. Step 0, which LambdaLR really asks for, must give what step 1 gives (reported after the values:
    #    a wrong formula is the first thing to fix).
    zero_problem = _step_zero_problem(check, noam_lr, at_one)
    # 3. The values on grids that cross the warmup boundary.
    rows = _noam_grid(check, noam_lr, zero_problem)
    check.ok("returns a number")
    bad = [r for r in rows if not _near(r[3], r[4])]
    if not bad:
        check.ok("matches d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) before, at and after warmup_steps")
        if zero_problem:
            check.fail(zero_problem)
        if isinstance(first, torch.Tensor):
            check.fail(f"noam_lr's values are right, but it returns them as a tensor ({describe(first)}). Return a "
                       f"Python float (compute with Python numbers and `math`, or call `.item()`): LambdaLR writes "
                       f"the value into the optimizer, and a tensor learning rate makes torch.optim.Adam stop on a "
                       f"GPU (\"lr as a Tensor is not supported for capturable=False and foreach=True\"), where "
                       f"lessons 06 and 08 train.")
        return
    _wrong_values(check, rows, bad, zero_problem)


def _wrong_values(check: Check, rows: list[tuple], bad: list[tuple], zero_problem: str) -> None:
    """The values differ from the paper's: name the slip whose formula gives them, a number written into the code,
    or else describe how the curve behaves; the rows that differ are the figures."""
    table = "\n".join(
        f"  step={s:>6}, d_model={d}, warmup_steps={w}: expected {fmt_number(e)}, got {fmt_number(v)}"
        for d, w, s, v, e in bad[:4]
    )
    values = [v for *_, v, _e in rows]
    slip = matching_slip(NOAM_LR_SLIPS, lambda slip: [slip.replay(_paper, s, d, w) for d, w, s, _v, _e in rows],
                         lambda wrong: _near(values, wrong))
    if slip is not None:
        _fail_values(check, slip.says.showing(table), zero_problem)
    fixed = _fixed_argument([(s, d, w, v) for d, w, s, v, _e in rows], "noam_lr")
    if fixed:
        _fail_values(check, fixed.showing(table), zero_problem)
    check.fail(Diagnosis("noam_lr returns the wrong values.", "\n".join(_curve_notes(rows)), table))


def _check_noam_scheduler(check: Check, make_noam_scheduler: Callable) -> None:
    check.callable_(make_noam_scheduler, "make_noam_scheduler")
    stages.components_first(check, "make_noam_scheduler", stages.called_parts(
        make_noam_scheduler, {"noam_lr": (check_noam_lr, "noam_lr")}))  # a scheduler built on a wrong noam_lr
    _optimizer("SGD", (1.0, 1.0))  # torch.optim's first use in a process imports torch._dynamo (seconds): here, not mid-check
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, case in enumerate(_SCHEDULER_CASES):
            optimizer, scheduler, setup = _build_scheduler(check, make_noam_scheduler, case)
            observed = _observe(check, optimizer, scheduler, case[4], setup)
            _diagnose_scheduler(check, observed, case[1], case[2], case[3], setup, later=i > 0,
                                built=(optimizer, scheduler))
            check.stop_if_problems()
            tensors = [g["lr"] for g in optimizer.param_groups if isinstance(g["lr"], torch.Tensor)]
            if tensors:
                check.fail(f"The learning rates are right, but your scheduler writes them into the optimizer as "
                           f"tensors ({describe(tensors[0])}) {setup}: the schedule function returns a tensor. "
                           f"torch.optim.Adam stops on a GPU, where lessons 06 and 08 train (\"lr as a Tensor is "
                           f"not supported for capturable=False and foreach=True\"). Return a Python float from "
                           f"the function you give LambdaLR (noam_lr's own number, without `torch.tensor(...)`).")
        check.ok("works with SGD and with Adam")
        _schedulers_independent(check, make_noam_scheduler)
        _check_methods(check, scheduler, setup)
        _check_last_lr(check, optimizer, scheduler, setup)
        _check_round_trip(check, make_noam_scheduler, _SCHEDULER_CASES[1])
        drawn = _drawn_scheduler_case(32)
        optimizer, scheduler, setup = _build_scheduler(check, make_noam_scheduler, drawn)
        observed = _observe(check, optimizer, scheduler, drawn[4], setup)
        _diagnose_scheduler(check, observed, drawn[1], drawn[2], drawn[3], setup, built=(optimizer, scheduler))


def _schedulers_independent(check: Check, make_noam_scheduler: Callable) -> None:
    """A scheduler built first keeps its own d_model and warmup_steps once another one has been built."""
    first, second = _SCHEDULER_CASES
    optimizer, scheduler, setup = _build_scheduler(check, make_noam_scheduler, first)
    _build_scheduler(check, make_noam_scheduler, second)
    optimizer.step()
    check.call(scheduler.step, what="scheduler.step()", guard_inputs=False)
    got = [g["lr"] for g in optimizer.param_groups]
    expected = [lr * _paper(2, first[2], first[3]) for lr in first[1]]
    if not _near(got, expected):
        check.fail(Diagnosis(
            f"A scheduler built first {setup} takes on the settings of the next one: something is shared between "
            f"calls (a global, or a function defined outside make_noam_scheduler reading settings that the next call "
            f"changes).", "Build the schedule function inside make_noam_scheduler, from its own arguments.",
            f"After another make_noam_scheduler(optimizer, d_model={second[2]}, warmup_steps={second[3]}), one step "
            f"of the first gives the lrs {[fmt_number(v) for v in got]} instead of "
            f"{[fmt_number(v) for v in expected]}."))
    check.ok("two schedulers built one after the other each keep their own settings")


def _paper(step: int, d_model: int, warmup_steps: int) -> float:
    s = max(step, 1)
    return d_model**-0.5 * min(s**-0.5, s * warmup_steps**-1.5)


def _near(actual: Any, expected: Any) -> bool:
    """Every learning rate within _RTOL of the paper's (numbers or nested lists of numbers)."""
    return close_enough(torch.tensor(actual, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64),
                        atol=1e-15, rtol=_RTOL)


# --------------------------------------------------------------------------
# noam_lr


_STEP_ZERO = (
    "Step 0 really happens: `torch.optim.lr_scheduler.LambdaLR` calls your schedule once with step 0 "
    "while it is being built, to set the starting learning rate. `0 ** -0.5` divides by zero, so the "
    "schedule must treat step 0 as step 1, for example with `step = max(step, 1)` as its first line."
)

#: the known slips of the formula, tried in this order once the values differ (never to accept): each mutant is
#: what the slipped formula gives for (step, d_model, warmup_steps), step 1 or more
NOAM_LR_SLIPS = (
    Slip("no warmup", Diagnosis(
        "There is no warmup: your learning rate is largest at step 1 and only decreases. It matches "
        "`d_model ** -0.5 * step ** -0.5` alone, which is what `min` returns when the warmup term is huge.",
        "Check the sign of the exponent: the paper has `step * warmup_steps ** -1.5` (not `** 1.5`)."),
        lambda s, d, w: d**-0.5 * s**-0.5),
    Slip("d_model ** 0.5", Diagnosis(
        "Your values are d_model times too large: they match `d_model ** 0.5 * ...`.",
        "The factor in front is `d_model ** -0.5` (one over the square root of d_model), so bigger models get "
        "smaller steps."),
        lambda s, d, w: d**0.5 * min(s**-0.5, s * w**-1.5)),
    Slip("max", Diagnosis(
        "Your schedule takes the larger of the two terms: it matches `max(...)` where the paper has "
        "`min(step ** -0.5, step * warmup_steps ** -1.5)`.",
        "With `min`, the linear warmup term is used while it is the smaller one (step < warmup_steps) and the decay "
        "term afterwards."),
        lambda s, d, w: d**-0.5 * max(s**-0.5, s * w**-1.5)),
    Slip("no d_model factor", Diagnosis(
        "Your values are missing the factor `d_model ** -0.5` in front of `min(...)`: they match the formula "
        "without it.", "Multiply the `min(...)` by `d_model ** -0.5`."),
        lambda s, d, w: min(s**-0.5, s * w**-1.5)),
    Slip("one step ahead", Diagnosis(
        "Your schedule is one step ahead: noam_lr(step) returns the paper's value for step + 1.",
        "Use `step` itself (only step 0 is read as step 1, with `max(step, 1)`); the `+ 1` that LambdaLR needs "
        "belongs in the scheduler, not in noam_lr."),
        lambda s, d, w: d**-0.5 * min((s + 1) ** -0.5, (s + 1) * w**-1.5)),
    Slip("decay term ahead", Diagnosis(
        "The decay term is one step ahead: your values match `(step + 1) ** -0.5` where the paper has "
        "`step ** -0.5` (the warmup term is right).", "Use `step` in both terms of the `min`."),
        lambda s, d, w: d**-0.5 * min((s + 1) ** -0.5, s * w**-1.5)),
    Slip("warmup term ahead", Diagnosis(
        "The warmup term is one step ahead: your values match `(step + 1) * warmup_steps ** -1.5` where the paper "
        "has `step * warmup_steps ** -1.5` (the decay term is right).", "Use `step` in both terms of the `min`."),
        lambda s, d, w: d**-0.5 * min(s**-0.5, (s + 1) * w**-1.5)),
    Slip("step and d_model swapped", Diagnosis(
        "Your values match the formula with step and d_model swapped.",
        "noam_lr takes its arguments in the order (step, d_model, warmup_steps)."),
        lambda s, d, w: _paper(d, s, w)),
    Slip("d_model and warmup_steps swapped", Diagnosis(
        "Your values match the formula with d_model and warmup_steps swapped.",
        "noam_lr takes its arguments in the order (step, d_model, warmup_steps)."),
        lambda s, d, w: _paper(s, w, d)),
    Slip("warmup term alone", Diagnosis(
        "Your learning rate keeps growing after warmup_steps: it matches the warmup term "
        "`step * warmup_steps ** -1.5` alone.", "Take the `min` with the decay term `step ** -0.5`."),
        lambda s, d, w: d**-0.5 * s * w**-1.5),
)


def _noam_lr_answer(slip: Slip) -> Callable[[int, int, int], float]:
    """The slip made into a learner's noam_lr (for the generated catalogue tests): step 0 read as step 1."""
    def slipped_noam_lr(step: int, d_model: int, warmup_steps: int) -> float:
        return slip.replay(_paper, max(step, 1), d_model, warmup_steps)

    return slipped_noam_lr


# (d_model, warmup_steps, steps) grids: steps cross the warmup boundary, hit it exactly, and go far.
_GRIDS = [
    (512, 4000, [1, 2, 3, 10, 100, 2000, 3999, 4000, 4001, 8000, 40000, 100000]),
    (64, 10, [1, 2, 5, 9, 10, 11, 20, 40, 1000]),
    (100, 7, [1, 3, 6, 7, 8, 28, 500]),
]


def _drawn_grid(seed: int) -> tuple[int, int, list[int]]:
    """A (d_model, warmup_steps, steps) grid drawn at random (``generator(seed)``: a grading run's hidden seed draws
    another): step 1, a step during warmup, warmup_steps itself, the step after it, and one far beyond."""
    g = generator(seed)
    while True:
        d_model = int(torch.randint(8, 1025, (), generator=g))
        warmup_steps = int(torch.randint(3, 6001, (), generator=g))
        if (d_model, warmup_steps) not in {(d, w) for d, w, _s in _GRIDS}:
            break
    during = int(torch.randint(2, warmup_steps, (), generator=g))
    after = int(torch.randint(warmup_steps + 2, 30 * warmup_steps, (), generator=g))
    return d_model, warmup_steps, [1, during, warmup_steps, warmup_steps + 1, after]


def _number(check: Check, value: Any, where: str) -> tuple[float, bool]:
    """The learner's learning rate as a float, and whether it came out as an integer."""
    if isinstance(value, (list, tuple)):
        several = len(value)
    elif isinstance(value, torch.Tensor):
        several = value.numel()
    else:  # a numpy array has a size; a number has none
        several = getattr(value, "size", 1) if type(value).__module__ == "numpy" else 1
    if several != 1:
        check.fail(
            f"noam_lr should return one number (a float or a 0-d tensor), but {where} it returned {describe(value)}"
            + (" holding 2 values. The rate is the SMALLER of the two terms: return `min(...)` of them, not both."
               if several == 2 else ".")
        )
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            check.fail(
                f"noam_lr returned a tensor that requires grad {where}. A learning rate is a plain number, not "
                f"part of the model's computation graph: return a float (compute with Python numbers and `math`, "
                f"or call `.item()` on a tensor result)."
            )
        if value.dtype in (torch.float16, torch.bfloat16):
            check.fail(
                f"noam_lr returned a {str(value.dtype).replace('torch.', '')} tensor {where}. That format keeps only "
                f"about 3 significant digits (and float16 rounds rates below 6e-8 to 0), so the schedule comes out "
                f"wrong. Return a Python float (or compute in float32/float64)."
            )
        is_int = not value.is_floating_point()
        return float(value.detach().reshape(())), is_int
    if value is None:
        check.fail(f"noam_lr returned None {where}. Did you forget a `return` statement?")
    if isinstance(value, complex):
        check.fail(
            f"noam_lr returned a complex number {where}. In Python, a negative number raised to a "
            f"fractional power, such as `(-3) ** 0.5`, is complex: every base raised to -0.5 or -1.5 here "
            f"(step, d_model, warmup_steps) must be positive."
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        check.fail(f"noam_lr should return a number (a float or a 0-d tensor), but {where} it returned {describe(value)}.")
    return float(value), isinstance(value, int)


def _fail_values(check: Check, message: Diagnosis | str, zero_problem: str) -> None:
    check.problem(message)
    if zero_problem:
        check.problem(zero_problem)
    check.stop_if_problems()


def _step_zero_problem(check: Check, noam_lr: Callable, expected_zero: float) -> str:
    """What is wrong at step 0 ("" when nothing is)."""
    at_zero = check.attempt(noam_lr, 0, 512, 4000, what="noam_lr")
    if isinstance(at_zero, Raised):  # any failure at step 0 gets the step-0 explanation
        text = str(at_zero.exception).strip().splitlines()
        return (
            f"noam_lr(0, 512, 4000) raised {type(at_zero.exception).__name__}"
            + (f": {text[0]}" if text else "")
            + f".\n{_STEP_ZERO}"
        )
    value, _ = _number(check, at_zero, "at step=0")
    if not math.isfinite(value):
        return f"noam_lr(0, 512, 4000) returned {value}, expected {fmt_number(expected_zero)}.\n{_STEP_ZERO}"
    if not _near(value, expected_zero):
        return (
            f"noam_lr(0, 512, 4000) returned {fmt_number(value)}, but step 0 should give the same value as "
            f"step 1 (your noam_lr(1, 512, 4000) = {fmt_number(expected_zero)}).\n"
            + (
                "A learning rate of 0 there means the first update does nothing (or, with torch ops, "
                "`min(inf, 0)` came out as 0).\n"
                if value == 0
                else ""
            )
            + _STEP_ZERO
        )
    check.ok("treats step 0 as step 1")
    return ""


def _noam_grid(check: Check, noam_lr: Callable, zero_problem: str) -> list[tuple]:
    """(d_model, warmup_steps, step, learner's value, expected value) on every grid; integers fail here."""
    rows, ints = [], False
    for d_model, warmup_steps, steps in _GRIDS + [_drawn_grid(31)]:
        for step in steps:
            out = check.call(noam_lr, step, d_model, warmup_steps, what="noam_lr")
            value, is_int = _number(check, out, f"at step={step}, d_model={d_model}, warmup_steps={warmup_steps}")
            ints = ints or is_int
            rows.append((d_model, warmup_steps, step, value, _paper(step, d_model, warmup_steps)))
    if ints or all(v == 0 for *_, v, _e in rows):
        _fail_values(check, Diagnosis(
            f"noam_lr returns {'integers' if ints else '0.0 everywhere'}: the learning rate is a small fraction, and "
            f"integer arithmetic rounds it down to 0.", "Likely causes: floor division `//` (write `1 / x` or "
            "`x ** -0.5`), a cast with `int(...)`, or a tensor built from integers with an integer dtype (use floats, "
            "e.g. `torch.tensor(step, dtype=torch.float32)`).", f"At step=4000, d_model=512, warmup_steps=4000 you "
            f"return {fmt_number(rows[7][3])}, expected {fmt_number(rows[7][4])}."), zero_problem)
    return rows


def _fixed_argument(points: list[tuple[int, int, int, float]], where: str) -> Diagnosis | None:
    """Name a d_model or warmup_steps written into the code, when every (step, d_model, warmup_steps, rate) fits one
    (None otherwise). The rate at step 1 is D ** -0.5 * W ** -1.5, which gives W for each D tried: the value written
    in is inferred from the rates, so this is a diagnosis of its own rather than a slip of the table."""
    firsts = {(d, w): v for s, d, w, v in points if s == 1 and v > 0}
    for fixed_d in (None, 512):  # 512: the paper's d_model, the one a learner writes in
        guesses = {round((v * (fixed_d or d) ** 0.5) ** (-2 / 3), 6) for (d, _w), v in firsts.items()}
        fixed_w = int(guesses.pop()) if len(guesses) == 1 and min(guesses) >= 1 and min(guesses) % 1 == 0 else None
        for d_used, w_used in {(fixed_d, fixed_w), (fixed_d, None)}:
            rebuilt = [_paper(s, d_used or d, w_used or w) for s, d, w, _v in points]
            wrong = [f"{name} = {value}" for name, value, given in (
                ("d_model", d_used, {d for _s, d, _w, _v in points}), ("warmup_steps", w_used, {p[2] for p in points}))
                if value and given != {value}]
            if wrong and _near([v for *_, v in points], rebuilt):
                return Diagnosis(f"Your {where} uses {' and '.join(wrong)} whatever it is given: a number written "
                                 "into the code where the argument belongs.", "Use the function's own arguments, so "
                                 "that lesson 06's small model gets its own schedule.")
    return None


def _curve_notes(rows: list[tuple]) -> list[str]:
    """No named slip fits: describe how the curve behaves instead."""
    lr = {(d, w, s): v for d, w, s, v, _e in rows}
    notes = []
    if any(v <= 0 for *_, v, _e in rows):
        notes.append("Some of your rates are 0 or negative; a learning rate is always positive. A rate of exactly 0 "
                     "usually comes from an integer division (`//`, or `int(...)`) that rounds a small number down: "
                     "compute in floats, `/` and `**`.")
    rise = lr[(512, 4000, 2000)] / lr[(512, 4000, 100)] if lr[(512, 4000, 100)] else float("nan")
    if math.isfinite(rise) and not math.isclose(rise, 20.0, rel_tol=1e-3):
        notes.append(
            f"During warmup the rate should grow in proportion to step: from step 100 to step 2000 "
            f"(warmup_steps=4000) it should be multiplied by 20, yours by {fmt_number(rise)}."
        )
    decay = lr[(512, 4000, 40000)] / lr[(512, 4000, 8000)] if lr[(512, 4000, 8000)] else float("nan")
    if math.isfinite(decay) and not math.isclose(decay, 5**-0.5, rel_tol=1e-3):
        notes.append(
            f"After warmup the rate should fall like step ** -0.5: from step 8000 to step 40000 it should be "
            f"multiplied by {fmt_number(5 ** -0.5)}, yours by {fmt_number(decay)}."
        )
    around = [(s, lr[(64, 10, s)]) for s in (9, 10, 11)]
    if not (around[1][1] > around[0][1] and around[1][1] > around[2][1]):
        values = ", ".join(f"step {s}: {fmt_number(v)}" for s, v in around)
        notes.append(
            f"The peak should be exactly at step == warmup_steps (here 10), where the two terms of `min` "
            f"are equal; yours: {values}. Check the exponents of warmup_steps (-1.5) and of step (-0.5), and that "
            f"the formula uses the warmup_steps argument (not a fixed number)."
        )
    return notes or [_scale_note(rows)]


def _scale_note(rows: list[tuple]) -> str:
    """The curve's shape is right: say how its scale is off."""
    ratios = [v / e for *_, v, e in rows]
    per_setting: dict[tuple[int, int], list[float]] = {}
    for (d, w, _s, _v, _e), ratio in zip(rows, ratios):
        per_setting.setdefault((d, w), []).append(ratio)
    if all(math.isclose(r, ratios[0], rel_tol=1e-3) for r in ratios):
        return (
            f"The shape of your curve is right, but every value is {fmt_number(ratios[0])} times the paper's: "
            f"the only factor in front of `min(...)` is `d_model ** -0.5`."
        )
    if all(math.isclose(r, rs[0], rel_tol=1e-3) for rs in per_setting.values() for r in rs):
        return (
            "Within each setting the shape of your curve is right, but the scale is off by a factor that "
            "changes with d_model and warmup_steps: use the arguments d_model and warmup_steps (not fixed "
            "numbers such as 512 or 4000) in `d_model ** -0.5` and `warmup_steps ** -1.5`."
        )
    return (
        "Your curve has the right shape but not the right values (off by up to "
        f"{fmt_number(100 * max(abs(r - 1) for r in ratios))}%): are the values rounded, or computed in a "
        "low precision?"
    )


# --------------------------------------------------------------------------
# The scheduler.

# (optimizer, initial lrs of the two param groups, d_model, warmup_steps, steps to take)
_SCHEDULER_CASES = [
    ("SGD", (0.5, 2.0), 64, 4, 9),
    ("Adam", (0.3, 1.5), 16, 6, 10),
]


def _drawn_scheduler_case(seed: int) -> tuple:
    """A scheduler case drawn at random (``generator(seed)``: a grading run's hidden seed draws another): the
    optimizer, two initial lrs, d_model and warmup_steps, and enough steps to pass the warmup."""
    g = generator(seed)
    kind = ("SGD", "Adam")[int(torch.randint(0, 2, (), generator=g))]
    lrs = tuple(round(float(x), 3) for x in 0.1 + 2.9 * torch.rand(2, generator=g))
    d_model, warmup_steps = int(torch.randint(4, 1025, (), generator=g)), int(torch.randint(2, 13, (), generator=g))
    return kind, lrs, d_model, warmup_steps, warmup_steps + int(torch.randint(2, 7, (), generator=g))


def _optimizer(kind: str, lrs: tuple[float, float]) -> torch.optim.Optimizer:
    g = generator(0)
    first = torch.nn.Parameter(torch.randn(3, 2, generator=g))
    second = torch.nn.Parameter(torch.randn(2, generator=g))
    groups = [{"params": [first], "lr": lrs[0]}, {"params": [second], "lr": lrs[1]}]
    return torch.optim.SGD(groups) if kind == "SGD" else torch.optim.Adam(groups)


def _build_scheduler(check: Check, make_noam_scheduler: Callable, case: tuple) -> tuple[Any, Any, str]:
    """A fresh optimizer with two param groups and the learner's scheduler on it; fails unless it has step()."""
    kind, lrs, d_model, warmup_steps, _ = case
    optimizer = _optimizer(kind, lrs)
    setup = (
        f"(a torch.optim.{kind} with two param groups whose lr are {lrs[0]} and {lrs[1]}, "
        f"d_model={d_model}, warmup_steps={warmup_steps})"
    )
    # by keyword, as lesson 06 calls it: the parameter names are part of the contract
    scheduler = check.attempt(make_noam_scheduler, optimizer, d_model=d_model, warmup_steps=warmup_steps,
                              what="make_noam_scheduler")
    if isinstance(scheduler, Raised) and isinstance(scheduler.exception, TypeError) and "keyword" in str(scheduler.exception):
        check.fail(
            f"make_noam_scheduler cannot be called as lesson 06 calls it, "
            f"`make_noam_scheduler(optimizer, d_model=512, warmup_steps=4000)`: {scheduler.exception}.\n"
            f"Name its parameters as the exercise does: `def make_noam_scheduler(optimizer, d_model, warmup_steps)`."
        )
    if isinstance(scheduler, Raised):
        _construction_failed(check, make_noam_scheduler, scheduler, optimizer, d_model, warmup_steps)
    if scheduler is None:
        check.fail("make_noam_scheduler returned None. Did you forget to `return` the scheduler you built?")
    step = getattr(scheduler, "step", None)
    if not callable(step):
        check.fail(
            f"make_noam_scheduler should return a scheduler (an object with a `step()` method, normally "
            f"`torch.optim.lr_scheduler.LambdaLR`), but it returned {describe(scheduler)}."
        )
    required = _required_parameters(step)
    if required:
        check.fail(
            f"Your scheduler's step() requires the argument {required[0]!r}, but a training loop calls "
            f"`scheduler.step()` with no argument after each `optimizer.step()`. Let the scheduler count "
            f"the steps itself (LambdaLR does)."
        )
    check.ok("returns a scheduler with a step() method")
    return optimizer, scheduler, setup


def _construction_failed(check: Check, make_noam_scheduler, raised: Raised, optimizer, d_model, warmup_steps) -> None:
    """Name the two usual crashes while building; anything else is shown as the learner's error."""
    exc = raised.exception
    if isinstance(exc, KeyError) and "initial_lr" in str(exc):
        check.fail(
            "make_noam_scheduler crashed while building the scheduler: torch asks for 'initial_lr' in the param "
            "groups, which it does only when a scheduler resumes an interrupted run (last_epoch >= 0). For a "
            "fresh run leave `last_epoch` at its default, -1: LambdaLR then counts the steps from 0 itself."
        )
    if isinstance(exc, ZeroDivisionError) or isinstance(exc, ValueError) and "domain" in str(exc):
        check.fail(
            f"make_noam_scheduler crashed while building the scheduler with {type(exc).__name__}: {exc}.\n{_STEP_ZERO}\n"
            "(LambdaLR multiplies each group's own lr by your function's value, so make the function handle step 0.)"
        )
    if isinstance(exc, TypeError) and "NoneType" in str(exc) and _raised_in_torch_scheduler(exc):
        check.fail(
            f"make_noam_scheduler crashed while building the scheduler with TypeError: {exc}.\n"
            f"Your schedule function returned None: LambdaLR multiplies each group's initial lr by the value the "
            f"function returns (it calls it once with step 0 while it is built). Writing into "
            f"`optimizer.param_groups` inside the function is overwritten anyway.\n{_RETURN_THE_FACTOR}"
        )
    if isinstance(exc, NotImplementedError):  # not attempted: let call() say so, as for every exercise
        check.call(make_noam_scheduler, optimizer, d_model=d_model, warmup_steps=warmup_steps, guard_inputs=False)
    check.error(raised.message)


def _raised_in_torch_scheduler(exc: BaseException) -> bool:
    """Whether the innermost frame of the exception is torch's own scheduler code (not the learner's)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and "lr_scheduler" in tb.tb_frame.f_code.co_filename


def _required_parameters(method: Callable) -> list[str]:
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _lr(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return float("nan")


def _observe(check: Check, optimizer, scheduler, n_steps: int, setup: str) -> list[list[float]]:
    """Every param group's lr before any step and after each of n_steps (optimizer.step(), scheduler.step())."""
    observed = [[_lr(g["lr"]) for g in optimizer.param_groups]]
    for n in range(n_steps + 1):
        if n:
            check.call(optimizer.step, what="optimizer.step()", guard_inputs=False)
            check.call(scheduler.step, what="scheduler.step()", guard_inputs=False)
            observed.append([_lr(g["lr"]) for g in optimizer.param_groups])
        for g in optimizer.param_groups:
            lr = g["lr"]
            if isinstance(lr, bool) or not (
                isinstance(lr, (int, float)) or isinstance(lr, torch.Tensor) and lr.numel() == 1
            ):
                check.fail(
                    f"After {n} call{'s' if n != 1 else ''} of scheduler.step() a param group's lr is "
                    f"{describe(lr)} {setup}; it should be a number: the group's initial lr times noam_lr(...)."
                )
        if any(isinstance(g["lr"], torch.Tensor) and g["lr"].requires_grad for g in optimizer.param_groups):
            check.fail(
                f"After {n} call{'s' if n != 1 else ''} of scheduler.step() the optimizer's lr is a tensor that "
                f"requires grad {setup}. A learning rate is a plain number, not part of the model's computation "
                f"graph: make the schedule return a float (compute with Python numbers and `math`, or call "
                f"`.item()` on a tensor result)."
            )
    return observed


def _diagnose_scheduler(check, observed, lrs, d_model, warmup_steps, setup, later=False, built=()) -> None:
    """Compare the observed lrs with initial lr * noam_lr(n + 1); name the likely cause when they differ.

    ``built`` is the (optimizer, scheduler) observed: its schedule function is probed once the lrs are wrong.
    """
    expected = _contract(lrs, d_model, warmup_steps, len(observed))
    if _near(observed, expected):
        if later:  # recorded on the last case only: it held on every case before it too
            check.ok("before any step every param group's lr is its initial lr * noam_lr(1)")
            check.ok("after n calls of scheduler.step() each lr is its initial lr * noam_lr(n + 1), past warmup_steps too")
        return
    diagnosis = _scheduler_cause(check, observed, (lrs, d_model, warmup_steps), built)
    if later:
        diagnosis = Diagnosis(f"{_LATER_CALL} {diagnosis.cause}", diagnosis.fix)
    check.fail(diagnosis.showing(_lr_figures(observed, expected, setup, warmup_steps)))


_LATER_CALL = (
    "The scheduler from your first call of make_noam_scheduler (on an SGD optimizer) was right, but this one, from a "
    "second call, is not. Does your scheduler keep state outside itself (a global step counter, a mutable default "
    "argument) that carries over from one call to the next? Each scheduler must count its own steps from 0."
)


def _lr_figures(observed, expected, setup: str, warmup_steps: int) -> str:
    """The lrs expected and observed, at the first steps, around warmup_steps and at the last step."""
    n_rows = len(observed)
    shown = "\n".join(
        f"  after {n} step{'s' if n != 1 else ''}: expected [{', '.join(fmt_number(v) for v in expected[n])}], "
        f"got [{', '.join(fmt_number(v) for v in observed[n])}]"
        for n in sorted({0, 1, 2, warmup_steps - 1, warmup_steps, n_rows - 1}) if 0 <= n < n_rows
    )
    return f"The learning rates in the optimizer's param groups {setup}:\n{shown}"


def _scheduler_cause(check, observed, setting: tuple, built: tuple) -> Diagnosis:
    """Why the lrs differ from the contract's, the most specific cause first: rates that are not finite, the
    schedule function probed, a known slip replayed, a relation between the lrs, or else the contract restated."""
    slip = matching_slip(SCHEDULER_SLIPS, lambda slip: slip.replay(None, *setting, len(observed)), _fits(observed))
    return (_not_finite(observed)
            or (_write_overwritten(check, *built) if built else None)
            or (_COUNTS_ON_ITS_OWN if built and _counts_on_its_own(check, built[1]) else None)
            or (slip.says if slip is not None else None)
            or _scheduler_relations(observed, *setting)
            or Diagnosis("The learning rates in the optimizer's param groups are wrong.", "Each group's lr should be "
                         "its initial lr times noam_lr(n + 1) after n calls of scheduler.step(), and nothing else: "
                         "`torch.optim.lr_scheduler.LambdaLR` multiplies every group's initial lr by the value of a "
                         "function of the step count, which is exactly this."))


def _not_finite(observed) -> Diagnosis | None:
    if all(math.isfinite(v) for row in observed for v in row):
        return None
    if not all(math.isfinite(v) for v in observed[0]):
        return Diagnosis("Some learning rates are inf or NaN before the first step.", _STEP_ZERO)
    return Diagnosis("Some learning rates are inf or NaN during training.")


def _fits(observed) -> Callable[[Any], bool]:
    """``agrees`` for :func:`matching_slip`: a slip's table of lrs is the observed one, where it predicts a value
    (None: the slip says nothing about that lr)."""
    def agrees(predicted) -> bool:
        if not isinstance(predicted, list) or len(predicted) != len(observed):
            return False
        pairs = [(o, p) for seen, said in zip(observed, predicted) for o, p in zip(seen, said) if p is not None]
        return _near([o for o, _p in pairs], [p for _o, p in pairs])

    return agrees


def _table(n_rows: int, lr: Callable[[int, int], float | None]) -> list[list[float | None]]:
    """The lrs of the two param groups, ``lr(n, g)``, after n = 0 .. n_rows - 1 calls of scheduler.step()."""
    return [[lr(n, g) for g in range(2)] for n in range(n_rows)]


def _contract(lrs, d_model: int, warmup_steps: int, n_rows: int) -> list[list[float]]:
    """The oracle: after n calls of scheduler.step(), group g's lr is its initial lr * noam_lr(n + 1)."""
    return _table(n_rows, lambda n, g: lrs[g] * _paper(n + 1, d_model, warmup_steps))


def _reading(group: int | None) -> Callable[..., list[list[float]]]:
    """The mutant whose schedule function multiplies by a group's current lr (``group``; None: each its own), read
    before LambdaLR writes: after n steps, lr = initial lr * (that lr just before) * noam_lr(n + 1)."""
    def mutant(lrs, d_model: int, warmup_steps: int, n_rows: int) -> list[list[float]]:
        rows = [list(lrs)]  # the lrs before the scheduler is built
        for n in range(n_rows):
            rows.append([lrs[g] * rows[-1][g if group is None else group] * _paper(n + 1, d_model, warmup_steps)
                         for g in range(2)])
        return rows[1:]

    return mutant


#: the scheduler's known slips, tried in this order once the lrs differ from the contract's (never to accept): each
#: mutant gives the table of lrs, ``mutant(lrs, d_model, warmup_steps, n_rows)``, the slip makes (None: any lr)
SCHEDULER_SLIPS = (
    Slip("never written", Diagnosis(
        "The learning rates never change: your scheduler computes a value but never writes it into the optimizer "
        "it was given.", "Build the scheduler on that optimizer (not on a new optimizer or a copy) and set every "
        "`param_group['lr']`; `optimizer.defaults` is not read once the groups exist (LambdaLR(optimizer, ...) "
        "sets the groups for you on construction and on every `scheduler.step()`)."),
        lambda lrs, d, w, rows: _table(rows, lambda n, g: lrs[g])),
    Slip("first group only", Diagnosis(
        "Only the first param group is updated: the second keeps its initial lr.",
        "Loop over `optimizer.param_groups` and set the lr of every group (LambdaLR does this for you)."),
        lambda lrs, d, w, rows: _table(rows, lambda n, g: lrs[1] if g else None)),
    Slip("first group's lr for all", Diagnosis(
        "Every group is scaled from the FIRST group's initial lr: the second group gets the first group's initial "
        "lr times noam_lr(n + 1) instead of its own initial lr times noam_lr(n + 1).",
        "Keep one initial lr per group (LambdaLR stores them as `base_lrs`)."),
        lambda lrs, d, w, rows: _table(rows, lambda n, g: lrs[0] * _paper(n + 1, d, w))),
    Slip("one step behind", Diagnosis(
        "Your scheduler is one step behind: after n calls of scheduler.step() the lr is initial lr * noam_lr(n), "
        "but it should be noam_lr(n + 1).", "LambdaLR passes your function the number of scheduler.step() calls "
        "made so far (0 before the first), while the update that follows is the paper's step number n + 1: give "
        "noam_lr the step count plus one."),
        lambda lrs, d, w, rows: _table(rows, lambda n, g: lrs[g] * _paper(n, d, w))),
    Slip("one step ahead", Diagnosis(
        "Your scheduler is one step ahead: after n calls of scheduler.step() the lr is initial lr * noam_lr(n + 2), "
        "but it should be noam_lr(n + 1).", "Did you add 1 twice (in the scheduler and in noam_lr), or call "
        "scheduler.step() once inside make_noam_scheduler? The training loop makes every call of scheduler.step()."),
        lambda lrs, d, w, rows: _table(rows, lambda n, g: lrs[g] * _paper(n + 2, d, w))),
    Slip("d_model and warmup_steps swapped", Diagnosis(
        "Your rates match noam_lr(step + 1, warmup_steps, d_model): d_model and warmup_steps are swapped in the "
        "call.", "noam_lr takes (step, d_model, warmup_steps): `noam_lr(step + 1, d_model, warmup_steps)`, or pass "
        "them by keyword."),
        lambda lrs, d, w, rows: _table(rows, lambda n, g: lrs[g] * _paper(n + 1, w, d))),
    Slip("two steps per step", Diagnosis(
        "Your scheduler moves two steps at every step: after n calls of scheduler.step() the lr is initial lr * "
        "noam_lr(2n + 1). Something steps it a second time: a hook on the optimizer that calls scheduler.step(), "
        "or a step inside the schedule function.", "make_noam_scheduler only builds the scheduler; the training "
        "loop calls scheduler.step() once per step, after optimizer.step()."),
        lambda lrs, d, w, rows: _table(rows, lambda n, g: lrs[g] * _paper(2 * n + 1, d, w)) if rows > 2 else None),
    Slip("not set when built", Diagnosis(
        "Before the first scheduler.step() the lr is still the initial lr: it should already be initial lr * "
        "noam_lr(1).", "Set the lr when the scheduler is built (LambdaLR does this in its constructor)."),
        lambda lrs, d, w, rows: _table(rows, lambda n, g: lrs[g] * (_paper(n + 1, d, w) if n else 1))),
    Slip("0 at step 0", Diagnosis("Before the first step the lr is 0: your schedule returned 0 for step 0.",
                                  _STEP_ZERO),
         lambda lrs, d, w, rows: _table(rows, lambda n, g: None if n else 0.0)),
    *(Slip(name, Diagnosis(
        "Your schedule function multiplies by the optimizer's current lr (it reads `param_groups[...]['lr']`), so "
        "each lr carries the one before it and the rates collapse.", "LambdaLR already multiplies each group's "
        "initial lr by your function's value: return the factor alone, `noam_lr(step + 1, d_model, "
        "warmup_steps)`, with no lr in it."), _reading(group))
      for name, group in (("reads its group's lr", None), ("reads the first group's lr", 0),
                          ("reads the second group's lr", 1))),
)


def _scheduler_relations(observed, lrs, d_model: int, warmup_steps: int) -> Diagnosis | None:
    """Mistakes seen in how the lrs relate (to each other, to the step before, to the contract's) rather than
    replayed, the first that holds: both groups equal, factors that compound, a constant scale or a number written
    in, the right ratio between the groups with another factor."""
    if _near([row[0] for row in observed], [row[1] for row in observed]):
        return Diagnosis(
            "Both param groups get the same lr although they started from different ones: your scheduler sets the lr "
            "to the schedule's value and ignores the optimizer's own lr.", "The contract is lr = initial lr * "
            "noam_lr(...): the optimizer's lr acts as a factor (that is what LambdaLR does).")
    if _compounds(observed, d_model, warmup_steps):
        return Diagnosis(
            "Each scheduler.step() multiplies the current lr by the schedule's value, so the factors compound and "
            "the lr collapses.", "The lr after n steps should be the initial lr times noam_lr(n + 1), not the "
            "product of all the rates so far (MultiplicativeLR compounds; LambdaLR scales the initial lr).")
    ratios = [[observed[n][g] / lrs[g] for g in range(2)] for n in range(len(observed))]
    return _scaled_or_fixed(observed, lrs, d_model, warmup_steps) or (Diagnosis(
        "Both groups are scaled by the same factor, as they should be, but the factor is not the paper's "
        "noam_lr(n + 1).", "Check the formula (run check_noam_lr on your noam_lr) and that the scheduler passes "
        "step + 1, d_model and warmup_steps in the right order.")
        if all(math.isclose(r[0], r[1], rel_tol=1e-4) for r in ratios) else None)


def _compounds(observed, d_model: int, warmup_steps: int) -> bool:
    """Each lr is the one before it times noam_lr(n) or noam_lr(n + 1), in both groups (MultiplicativeLR's way)."""
    n_rows = len(observed)
    return all(observed[n - 1][g] for n in range(1, n_rows) for g in range(2)) and any(
        _near([[observed[n][g] / observed[n - 1][g] for g in range(2)] for n in range(1, n_rows)],
              [[_paper(n + shift, d_model, warmup_steps)] * 2 for n in range(1, n_rows)])
        for shift in (0, 1))


def _scaled_or_fixed(observed, lrs, d_model: int, warmup_steps: int) -> Diagnosis | None:
    """Every lr a constant times the contract's (an lr multiplied or divided in), or a d_model or warmup_steps
    written into the code; a constant that is an lr is named before a number written in."""
    n_rows = len(observed)
    fixed = _fixed_argument([(n + 1, d_model, warmup_steps, observed[n][g] / lrs[g]) for n in range(n_rows)
                             for g in range(2)], "scheduler")
    scale = [observed[n][g] / (lrs[g] * _paper(n + 1, d_model, warmup_steps)) for n in range(n_rows)
             for g in range(2) if lrs[g] * _paper(n + 1, d_model, warmup_steps)]
    constant = bool(scale) and all(math.isfinite(c) for c in scale) and \
        all(math.isclose(c, scale[0], rel_tol=1e-4) for c in scale) and not math.isclose(scale[0], 1.0, rel_tol=1e-4)
    if not constant:
        return fixed
    by_lr = _by_an_lr(scale[0], lrs)
    if fixed and not by_lr:
        return fixed
    return Diagnosis(
        f"Every lr is {scale[0]:.4g} times the contract's{by_lr}, at every step and in both groups: the schedule's "
        f"shape is right, its scale is not.", "LambdaLR multiplies each group's initial lr by the value of your "
        "function, so return the factor itself, `noam_lr(step + 1, d_model, warmup_steps)`, with no lr in it.")


def _by_an_lr(scale: float, lrs) -> str:
    """How a constant scale comes from the initial lrs ("" when it does not)."""
    divided = [lr for lr in lrs if math.isclose(scale * lr, 1, rel_tol=1e-4)]
    multiplied = [lr for lr in lrs if math.isclose(scale, lr, rel_tol=1e-4)]
    return (f" (exactly {multiplied[0]:g}, which is 1 / {divided[0]:g}: your function multiplies by one "
            f"group's lr, or divides by the other's)" if divided and multiplied else
            f" (exactly 1 / {divided[0]:g}: your function divides by an lr)" if divided else
            f" (exactly {multiplied[0]:g}: your function multiplies by an lr)" if multiplied else "")


class _Replayed:
    """A scheduler that writes a slip's table of lrs into the optimizer (the contract's where the slip says
    nothing): a slip made into a learner's answer."""

    def __init__(self, optimizer, slipped: list, right: list):
        self.optimizer, self.rows, self.n = optimizer, [[s if s is not None else r for s, r in zip(*pair)]
                                                        for pair in zip(slipped, right)], 0
        self._write()

    def _write(self) -> None:
        for group, lr in zip(self.optimizer.param_groups, self.rows[self.n]):
            group["lr"] = lr

    def step(self) -> None:
        self.n += 1
        self._write()


def _scheduler_answer(slip: Slip) -> Callable:
    """The slip made into a learner's make_noam_scheduler (for the generated catalogue tests)."""
    def slipped_make_noam_scheduler(optimizer, d_model, warmup_steps):
        lrs = tuple(group["lr"] for group in optimizer.param_groups)
        rows = 100  # more steps than any case takes
        return _Replayed(optimizer, slip.replay(None, lrs, d_model, warmup_steps, rows),
                         _contract(lrs, d_model, warmup_steps, rows))

    return slipped_make_noam_scheduler


def _counts_on_its_own(check, scheduler) -> bool:
    """Whether the scheduler's function (LambdaLR's lr_lambdas[0]) answers the same step number differently twice."""
    functions = getattr(scheduler, "lr_lambdas", None)
    if not isinstance(functions, list) or not functions or not callable(functions[0]):
        return False
    first, second = (check.attempt(functions[0], 3, what="your schedule function") for _ in range(2))
    return all(isinstance(v, (int, float)) for v in (first, second)) and not _near(first, second)


_COUNTS_ON_ITS_OWN = Diagnosis(
    "Your schedule function gives two different values when it is called twice with the same step number: it counts "
    "steps with state of its own (a global, an attribute, a default argument), and LambdaLR calls it once per param "
    "group at every step, and again when a scheduler is rebuilt or restored.", "Compute the factor from the step "
    "number LambdaLR passes, and from nothing else: `lambda step: noam_lr(step + 1, d_model, warmup_steps)`.")

_RETURN_THE_FACTOR = (
    "Leave the optimizer alone in that function: return the factor, `noam_lr(step + 1, d_model, warmup_steps)`, "
    "and LambdaLR writes initial lr * factor into every group itself, on construction and on every "
    "scheduler.step() (and keeps get_last_lr() and state_dict() in step with it)."
)


def _write_overwritten(check: Check, optimizer: Any, scheduler: Any) -> Diagnosis | None:
    """None unless the scheduler's schedule function writes lrs into the optimizer itself and returns a constant,
    which LambdaLR multiplies into each initial lr and writes over the function's own write."""
    functions = getattr(scheduler, "lr_lambdas", None)
    if not isinstance(functions, (list, tuple)) or not functions or not callable(functions[0]):
        return None
    groups = optimizer.param_groups
    before = [g["lr"] for g in groups]
    returned, wrote = set(), False
    try:
        for step in (0, 1, 2, 7):
            for function in functions:
                value = check.attempt(function, step, what="the scheduler's schedule function")
                if isinstance(value, Raised):
                    return None
                returned.add(_lr(value))
                wrote = wrote or any(g["lr"] is not lr and _lr(g["lr"]) != _lr(lr) for g, lr in zip(groups, before))
                for g, lr in zip(groups, before):
                    g["lr"] = lr
    finally:
        for g, lr in zip(groups, before):
            g["lr"] = lr
    if not wrote or len(returned) != 1:
        return None
    value = returned.pop()
    return Diagnosis(
        f"The learning rates never change: your schedule function writes the rate into `optimizer.param_groups` "
        f"itself and returns {value:g}. LambdaLR calls it, then sets every group's lr to that group's initial lr "
        f"times the returned value, so it overwrites your write at once (here with initial lr * {value:g}"
        + (", the initial lr" if value == 1 else "") + ").", _RETURN_THE_FACTOR)


# --------------------------------------------------------------------------
# What lesson 06 calls on the scheduler: get_last_lr, and a checkpoint's state_dict / load_state_dict.

_METHOD_USES = {
    "get_last_lr": "lesson 06's training loop calls `scheduler.get_last_lr()[0]` to show the learning rate",
    "state_dict": "lesson 06's checkpoint cell saves `scheduler.state_dict()`",
    "load_state_dict": "lesson 06's checkpoint cell restores a scheduler with `scheduler.load_state_dict(...)`",
}


def _check_methods(check: Check, scheduler: Any, setup: str) -> None:
    """Every method of the contract exists (and is a method, not a plain attribute)."""
    for name in contract("make_noam_scheduler").methods:
        value = getattr(scheduler, name, None)
        if not callable(value):
            kind = "a dict" if isinstance(value, dict) else describe(value)
            what = f"has no method `{name}`" if value is None else f"has an attribute `{name}` that is {kind}, not a method"
            check.fail(
                f"Your scheduler ({type(scheduler).__name__}) {what}, but {_METHOD_USES.get(name, 'the course calls it')}.\n"
                f"The course needs step(), get_last_lr(), state_dict() and load_state_dict(). "
                f"`torch.optim.lr_scheduler.LambdaLR` has them all; a scheduler of your own gets them by "
                f"subclassing `torch.optim.lr_scheduler.LRScheduler` (write its `get_lr()`)."
            )
    check.ok("has step(), get_last_lr(), state_dict() and load_state_dict()")


def _check_last_lr(check: Check, optimizer, scheduler, setup: str) -> None:
    """get_last_lr() is the list of the current lrs, one per param group."""
    last = check.call(scheduler.get_last_lr, what="scheduler.get_last_lr()")
    current = [_lr(g["lr"]) for g in optimizer.param_groups]
    if not isinstance(last, (list, tuple)) or len(last) != len(current):
        check.fail(
            f"scheduler.get_last_lr() returned {describe(last)} {setup}; it should return a list with one lr per "
            f"param group (the training loop reads `scheduler.get_last_lr()[0]`)."
        )
    values = [_lr(v) for v in last]
    if not _near(values, current):
        check.fail(
            f"scheduler.get_last_lr() returned [{', '.join(fmt_number(v) for v in values)}] {setup}, but the current "
            f"lr of the param groups is [{', '.join(fmt_number(v) for v in current)}]. It should return the "
            f"lrs the scheduler set last, as a list (LambdaLR keeps them in `self._last_lr`)."
        )
    check.ok("get_last_lr() returns the current lr of every param group")


def _check_round_trip(check: Check, make_noam_scheduler: Callable, case: tuple) -> None:
    """Save mid-warm-up as lesson 06 does, restore into new objects, and take one more step with each."""
    kind, lrs, d_model, warmup_steps, _ = case
    optimizer, scheduler, setup = _build_scheduler(check, make_noam_scheduler, case)
    _observe(check, optimizer, scheduler, 3, setup)
    saved = check.call(scheduler.state_dict, what="scheduler.state_dict()")
    try:
        buffer = io.BytesIO()
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": saved}, buffer)
        buffer.seek(0)
        state = torch.load(buffer, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - the learner's state holds objects that cannot be saved or loaded safely
        first = str(exc).strip().splitlines()
        check.fail(
            f"Your scheduler's state_dict() cannot be loaded back with `torch.load(path, weights_only=True)`, as "
            f"lesson 06's checkpoint cell does: it holds {_state_kinds(saved)}.\n"
            f"A state_dict must be plain data (numbers, strings, lists, dicts, tensors), not the optimizer, a "
            f"function or another object. Keep only what changes: the step count (LambdaLR's state_dict does this)."
            + (f"\n(torch said: {first[0][:160]})" if first else "")
        )
    restored_optimizer, restored, _ = _build_scheduler(check, make_noam_scheduler, case)
    restored_optimizer.load_state_dict(state["optimizer"])
    check.call(restored.load_state_dict, state["scheduler"], what="scheduler.load_state_dict(state)", guard_inputs=False)
    after = []
    for opt, sched in ((optimizer, scheduler), (restored_optimizer, restored)):
        opt.step()
        check.call(sched.step, what="scheduler.step()", guard_inputs=False)
        after.append([_lr(g["lr"]) for g in opt.param_groups])
    if not _near(after[1], after[0]):
        check.fail(Diagnosis(
            f"A scheduler restored from a checkpoint does not resume the schedule {setup}, so a resumed run's warm-up "
            f"starts again.", "state_dict() must hold the step count and load_state_dict() must put it back into the "
            "scheduler itself (LambdaLR does both).",
            f"Saved after 3 steps and restored into a new scheduler (with the optimizer's state restored too), one "
            f"more step gives lrs [{', '.join(fmt_number(v) for v in after[1])}] instead of "
            f"[{', '.join(fmt_number(v) for v in after[0])}]."))
    check.ok("its state_dict() survives torch.save / torch.load(weights_only=True), and load_state_dict() resumes "
             "the schedule exactly")


def _state_kinds(state: Any) -> str:
    if isinstance(state, dict):
        kinds = sorted({type(v).__name__ for v in state.values()} - {"int", "float", "str", "list", "dict", "bool",
                                                                       "NoneType", "Tensor", "tuple"})
        if kinds:
            return "objects of type " + ", ".join(kinds)
    return describe(state)


NOAM_LR = Exercise(
    "noam_lr", _check_noam_lr,
    oracle="the paper's formula (section 5.3), d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) with step 0 "
           "read as step 1, in double precision",
    cases="three (d_model, warmup_steps) grids whose steps cross warmup_steps, hit it and go far past it, one grid "
          "drawn from the check's seed, and step 0",
    slips=NOAM_LR_SLIPS, answer=_noam_lr_answer)

NOAM_SCHEDULER = Exercise(
    "make_noam_scheduler", _check_noam_scheduler,
    oracle="after n calls of scheduler.step(), each param group's initial lr * noam_lr(n + 1), by the paper's formula",
    cases="an SGD and an Adam optimizer with two param groups of different lrs, stepped past warmup_steps, one case "
          "drawn from the check's seed; two schedulers built one after the other; a state_dict saved mid-warm-up "
          "and loaded into a new scheduler",
    slips=SCHEDULER_SLIPS, answer=_scheduler_answer)


__all__ = ["check_noam_lr", "check_noam_scheduler"]
