"""Checker for lesson 05's LayerNorm, written from scratch (section 3.1 of the paper).

The oracle is PyTorch's ``F.layer_norm``. Stages, in order: the contract (``weight``
and ``bias`` parameters, ``eps``), the starting values, what a normalised vector is
(mean 0 and variance 1 along the last axis, with the axis or the variance used
instead named), a sweep against the oracle over shapes, a long input, a larger
``eps`` and a constant vector (known slips named), gradients, the device and float64.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import stages
from ._core import Check, CheckResult, close_enough, fmt_values, generator
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip, same_tensor

_D = 20  # d_model of the checker's instances: unlike every other axis of its inputs


def check_layer_norm(LayerNorm: type[nn.Module]) -> CheckResult:
    """Check ``LayerNorm(d_model, eps=1e-5)``: (x - mean) / sqrt(var + eps) * weight + bias over the last axis."""
    return LAYER_NORM.check(LayerNorm)


def _check_layer_norm(check: Check, LayerNorm: type[nn.Module]) -> None:
    check.callable_(LayerNorm, "LayerNorm", want_class=True)
    g = generator(5)
    norm = stages.is_module(check, check.build(LayerNorm, _D), "LayerNorm")
    stages.contract_parts(check, norm, "LayerNorm", {"d_model": _D, "eps": 1e-5})
    _starts_as_identity(check, norm)
    _normalises_each_vector(check, norm, torch.randn(2, 5, _D, generator=g) * 2 + torch.randn(2, 5, 1, generator=g) * 3)

    wide = stages.is_module(check, check.build(LayerNorm, _D, eps=0.1), "LayerNorm")
    for module in (norm, wide):  # trained-looking gains and shifts, so that ignoring them shows
        with torch.no_grad():
            module.weight.copy_(1 + 0.5 * torch.randn(_D, generator=g))
            module.bias.copy_(torch.randn(_D, generator=g))
    constant = torch.randn(2, 3, _D, generator=g)
    constant[1, 2] = 1.5  # one vector with every feature equal: variance 0
    # Around 100, float32 holds x to about 4e-6, so a correct float32 LayerNorm (PyTorch's own included) is off by up
    # to about 4e-5 there; computing the variance as E[x²] - E[x]² is off by 1e-3 or more (measured over 300 draws).
    far_atol = {"an x of mean 100 and spread 1, (2, 5, 20)": 2e-4}
    cases = [stages.Case(label, (module, x, 0.1 if module is wide else 1e-5), far_atol.get(label))
             for label, module, x in [
        ("x of shape (2, 5, 20)", norm, torch.randn(2, 5, _D, generator=g)),
        ("x of shape (7, 20), without a batch axis", norm, torch.randn(7, _D, generator=g)),
        ("x of shape (2, 3, 4, 20)", norm, torch.randn(2, 3, 4, _D, generator=g)),
        ("a long x, (1, 80, 20), of mean 3 and spread 2", norm, 3 + 2 * torch.randn(1, 80, _D, generator=g)),
        ("an x of mean 100 and spread 1, (2, 5, 20)", norm, 100 + torch.randn(2, 5, _D, generator=g)),
        ("LayerNorm(20, eps=0.1) and features of spread 0.3", wide, 0.3 * torch.randn(2, 5, _D, generator=g)),
        ("an x whose vector x[1, 2] has all its features equal", norm, constant),
        ("a transposed view, x of shape (2, 5, 20) not contiguous in memory", norm,
         torch.randn(2, _D, 5, generator=g).transpose(1, 2)),
    ]]
    stages.sweep(check, cases, lambda case: _run(check, *case.data[:2]), lambda case: _formula(*case.data),
                 "LayerNorm", slips=SLIPS, replay=_replay)
    check.ok("matches F.layer_norm for 2-, 3- and 4-axis inputs, a long one, one of mean 100, eps=0.1, a vector "
             "of equal features and a transposed (non-contiguous) view")

    x = torch.randn(2, 5, _D, generator=g)
    expected = stages.oracle_gradients(lambda x_, w, b: F.layer_norm(x_, (_D,), w, b, 1e-5),
                                       {"x": x, "weight": norm.weight, "bias": norm.bias})
    stages.gradients(check, lambda x_: _run(check, norm, x_), {"x": x}, expected, "LayerNorm", "F.layer_norm",
                     params={"weight": norm.weight, "bias": norm.bias}, causes={frozenset({"x"}): (
                         "The mean or the variance is cut off from autograd (`.detach()`, `.item()`, "
                         "`torch.no_grad()`): the gradient flows through them too.")})
    stages.module_on_gpu(check, norm, x, what="LayerNorm")
    stages.state_dict_round_trip(check, lambda: check.build(LayerNorm, _D), lambda m: m(x), "LayerNorm")
    far = 1e5 + torch.randn(2, 5, _D, generator=g)  # around 1e5: computed in float32, the deviations are lost
    stages.follows_dtype(check, norm, [far], "LayerNorm", expected=_formula(norm, far, 1e-5))


def _run(check: Check, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = check.call(module, x, what="LayerNorm.forward", hint=lambda exc: (
        "The statistics are taken over an axis counted from the front: inputs come with any number of leading axes "
        "(a batch, positions, or none), so count from the end, `dim=-1`, the d_model features."
        if isinstance(exc, IndexError) and "Dimension out of range" in str(exc) else
        "`view` needs a tensor laid out contiguously in memory, and an input may be a transposed view (the "
        "output of a `.transpose`): use `reshape`, which copies only when it must, or keep the input's shape and "
        "take the statistics over `dim=-1`." if "view size is not compatible" in str(exc) else
        "Sizes that do not match? `keepdim=True` keeps the last axis of the mean and the variance (size 1), so that "
        "they broadcast against x."))
    if isinstance(out, torch.Tensor) and out.is_floating_point() and not bool(torch.isfinite(out).all()):
        check.fail("Your LayerNorm returns NaN or infinity. A vector whose features are all equal has variance 0, "
                   "and only eps keeps the division finite: divide by `torch.sqrt(var + self.eps)`.")
    return check.tensor(out, f"the output of LayerNorm for an x of shape {tuple(x.shape)}", shape=x.shape,
                        dtype=x.dtype)


def _formula(module: nn.Module, x: torch.Tensor, eps: float, slip: str = "") -> torch.Tensor:
    """What a LayerNorm built with ``eps`` computes, in float64: the oracle, or with ``slip`` one known slip."""
    if slip == "moments":  # E[x^2] - E[x]^2 in float32: right on paper, its digits cancel when the mean is large
        mean = x.mean(-1, keepdim=True)
        out = (x - mean) / torch.sqrt((x * x).mean(-1, keepdim=True) - mean * mean + eps)
        return (out * module.weight + module.bias).detach().double()
    x, w, b = (t.detach().double() for t in (x, module.weight, module.bias))
    if not slip:
        return F.layer_norm(x, (_D,), w, b, eps)
    var = (x * x).mean(-1, keepdim=True) if slip == "uncentred" else x.var(-1, keepdim=True, unbiased=slip == "bessel")
    spread = {"eps outside": var.sqrt() + eps, "no sqrt": var + eps}.get(slip, (var + eps).sqrt())
    normalised = (x - x.mean(-1, keepdim=True)) / spread
    return {"no affine": normalised, "swapped": normalised * b + w}.get(slip, normalised * w + b)


def _slipped(module: nn.Module, x: torch.Tensor, eps: float, slip: str = "") -> torch.Tensor:
    """The oracle with one known slip (``_formula``'s flag), as a slip record replays it."""
    return _formula(module, x, eps, slip)


#: slips of the variance, named by the variance of each output vector (so also when mixed with eps outside the root)
VARIANCE_SLIPS = (
    Slip("bessel", Diagnosis(
        f"Your vectors come out with variance {_D - 1}/{_D} instead of 1: your LayerNorm divides the variance by "
        "d_model - 1 (Bessel's correction, what torch.var and torch.std do by default).",
        "A LayerNorm divides by d_model: `x.var(-1, keepdim=True, unbiased=False)`, as nn.LayerNorm does."),
        dict(slip="bessel")),
    Slip("no sqrt", Diagnosis("Your LayerNorm divides by the variance itself.",
                              "Divide by its square root, `torch.sqrt(var + self.eps)`."), dict(slip="no sqrt")),
)

#: the known slips, tried once the values differ
SLIPS = (
    Slip("moments", Diagnosis(
        "Your LayerNorm computes the variance as E[x²] - E[x]², which subtracts two large, nearly equal numbers when "
        "the mean is large compared with the spread, and loses the digits that matter (it can even go negative, and "
        "give NaN).", "Compute it from the deviations: `((x - mean) ** 2).mean(-1, keepdim=True)`, or "
        "`x.var(-1, keepdim=True, unbiased=False)`."), dict(slip="moments")),
    Slip("uncentred", Diagnosis(
        "Your LayerNorm's variance is the mean of x², the squares of the features themselves.",
        "The variance is the mean of the squared deviations from the mean, `((x - mean) ** 2).mean(-1, "
        "keepdim=True)`, or `x.var(-1, keepdim=True, unbiased=False)`."), dict(slip="uncentred")),
    Slip("eps outside", Diagnosis(
        "Your LayerNorm adds eps to the standard deviation, `(x - mean) / (std + eps)`.",
        "It belongs inside the square root, `(x - mean) / torch.sqrt(var + eps)`, as in nn.LayerNorm."),
        dict(slip="eps outside")),
    Slip("eps fixed", Diagnosis(
        "Your LayerNorm uses eps = 1e-5 whatever it was built with.",
        "Store the constructor's argument, `self.eps = eps`, and add `self.eps` to the variance."),
        lambda module, x, eps: _formula(module, x, 1e-5)),
    Slip("no eps", Diagnosis("Your LayerNorm ignores eps.", "Add `self.eps` to the variance, inside the square root."),
         lambda module, x, eps: _formula(module, x, 0.0)),
    Slip("no affine", Diagnosis(
        "Your LayerNorm normalises but then ignores weight and bias.",
        "Multiply by `self.weight` and add `self.bias`: they start at ones and zeros, so only trained values show "
        "the difference."), dict(slip="no affine")),
    Slip("swapped", Diagnosis(
        "Your LayerNorm has weight and bias swapped.",
        "The normalised vector is multiplied by `self.weight` (the gain), then `self.bias` is added."),
        dict(slip="swapped")),
    *VARIANCE_SLIPS,
)


def _replay(slip: Slip, case: stages.Case) -> torch.Tensor:
    return slip.replay(_slipped, *case.data)


def _as_answer(slip: Slip) -> type[nn.Module]:
    """The slip made into a learner's LayerNorm class (for the generated catalogue tests)."""
    class SlippedLayerNorm(nn.Module):
        def __init__(self, d_model: int, eps: float = 1e-5):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d_model))
            self.bias = nn.Parameter(torch.zeros(d_model))
            self.eps = eps

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return slip.replay(_slipped, self, x, self.eps).to(x.dtype)

    return SlippedLayerNorm


