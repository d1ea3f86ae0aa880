"""Checker for lesson 05's LayerNorm: correct styles pass, each slip is named."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import expect
from course_utils.checks.norm import check_layer_norm


class LayerNorm(nn.Module):
    """The lesson's solution; the variants below change one line of it through ``normalise``."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def normalise(self, x):
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + self.eps)

    def forward(self, x):
        return self.normalise(x) * self.weight + self.bias


def variant(normalise=None, forward=None, init=None):
    """A LayerNorm with one method replaced (``init`` runs after the solution's __init__)."""
    namespace = {"normalise": normalise} if normalise else {}
    namespace.update({"forward": forward} if forward else {})
    if init:
        namespace["__init__"] = lambda self, d, eps=1e-5: (LayerNorm.__init__(self, d, eps), init(self, d, eps))[0]
    return type("LayerNorm", (LayerNorm,), namespace)


def _var(x):
    return x.var(-1, keepdim=True, unbiased=False)


def moments(self, x):  # E[x^2] - E[x]^2, rsqrt
    mean, square = x.mean(-1, keepdim=True), (x * x).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(square - mean**2 + self.eps)


class TorchLayerNorm(nn.LayerNorm):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps=eps)


CORRECT = [
    LayerNorm, TorchLayerNorm,
    variant(forward=lambda self, x: F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)),
    variant(lambda self, x: (x - x.mean(-1, keepdim=True)) / (torch.var_mean(x, -1, keepdim=True, correction=0)[0] + self.eps) ** 0.5),
    variant(forward=lambda self, x: torch.addcmul(self.bias, LayerNorm.normalise(self, x), self.weight)),
]


@pytest.mark.parametrize("impl", CORRECT)
def test_accepts_every_correct_style(impl):
    expect(check_layer_norm(impl), "passed")


def _annotated(self, x):  # the source tutorial's: unbiased std, eps outside the root
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + self.eps)


WRONG = {
    "unbiased": (variant(lambda s, x: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + s.eps)), "19/20"),
    "annotated": (variant(_annotated), "d_model - 1"),
    "eps outside": (variant(lambda s, x: (x - x.mean(-1, keepdim=True)) / (_var(x).sqrt() + s.eps)), "inside the square root"),
    "eps fixed": (variant(lambda s, x: LayerNorm.normalise(type("S", (), {"eps": 1e-5})(), x)), "whatever it was built with"),
    "no eps": (variant(lambda s, x: (x - x.mean(-1, keepdim=True)) / _var(x).sqrt()), "ignores eps"),
    "no sqrt": (variant(lambda s, x: (x - x.mean(-1, keepdim=True)) / (_var(x) + s.eps)), "variance itself"),
    "no centring": (variant(lambda s, x: x / torch.sqrt(_var(x) + s.eps)), "subtract each vector's own mean"),
    "positions": (variant(lambda s, x: LayerNorm.normalise(s, x.transpose(-1, -2)).transpose(-1, -2)), "the positions (dim 1)"),
    "batch axis": (variant(lambda s, x: (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + s.eps)), "the batch axis"),
    "no affine": (variant(forward=lambda s, x: s.normalise(x)), "ignores weight and bias"),
    "swapped": (variant(forward=lambda s, x: s.normalise(x) * s.bias + s.weight), "swapped"),
    "detached": (variant(lambda s, x: (x - x.mean(-1, keepdim=True).detach()) / torch.sqrt(_var(x).detach() + s.eps)), "cut off from autograd"),
    "in place": (variant(lambda s, x: LayerNorm.normalise(s, x.sub_(x.mean(-1, keepdim=True)))), "changed its input `x` in place"),
    "random gain": (variant(init=lambda s, d, eps: setattr(s, "weight", nn.Parameter(torch.randn(d)))), "start with weight all ones"),
    "bias first": (variant(init=lambda s, d, eps: (delattr(s, "weight"), setattr(s, "weight", nn.Parameter(torch.ones(d))))), "before `weight`"),
    "plain tensors": (variant(init=lambda s, d, eps: (delattr(s, "bias"), setattr(s, "bias", torch.zeros(d)))), "nn.Parameter of shape"),
    "no eps attribute": (variant(init=lambda s, d, eps: delattr(s, "eps"), normalise=lambda s, x: LayerNorm.normalise(type("S", (), {"eps": 1e-5})(), x)), "self.eps = eps"),
    "cpu tensor": (variant(lambda s, x: LayerNorm.normalise(s, x) + torch.zeros(x.shape[-1])), "creates a tensor on the CPU"),
    "float32": (variant(forward=lambda s, x: LayerNorm.forward(s, x).float()), "float64"),
    "eps default": (type("LayerNorm", (LayerNorm,), {"__init__": lambda s, d, eps=1e-6: LayerNorm.__init__(s, d, eps)}), "defaults to 1e-06"),
    "E[x^2] - E[x]^2": (variant(moments), "E[x²] - E[x]²"),
    "E[x^2] as the variance": (variant(lambda s, x: (x - x.mean(-1, keepdim=True)) / torch.sqrt((x * x).mean(-1, keepdim=True) + s.eps)), "mean of x²"),
    "computes in float32": (variant(forward=lambda s, x: LayerNorm.forward(s, x.float())), "`.float()`"),
}


@pytest.mark.parametrize("name", WRONG)
def test_names_each_slip(name):
    impl, phrase = WRONG[name]
    expect(check_layer_norm(impl), "failed", phrase)


def test_statistics_over_an_axis_counted_from_the_front_crash_with_the_fix():
    impl = variant(lambda s, x: (x - x.mean(2, keepdim=True)) / torch.sqrt(x.var(2, keepdim=True, unbiased=False) + s.eps))
    expect(check_layer_norm(impl), "error", "Dimension out of range", "`dim=-1`")


def test_a_view_that_needs_contiguous_memory_crashes_with_the_fix():
    impl = variant(lambda s, x: LayerNorm.normalise(s, x.view(-1, x.shape[-1])).view(x.shape))
    expect(check_layer_norm(impl), "error", "view size is not compatible", "`reshape`")
