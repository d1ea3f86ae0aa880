"""Stages about values: a sweep against the oracle (with the exercise's slips named), gradients, every parameter
reached by a loss.
"""


from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch
from torch import nn

from .._core import ATOL, RTOL, Check, close_enough, generator
from ..slips import Slip, matching_slip, same_tensor


@dataclasses.dataclass
class Case:
    """One input of a sweep: its label in messages, and whatever ``run`` and ``expected`` read from it."""

    label: str
    data: Any
    atol: float | None = None  # this case's own absolute tolerance (float32 inputs far from 0 carry larger errors)


def sweep(check: Check, cases: Sequence[Case], run: Callable[[Case], torch.Tensor],
          expected: Callable[[Case], torch.Tensor], what: str, atol: float = ATOL, rtol: float = RTOL,
          hint: str = "", fresh: Callable[[Case], Any] | None = None,
          slips: Sequence[Slip] = (), replay: Callable[[Slip, Case], Any] | None = None) -> None:
    """Each case in turn against the oracle, on the same function or module.

    A wrong answer that belongs to an earlier case, or that a fresh instance (``fresh(case)``, for a module
    that already ran) gets right, is named as state kept between calls. ``slips`` are the exercise's known
    mistakes (:class:`~..slips.Slip`), ``replay(slip, case)`` what one computes for a case (by default its
    mutant called with the case); they are tried only once the values differ (never to accept).
    """
    kept = ("something is kept between calls (a global, a default argument, a cache or an attribute set in "
            "forward that ignores some argument). Compute everything from each call's own arguments.")
    sweep_atol = atol
    for i, case in enumerate(cases):
        atol = case.atol if case.atol is not None else sweep_atol
        out = run(case)
        want = expected(case)
        if close_enough(out, want, atol, rtol):
            continue
        again = fresh(case) if fresh is not None else None
        if isinstance(again, torch.Tensor) and close_enough(again, want, atol, rtol):
            check.fail(f"For {case.label}, a new instance of your {what} is right but the one that already ran on "
                       f"other inputs is not, so it answers from an earlier call: {kept}")
        for earlier in cases[:i]:
            before = expected(earlier)
            if isinstance(out, torch.Tensor) and out.shape == before.shape and close_enough(out, before, atol, rtol):
                check.fail(f"For {case.label}, your {what} returns the answer for {earlier.label}, an earlier call: {kept}")
        slip = matching_slip(slips, lambda s: replay(s, case) if replay else s.replay(None, case),
                             same_tensor(out, atol, rtol))
        if slip is not None:
            check.fail(f"{slip.message}\nSeen for {case.label}.")
        first = cases[0].label
        check.close(out, want, f"your {what} for {case.label}", atol=atol, rtol=rtol, hint=hint or (
            f"It works for {first}, but not for {case.label}: is a size fixed somewhere, or something kept from "
            f"an earlier call?" if i else ""))


_DETACHED = ("Likely cause: a `.detach()`, `.data` or `torch.no_grad()` on the way, or a tensor rebuilt from "
             "numbers (`.item()`, `torch.tensor(...)`, numpy).")


def gradients(check: Check, run: Callable[..., torch.Tensor], inputs: dict[str, torch.Tensor],
              expected: Callable[[torch.Tensor], dict[str, torch.Tensor]], what: str, oracle: str,
              params: dict[str, torch.Tensor] | None = None, causes: dict[frozenset, str] | None = None,
              atol: float = 1e-4, rtol: float = 1e-3, seed: int = 9) -> None:
    """Gradients of a random linear function of the output, with respect to ``inputs`` and ``params``.

    ``run(*leaves)`` is the learner's output for the inputs, in order, made to require grad; ``expected(r)``
    gives the oracle's gradients of ``(output * r).sum()`` under the same names (the names appear in messages). ``causes`` names a set of wrong
    gradients (``frozenset({"query", "key"})``) with its likely cause.
    """
    leaves = {name: t.detach().clone().requires_grad_(True) for name, t in inputs.items()}
    out = run(*leaves.values())
    if not isinstance(out, torch.Tensor) or not out.requires_grad or out.grad_fn is None:
        names = " and ".join(inputs)
        check.fail(
            f"Your {what} does not require grad (its requires_grad is False), although the inputs it was given "
            f"({names}) require grad: it is not connected to {names} through autograd, so nothing before it could "
            f"ever be trained.\n{_DETACHED}"
        )
    r = torch.randn(out.shape, generator=generator(seed), dtype=out.dtype)
    targets = {**leaves, **(params or {})}
    got = torch.autograd.grad((out * r).sum(), list(targets.values()), allow_unused=True)
    want = expected(r.double())
    wrong = [name for name, g in zip(targets, got) if g is None or not close_enough(g, want[name], atol, rtol)]
    if wrong:
        cause = (causes or {}).get(frozenset(wrong)) or (
            f"{_DETACHED.replace('on the way', 'on the way from ' + ' and '.join(wrong) + ' to the output')}")
        check.fail(f"Your {what} is right, but the gradient with respect to {', '.join(wrong)} differs from "
                   f"{oracle}'s.\n{cause}")
    check.ok(f"gradients reach {', '.join(targets)} as with {oracle}")


