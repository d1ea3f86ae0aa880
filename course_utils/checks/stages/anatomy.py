"""Finding the parts of a learner's module by what they are, whatever their names.

Attention modules follow the lesson 04 contract (``W_q``, ``W_k``, ``W_v``,
``W_o`` linears); layer norms are ``nn.LayerNorm`` instances or modules of the
learner's own that behave like one (scaling and shifting a row changes
nothing); the feed-forward pair is recognised by its sizes. The checkers use
them to build PyTorch twins (:mod:`.twins`) and to explain parameter counts.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

from .._core import generator

_PROJECTIONS = ("W_q", "W_k", "W_v", "W_o")


def attention_modules(module: nn.Module) -> list[nn.Module]:
    """Submodules following the multi-head attention contract, in registration order."""
    return [
        m
        for m in module.modules()
        if all(isinstance(getattr(m, name, None), nn.Linear) for name in _PROJECTIONS)
    ]


_NORM_LIKE: "weakref.WeakKeyDictionary[nn.Module, bool]" = weakref.WeakKeyDictionary()


def _behaves_like_norm(module: nn.Module, d_model: int) -> bool:
    """A leaf module of the learner's own that normalises each row: scaling and shifting a row changes nothing."""
    if module in _NORM_LIKE:
        return _NORM_LIKE[module]
    verdict = False
    params = list(module.parameters(recurse=False))
    if (
        not type(module).__module__.startswith("torch.")
        and not any(True for _ in module.children())
        and len(params) <= 2
        and all(tuple(p.shape) == (d_model,) for p in params)
    ):
        z = torch.randn(2, 3, d_model, generator=generator(11))
        try:
            with torch.no_grad():
                a, b = module(z), module(3.0 * z + 2.0)
            verdict = (
                isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == z.shape
                and b.shape == z.shape and bool(torch.isfinite(a).all())
                and bool(torch.allclose(a.double(), b.double(), atol=1e-3, rtol=1e-3))
                and bool((a.double().std(-1) > 0.1).all())
            )
        except Exception:  # not something that takes one (..., d_model) tensor
            verdict = False
    _NORM_LIKE[module] = verdict
    return verdict


def layer_norms(module: nn.Module, d_model: int | None = None) -> list[nn.Module]:
    """The distinct layer norms in registration order: ``nn.LayerNorm``, and (given d_model) modules acting like one."""
    return [
        m for m in module.modules()
        if isinstance(m, nn.LayerNorm) or (d_model is not None and _behaves_like_norm(m, d_model))
    ]


def norm_without_affine(norm: nn.Module) -> bool:
    """True for a layer norm without a learned gain or bias (``elementwise_affine=False``, ``bias=False``)."""
    if isinstance(norm, nn.LayerNorm):
        return norm.weight is None or norm.bias is None
    return len(list(norm.parameters())) < 2


def _inside(modules: list[nn.Module]) -> set[int]:
    return {id(sub) for m in modules for sub in m.modules()}


def linears_outside(module: nn.Module, exclude: list[nn.Module]) -> list[nn.Linear]:
    """``nn.Linear`` submodules that are not part of the modules in ``exclude``."""
    inner = _inside(exclude)
    return [m for m in module.modules() if isinstance(m, nn.Linear) and id(m) not in inner]


def feed_forward_linears(module: nn.Module, d_model: int, d_ff: int, exclude: list[nn.Module]) -> tuple | None:
    """The feed-forward pair (d_model -> d_ff, d_ff -> d_model) outside ``exclude``, if unambiguous."""
    lins = linears_outside(module, exclude)
    first = [m for m in lins if (m.in_features, m.out_features) == (d_model, d_ff)]
    second = [m for m in lins if (m.in_features, m.out_features) == (d_ff, d_model)]
    if len(first) == 1 and len(second) == 1:
        return first[0], second[0]
    return None


def shared_parameter_groups(module: nn.Module) -> list[list[str]]:
    """Names under which one parameter object is registered more than once."""
    by_id: dict[int, list[str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return [names for names in by_id.values() if len(names) > 1]


def count_parameters(module: nn.Module) -> int:
    """Number of distinct trainable scalars (a tied weight counts once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


__all__ = ["attention_modules", "count_parameters", "feed_forward_linears", "layer_norms",
           "linears_outside", "norm_without_affine", "shared_parameter_groups"]
