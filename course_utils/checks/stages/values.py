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