def oracle_gradients(oracle: Callable[..., torch.Tensor], tensors: dict[str, torch.Tensor],
                     ) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    """``expected`` for ``gradients``: the oracle's gradients of ``(oracle(*tensors) * r).sum()``, in float64.

    ``tensors`` are the inputs and parameters, in the oracle's argument order, under the names ``gradients``
    reports; the oracle runs on detached float64 leaves, so the learner's own tensors get no gradient.
    """
    def expected(r: torch.Tensor) -> dict[str, torch.Tensor]:
        leaves = [t.detach().double().requires_grad_(True) for t in tensors.values()]
        return dict(zip(tensors, torch.autograd.grad((oracle(*leaves) * r).sum(), leaves)))
    return expected


def every_parameter_learns(check: Check, module: nn.Module, out: torch.Tensor, what: str, seed: int = 7,
                           why: str = "") -> None:
    """A random loss on ``out`` reaches every trainable parameter of ``module`` (``why``: the likely cause to name
    when some do not, instead of the general one)."""
    if not out.requires_grad:
        check.fail(f"The output of your {what} does not require a gradient: is part of forward run under "
                   f"torch.no_grad() or .detach()ed?")
    module.zero_grad(set_to_none=True)
    weights = torch.randn(out.shape, generator=generator(seed))
    check.call(lambda: (out.double() * weights.double()).sum().backward(), what=f"{what} (in the backward pass)")
    missing = [n for n, p in module.named_parameters() if p.requires_grad and p.grad is None]
    module.zero_grad(set_to_none=True)
    if missing:
        shown = ", ".join(f"`{n}`" for n in missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        for stack, layers in module.named_children():  # every layer of a stack but the last: not chained
            if isinstance(layers, nn.ModuleList) and len(layers) > 1:
                idle = {n for n in missing if n.startswith(f"{stack}.")}
                if idle and idle == {f"{stack}.{n}" for n, p in layers[:-1].named_parameters() if p.requires_grad}:
                    check.fail(
                        f"Only the last of your {what}'s `{stack}` reaches the output: the parameters of the others "
                        f"receive no gradient ({shown}). Each layer must take the previous layer's output, "
                        f"`x = layer(x, ...)` in the loop, not the loop's input each time.")
        check.fail(
            f"{len(missing)} parameter{'s' if len(missing) != 1 else ''} of your {what} receive{'s' if len(missing) == 1 else ''} "
            f"no gradient: {shown}.\n" + (why or "A module created in __init__ but not used in forward (an attention "
            "module used twice while its sibling sits idle, a LayerNorm never applied, a layer skipped in a loop) "
            "never learns.")
        )
    check.ok("every parameter receives a gradient")


# --------------------------------------------------------------------------
# Modules that add a table to x: lesson 03's PositionalEncoding, lesson 09's LearnedPositionalEncoding.
# (Moved here from the topic module ``positional``: more than one exercise runs them.)

import inspect  # noqa: E402
import math  # noqa: E402

from .._core import Raised, fmt_shape  # noqa: E402
from ..slips import Diagnosis  # noqa: E402
from .dropout import Site, dropout_measured, dropout_set_through, eval_deterministic  # noqa: E402


@dataclasses.dataclass(frozen=True)
class AddedTable:
    """A module that adds a table to x: its name, the symbol the messages use (``PE[:L]``), and
    ``table(check, module, max_len, d_model)``, the float64 table such a module should add."""

    name: str
    symbol: str
    table: Callable[[Check, nn.Module, int, int], torch.Tensor]


def added_table_slips(name: str, symbol: str) -> tuple[Slip, ...]:
    """The slips of any module that adds a table, named for ``name``: mutants ``(x, table, *_) -> output``
    (float64, ``table`` the whole (max_len, d_model) table the module should add)."""
    return (
        Slip("x scaled", Diagnosis(
            f"{name} multiplies x by sqrt(d_model) before adding the table.",
            f"That scaling belongs to the embedding step of the model (`embedding(tokens) * sqrt(d_model)`), not to "
            f"this module: here forward is just dropout(x + {symbol})."),
            lambda x, table, *_: x * math.sqrt(x.shape[2]) + table[:x.shape[1]]),
        Slip("x unchanged", Diagnosis(f"{name} returns its input unchanged:", "add the table, `x + self.pe[:L]`."),
             lambda x, table, *_: x),
    )


def table_values(check: Check, module: nn.Module, x: torch.Tensor, table: torch.Tensor, max_len: int,
                 enc: AddedTable, slips: Sequence[Slip],
                 replay: Callable[[Slip, torch.Tensor], Any] | None = None) -> None:
    """x + table[:L] in eval mode; else the first of ``slips`` whose replay (by default ``mutant(x, table)`` in
    float64; ``replay(slip, x)``) gives the module's output is named."""
    name, L = enc.name, x.shape[1]
    out = check.tensor(table_forward(check, module, x, max_len, enc), f"the output of {name}", shape=x.shape)
    expected = x.double() + table[:L]
    if not close_enough(out.detach(), expected):
        got = out.detach().double()
        slip = matching_slip(slips, lambda s: replay(s, x) if replay else s.replay(None, x.double(), table),
                             same_tensor(got))
        if slip is not None:
            check.fail(slip.says)
        check.close(out, expected, f"the output of {name} in eval mode", hint=f"Expected x + {enc.symbol}.")
    check.ok(f"returns x + {enc.symbol} in eval mode (L = {L}, max_len = {max_len})")


def table_sizes(check: Check, build: Callable, module: nn.Module, table: torch.Tensor, g: torch.Generator,
                enc: AddedTable) -> None:
    """Other batch sizes and lengths on the module that already ran, then lesson 06's lengths and more."""
    max_len, d_model = table.shape
    cases = [Case(f"an input of shape {fmt_shape((b, n, d_model))}", torch.randn(b, n, d_model, generator=g))
             for b, n in ((1, 1), (2, max_len), (5, 3))]

    def fresh(case: Case):
        again = build().eval()
        enc.table(check, again, max_len, d_model)
        return check.attempt(again, case.data)

    sweep(check, cases, lambda case: table_forward(check, module, case.data, max_len, enc),
          lambda case: case.data.double() + table[: case.data.shape[1]], enc.name,
          hint="Does forward read B and L from x rather than assuming fixed sizes?", fresh=fresh)
    check.ok(f"works for batch sizes 1, 2 and 5 and lengths 1, 3 and max_len = {max_len}")
    long = build(0.0, 10, 128).eval()  # lesson 06's lengths and more, a d_model that is not a power of two
    long_table = enc.table(check, long, 128, 10)
    x = torch.randn(2, 100, 10, generator=generator(4))
    sweep(check, [Case("L = 100 of max_len = 128, d_model = 10", x)],
          lambda case: table_forward(check, long, case.data, 128, enc),
          lambda case: case.data.double() + long_table[:100], enc.name,
          hint="Is the table built for max_len positions, with the module's own d_model?")
    check.ok("long inputs (L = 100 of max_len = 128) with d_model = 10")


def table_dropout(check: Check, build: Callable, max_len: int, d_model: int, g: torch.Generator,
                  enc: AddedTable) -> None:
    """Off in eval mode; in training, on the sum x + table[:L] only: at p = 0.5, then at the default 0.1."""
    name, symbol = enc.name, enc.symbol
    x = torch.randn(4, 20, d_model, generator=g)
    dropper = build(0.5)
    table = enc.table(check, dropper, max_len, d_model)[:20]
    expected = x.double() + table
    out = eval_deterministic(check, dropper, lambda m: table_forward(check, m, x, max_len, enc), name, 0.5)
    check.close(out, expected, "the output with dropout=0.5 in eval mode", hint=f"Expected x + {symbol}: no dropout.")
    dropper.train()

    def sites(module: nn.Module, inputs: torch.Tensor, reference: torch.Tensor):
        out = check.tensor(table_forward(check, module, inputs, max_len, enc), "the output in train mode",
                           shape=inputs.shape)
        return [Site(f"x + {symbol}", out, reference, {"sentence of the batch": 0, "position": 1, "feature": 2})]

    dropout_measured(check, lambda: sites(dropper, x, expected), 0.5, name,
                     fix=f"Apply `nn.Dropout(dropout)`, built with the constructor's argument, once, to x + {symbol}.",
                     not_exact=lambda found: _dropout_misplaced(check, found, x, table, enc))
    default = build(0.1, 32, 64).train()  # the default rate, on enough entries to measure it
    default_table = enc.table(check, default, 64, 32)
    y = torch.rand(8, 64, 32, generator=generator(6)) + max(1.0, -float(default_table.min()))  # x + table > 0
    dropout_measured(check, lambda: sites(default, y, y.double() + default_table), 0.1, name)
    dropout_set_through(check, build, ["dropout"], (x,), name, "to x + " + symbol, sublayers=[""])


def _dropout_misplaced(check: Check, found: list, x: torch.Tensor, table: torch.Tensor, enc: AddedTable) -> None:
    """The train-mode output is not a dropout of x + table: name where the dropout is (p = 0.5)."""
    got = found[0].observed.detach().double()
    for dropped, kept, place in ((got - table, x.double(), "to x before adding the table"),
                                 (got - x.double(), table, "to the table alone and then adds x")):
        zero = dropped.abs() < 1e-5
        if float(zero.double().mean()) > 0.2 and bool((zero | ((dropped - kept / 0.5).abs() < 1e-4)).all()):
            check.fail(f"{enc.name} applies dropout {place} (dropped entries are not 0). The paper applies dropout "
                       f"to the sum: `dropout(x + {enc.symbol})`.")
    check.fail(f"In train mode the output of {enc.name} is not x + {enc.symbol} with some entries zeroed and the rest "
               f"scaled by 1 / (1 - p): apply one nn.Dropout, to the sum, `dropout(x + {enc.symbol})`.")


def table_defaults(check: Check, cls: type, enc: AddedTable) -> None:
    """The constructor's defaults are dropout=0.1 and max_len=5000 (parameters 2 and 3)."""
    try:
        params = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        params = []
    if len(params) >= 3:
        defaults = tuple(param.default for param in params[1:3])
        if defaults != (0.1, 5000):
            shown = ", ".join(
                f"{param.name}={'(none)' if param.default is inspect.Parameter.empty else repr(param.default)}"
                for param in params[1:3]
            )
            check.problem(
                f"The defaults of {enc.name} should be dropout=0.1 and max_len=5000, as in the exercise, "
                f"but yours are {shown}.\nDefine it as `def __init__(self, d_model, dropout=0.1, max_len=5000)`."
            )
        else:
            check.ok("the defaults are dropout=0.1, max_len=5000")
    check.stop_if_problems()


def table_forward(check: Check, module: nn.Module, x: torch.Tensor, max_len: int, enc: AddedTable) -> torch.Tensor:
    """Run forward; name the missing slice when a length below max_len breaks it."""
    probe = check.attempt(module, x.clone(), what=enc.name)
    if isinstance(probe, Raised) and not isinstance(probe.exception, NotImplementedError) and x.shape[1] != max_len:
        full = check.attempt(module, torch.zeros(x.shape[0], max_len, x.shape[2], dtype=x.dtype))
        if not isinstance(full, Raised):
            check.fail(
                f"{enc.name} fails for an input of length {x.shape[1]} but works for length "
                f"max_len={max_len}: it adds the whole table instead of its first L rows.\n"
                f"Slice the table to the input's length: `x + self.pe[:x.size(1)]` (for a table of shape "
                f"(max_len, d_model)); x has shape (B, L, d_model)."
            )
    return check.call(module, x, what=enc.name, hint=(
        f"x has shape (B, L, d_model) = {fmt_shape(x.shape)}: the length is `x.size(1)`, and forward adds the "
        f"table's first L rows, `self.pe[:x.size(1)]`, which broadcast over the batch."))
