"""Stages about number types: float64 followed, and lesson 08's mixed precision in 16 bits.
"""


from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import nn

from . import gpu as _gpu
from .._core import ATOL, Check, Raised, close_enough, describe, generator
from .contract import _unwrapped


def follows_dtype(check: Check, module: nn.Module, inputs: Sequence[Any], what: str,
                  expected: torch.Tensor | None = None) -> None:
    """After ``.double()`` the module computes in float64 (``expected``: its answer, else float32's within 1e-3)."""
    reference = expected if expected is not None else check.call(module, *inputs, what=f"{what}.forward")
    module.double()
    doubled = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    out = check.attempt(module, *doubled, what=f"{what}.forward")
    fix = ("Some tensor it keeps did not move with it (`.to(dtype)` and `.to(device)` move only parameters and "
           "buffers), or forward converts on its own (`.float()`). Register fixed tensors with "
           "`self.register_buffer(...)`, and create new tensors with the dtype and device of an input.")
    if isinstance(out, Raised) or not isinstance(out, torch.Tensor) or out.dtype != torch.float64:
        got = out.message if isinstance(out, Raised) else f"It returns {describe(out)}."
        check.fail(f"After `.double()` (`.to(torch.float64)`), your {what} no longer computes in float64 for a float64 "
                   f"input: the output's dtype should follow. {fix}\n\n{got}")
    if isinstance(reference, torch.Tensor) and not close_enough(out, reference, atol=1e-3 if expected is None else ATOL):
        check.fail(f"After `.double()` your {what} computes other values than before: {fix}")
    check.ok("after .double() it computes the same values in float64 (everything it keeps moves with it)")


#: where lesson 08 trains in each 16-bit type (its `autocast_dtype`)
_WHERE_16 = {torch.bfloat16: "on a CPU with bfloat16 units and on recent GPUs (A100, H100, RTX 30 and later)",
             torch.float16: "on older GPUs such as Colab's T4, once your scaled_dot_product_attention has passed "
                            "its float16 trial"}


def _tensors_of(value: Any) -> list[torch.Tensor]:
    return list(_gpu._tensors(value))


def float16_trial_passes(check: Check, attention: Any) -> bool:
    """Lesson 08's trial before it trains in float16: ``attention(q, q, q, mask)`` on float16 inputs with padding
    gives finite values (else lesson 08 trains in 32 bits, so float16 is never asked of the rest)."""
    if not callable(attention):
        return True
    q = torch.randn(2, 4, 5, 8, generator=generator(8)).half()  # (B, heads, L, d_k), as lesson 08's trial
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False
    out = check.attempt(attention, q, q, q, mask, what="scaled_dot_product_attention in float16")
    if isinstance(out, Raised):
        return False
    return all(bool(torch.isfinite(t.float()).all()) for t in _tensors_of(out) if t.is_floating_point())


def attention_of(cls: Any) -> Any:
    """The ``scaled_dot_product_attention`` a learner's class would meet in lesson 08 (the namespace its methods
    were written in, the class's own first), or None."""
    for owner in getattr(cls, "__mro__", ()):
        for function in vars(owner).values():
            namespace = getattr(_unwrapped(function), "__globals__", None)
            if isinstance(namespace, dict) and callable(namespace.get("scaled_dot_product_attention")):
                return namespace["scaled_dot_product_attention"]
    return None


def in_16_bits(check: Check, run: Callable[[torch.dtype], Any], what: str, float16: bool = True) -> None:
    """Lesson 08's mixed precision: ``run(dtype)`` inside ``torch.autocast(dtype=...)`` runs and stays finite,
    in bfloat16, and in float16 when ``float16`` (lesson 08 trains in float16 only where the learner's attention
    passed its float16 trial)."""
    for dtype in (torch.bfloat16, torch.float16) if float16 else (torch.bfloat16,):
        name = str(dtype).removeprefix("torch.")
        with torch.autocast("cpu", dtype=dtype):
            out = check.attempt(lambda: run(dtype), what=what)
        setting = (f"lesson 08 trains in mixed precision, {_WHERE_16[dtype]}: inside `torch.autocast(device, "
                   f"dtype=torch.{name})` the attention scores are {name}")
        if isinstance(out, Raised):
            text = str(out.exception)
            if "without overflow" in text or "cannot be converted" in text:
                largest = "65504" if dtype is torch.float16 else "about 3.39e38, a little less than float32's"
                check.fail(
                    f"Your {what} fills the masked scores with a value that does not fit in {name}, so it raises "
                    f"in 16 bits: {setting}, and their largest magnitude is {largest}. "
                    f"`torch.finfo(torch.float32).min` does not fit in bfloat16, nor `-1e9` in float16.\n"
                    f"Fill with a value of the scores' own type, `torch.finfo(scores.dtype).min`, or with "
                    f"`float('-inf')`: both fit every type.\n\n{out.message}")
            check.fail(f"Your {what} raises in {name}. {setting[:1].upper() + setting[1:]}, and the step would stop there.\n\n{out.message}")
        if any(t.is_floating_point() and not bool(torch.isfinite(t.float()).all()) for t in _tensors_of(out)):
            check.fail(f"Your {what} returns NaN or infinity in {name} on an input where float32 gives finite "
                       f"values. {setting[:1].upper() + setting[1:]}: a constant that overflows 16 bits (float16's largest magnitude is "
                       f"65504) becomes infinite. Use values of the scores' own type: `torch.finfo(scores.dtype).min`.")
    check.ok("runs in 16 bits as lesson 08's mixed precision does (torch.autocast in bfloat16"
             + (" and float16)" if float16 else ")"))


def in_16_bits_module(check: Check, module: nn.Module, inputs: tuple, what: str) -> None:
    """:func:`in_16_bits` for a module called on ``inputs`` (float16 only where lesson 08 would use it)."""
    in_16_bits(check, lambda dtype: module(*inputs), what,
               float16=float16_trial_passes(check, attention_of(type(module))))