def _starts_as_identity(check: Check, norm: nn.Module) -> None:
    w, b = norm.weight.detach(), norm.bias.detach()
    if not (torch.equal(w, torch.ones_like(w)) and torch.equal(b, torch.zeros_like(b))):
        check.fail(f"A new LayerNorm should start with weight all ones and bias all zeros, so that it only "
                   f"normalises until training changes them. Yours starts with weight {fmt_values(w)} and bias "
                   f"{fmt_values(b)}: use `nn.Parameter(torch.ones(d_model))` and `nn.Parameter(torch.zeros(d_model))`.")
    if not all(p is q for p, q in zip(norm.parameters(), (norm.weight, norm.bias))):
        check.fail("Your LayerNorm registers `bias` before `weight`. Create `self.weight` first, as nn.LayerNorm "
                   "does: lesson 07 copies a norm's parameters in order, gain first.")
    check.ok("weight starts at ones and bias at zeros, registered in that order")


def _normalises_each_vector(check: Check, norm: nn.Module, x: torch.Tensor) -> None:
    """With weight ones and bias zeros, each vector along the last axis comes out with mean 0 and variance 1."""
    out = _run(check, norm, x).detach().double()
    if close_enough(out, _formula(norm, x, 1e-5)):
        return check.ok("with weight ones and bias zeros, every vector has mean 0 and variance 1 along the last axis")
    slip = matching_slip(SLIPS, lambda s: s.replay(_slipped, norm, x, 1e-5), same_tensor(out))
    if slip is not None:
        check.fail(slip.says)
    v = x.double().var(-1, unbiased=False)  # (2, 5): each vector's own variance
    mean = out.mean(-1)
    if not close_enough(mean, torch.zeros_like(mean), atol=1e-4):
        axes = {"the batch axis (dim 0)": 0, "the positions (dim 1)": 1, "the whole tensor": (0, 1, 2)}
        other = next((name for name, dim in axes.items()
                      if close_enough(out.mean(dim), torch.zeros_like(out.mean(dim)), atol=1e-4)), "")
        check.fail(f"With weight ones and bias zeros, each vector of the output should have mean 0 over its last "
                   f"axis; yours have means {fmt_values(mean.flatten())}. " + (
                       f"Your LayerNorm normalises over {other} instead: its statistics must come from each "
                       f"vector's d_model features alone, `x.mean(-1, keepdim=True)` and "
                       f"`x.var(-1, keepdim=True, unbiased=False)`." if other else
                       "Subtract each vector's own mean, `x - x.mean(-1, keepdim=True)`."))
    got = out.var(-1, unbiased=False)  # (2, 5); the variance slips also name a mix with eps outside the root
    slip = matching_slip(VARIANCE_SLIPS, lambda s: s.replay(_slipped, norm, x, 1e-5).var(-1, unbiased=False),
                         lambda variance: close_enough(got, variance, atol=1e-4, rtol=1e-3))
    if slip is not None:
        check.fail(slip.says)
    check.close(got, v / (v + 1e-5), "the variance of each output vector, with weight ones and bias zeros",
                atol=1e-4, rtol=1e-3, hint="Each vector should have variance var / (var + eps), about 1: divide "
                "the centred vector by `torch.sqrt(var + self.eps)`, var the mean of its squared deviations.")
    check.ok("with weight ones and bias zeros, every vector has mean 0 and variance 1 along the last axis")


LAYER_NORM = Exercise(
    "LayerNorm", _check_layer_norm,
    oracle="F.layer_norm, in float64",
    cases="d_model 20: 2-, 3- and 4-axis inputs, a long one, one of mean 100, eps=0.1, a vector of equal features and a "
          "transposed view, drawn from the check's seed; trained-looking weight and bias",
    slips=SLIPS, answer=_as_answer)
