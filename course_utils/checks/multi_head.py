"""Checker for lesson 04: multi-head attention.

The oracle is ``torch.nn.MultiheadAttention`` with the learner's projection
weights copied into it (its masks say True = *not* allowed, the opposite of
ours, so they are inverted on the way). Mechanisms are isolated first: with
W_q set to zero every score is equal, so attention is a plain average over the
allowed keys, which tests the value path, the head split and merge, W_o and
the mask without any dependence on the scores. The known slips are ``Slip``
records: mutants of multi-head attention written out in float64 (``_mha`` and
its flags), replayed where each shows (equal scores, the scores, cross-attention,
the masks) only to name a cause, never to accept. The whole check is declared
at the bottom, ``MULTI_HEAD_ATTENTION``.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch
from torch import nn

from . import stages
from ._core import Check, CheckResult, Raised, close_enough, describe, fmt_shape, generator, identical
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip, same_tensor

_NAMES = ("W_q", "W_k", "W_v", "W_o")
_D, _H = 12, 3  # the main instance: d_model, num_heads (d_k = 4 differs from both)
_LOOSE = {"atol": 1e-4, "rtol": 1e-3}  # for naming a cause: a variant computed another way
_KEPT = ("Likely cause: keys or values projected in an earlier forward and kept on `self` (a cache), so a new "
         "sentence is attended with an old one's keys. Compute the projections from each call's own query, key "
         "and value: what forward keeps on `self` (`attention_weights`, for plotting) must never feed the next "
         "call (lesson 07 keeps its key/value cache outside the module).")


def check_multi_head_attention(MultiHeadAttention: type[nn.Module]) -> CheckResult:
    """Check the ``MultiHeadAttention(d_model, num_heads, dropout)`` class against nn.MultiheadAttention."""
    return MULTI_HEAD_ATTENTION.check(MultiHeadAttention)


@dataclasses.dataclass
class _Case:
    """The module under test, its inputs, and the weights installed in it (float32 and float64)."""

    module: nn.Module
    num_heads: int
    weights: dict
    uniform: dict  # the same with W_q = 0: every score equal
    w: dict = dataclasses.field(default_factory=dict)  # float64 copies, zero bias where the layer has none
    wu: dict = dataclasses.field(default_factory=dict)


def _check_multi_head_attention(check: Check, cls: type[nn.Module]) -> None:
    check.callable_(cls, "MultiHeadAttention", want_class=True)
    D, H = _D, _H
    B, L, L_k = 2, 5, 7
    g = generator(4)
    module = check.build(cls, D, H)
    _check_structure(check, module, D, H)
    _check_head_attributes(check, module, D, H)
    module.eval()
    x = torch.randn(B, L, D, generator=g)
    _check_runs(check, module, x)
    other = torch.randn(B, L, D, generator=g)  # another sentence of the same shape, after x
    stages.fresh_instance_agrees(check, module, lambda: check.build(cls, D, H), (other, other, other),
                                 "MultiHeadAttention", _KEPT)
    weights = stages.random_attention_weights(g, D)
    uniform = dict(weights)
    uniform["W_q"] = (torch.zeros(D, D), torch.zeros(D))
    case = _Case(module, H, weights, uniform)
    case.w, case.wu = _install(module, weights), _install(module, uniform)
    _check_value_path(check, case, x)
    _check_self_attention(check, case, x)
    q = torch.randn(B, L, D, generator=g)
    k = torch.randn(B, L_k, D, generator=g)
    v = torch.randn(B, L_k, D, generator=g)
    _check_cross_attention(check, case, q, k, v)
    previous = _check_attention_weights(check, module, case.w, H, q, k, v, None, None, "cross-attention")
    padding = _check_masks(check, case, q, k, v, g, previous)
    _check_gradients(check, module, weights, case.w, q, k, v, padding, H)
    _check_other_size(check, cls, g)
    _check_sizes(check, cls, g)
    _check_dropout(check, cls, g)
    stages.module_on_gpu(check, module, q, k, v, padding, what="MultiHeadAttention", also=[(q, k, v)])
    stages.in_16_bits_module(check, module, (q, k, v, padding), "MultiHeadAttention")
    stages.state_dict_round_trip(check, lambda: check.build(cls, D, H), lambda m: m(q, k, v, padding),
                                 "MultiHeadAttention")
    stages.follows_dtype(check, module, [q, k, v, padding], "MultiHeadAttention",  # lesson 05's float64 checks
                         expected=_oracle(case.w, H, q.double(), k.double(), v.double(), padding))
    _check_divisibility(check, cls)


# --------------------------------------------------------------------------
# Weights, the oracle, and the outputs of uniform attention.


def _install(module: nn.Module, weights: dict) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Copy weights into our own instance; return them as float64, zero bias where the layer has none."""
    used = {}
    with torch.no_grad():
        for name, (w, b) in weights.items():
            layer = getattr(module, name)
            layer.weight.copy_(w)
            if layer.bias is not None:
                layer.bias.copy_(b)
                used[name] = (w.double(), b.double())
            else:
                used[name] = (w.double(), torch.zeros_like(b, dtype=torch.float64))
    return used


def _oracle(weights: dict, num_heads: int, query, key, value, mask=None, grad: bool = False) -> torch.Tensor:
    """nn.MultiheadAttention in float64 with the given weights; ``mask`` uses our convention (True = may attend).

    With ``grad``, returns ``(mha, output)`` with the graph kept, for comparing gradients.
    """
    d_model = query.shape[-1]
    mha = nn.MultiheadAttention(d_model, num_heads, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([weights[n][0] for n in ("W_q", "W_k", "W_v")]))
        mha.in_proj_bias.copy_(torch.cat([weights[n][1] for n in ("W_q", "W_k", "W_v")]))
        mha.out_proj.weight.copy_(weights["W_o"][0])
        mha.out_proj.bias.copy_(weights["W_o"][1])
    mha.eval()
    kwargs: dict[str, Any] = {}
    if mask is not None:
        # (B, 1, 1 or L_q, L_k) -> one (L_q, L_k) mask per (batch, head), True = blocked. (Passed as attn_mask
        # even for padding: key_padding_mask's validation imports sympy, which takes seconds the first time.)
        full = mask[:, 0].expand(query.shape[0], query.shape[1], key.shape[1])
        kwargs["attn_mask"] = (~full).repeat_interleave(num_heads, dim=0)
    if grad:
        out, _ = mha(query, key, value, need_weights=False, **kwargs)
        return mha, out
    with torch.no_grad():
        out, _ = mha(query.double(), key.double(), value.double(), need_weights=False, **kwargs)
    return out


def _project(weights: dict, name: str, x: torch.Tensor) -> torch.Tensor:
    w, b = weights[name]
    return x.double() @ w.T + b


def _average(values: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Uniform attention: each query averages the values of the keys it may attend to."""
    a = allowed.double()
    return (a / a.sum(-1, keepdim=True)) @ values


def _allowed(mask: torch.Tensor | None, batch: int, len_q: int, len_k: int) -> torch.Tensor:
    if mask is None:
        return torch.ones(batch, len_q, len_k, dtype=torch.bool)
    return mask[:, 0].expand(batch, len_q, len_k)


# --------------------------------------------------------------------------
# Running the learner's module.


_BUILDS_ON = (
    "MultiHeadAttention builds on your scaled_dot_product_attention from lesson 01: if its checker does not "
    "pass yet, finish that first (and run its cell), then come back."
)


def _run(check: Check, module: nn.Module, *args: torch.Tensor, shape: tuple, what: str, hint: str = "",
         crash: str = "") -> torch.Tensor:
    """The learner's output, checked for type, shape and dtype; ``crash``: a failure to report if it raises."""
    if crash:
        out = check.attempt(module, *args, what="MultiHeadAttention")
        if isinstance(out, Raised):
            check.fail(f"{crash}\n\n{out.message}")
    else:
        out = check.call(module, *args, what="MultiHeadAttention", hint=hint, builds_on=_BUILDS_ON)
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        check.fail(
            f"MultiHeadAttention.forward should return one tensor of shape {fmt_shape(shape)}, but it returned "
            f"{describe(out)}.\nYour scaled_dot_product_attention returns (output, weights): keep the output "
            f"(`out, _ = scaled_dot_product_attention(...)`), merge the heads, apply W_o, and return that tensor."
        )
    return check.tensor(out, what, shape=shape, dtype=torch.float32)


def _check_structure(check: Check, module: Any, d_model: int, num_heads: int) -> None:
    d_k = d_model // num_heads
    if not isinstance(module, nn.Module):
        check.fail("MultiHeadAttention should be a subclass of nn.Module (`class MultiHeadAttention(nn.Module):`).")
    linears = {n: m for n, m in module.named_modules() if isinstance(m, nn.Linear) and n}
    missing = [n for n in _NAMES if not hasattr(module, n)]
    if missing:
        found = ", ".join(f"{n} = nn.Linear({m.in_features}, {m.out_features})" for n, m in linears.items())
        check.fail(
            f"MultiHeadAttention({d_model}, {num_heads}) has no attribute{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)}.\nName the four projections W_q, W_k, W_v and W_o, each "
            f"nn.Linear(d_model, d_model)." + (f"\nLinear layers found: {found}." if found else "")
        )
    _check_distinct_projections(check, module)
    for name in _NAMES:
        layer = getattr(module, name)
        if not isinstance(layer, nn.Linear):
            check.fail(
                f"{name} should be nn.Linear(d_model, d_model), but it is {describe(layer)}.\n"
                f"Create it in __init__: `self.{name} = nn.Linear(d_model, d_model)`."
            )
        if (layer.in_features, layer.out_features) == (d_k, d_k) and d_k != d_model:
            check.fail(
                f"{name} is nn.Linear({d_k}, {d_k}) for d_model={d_model}, num_heads={num_heads}: a single "
                f"d_k x d_k projection that every head shares, applied after splitting into heads.\n"
                f"In the paper each head has its own projection of the whole d_model-vector. Use "
                f"nn.Linear(d_model, d_model) (the heads' projections side by side), project first, then split "
                f"the result into num_heads pieces of size d_k = d_model // num_heads."
            )
        if (layer.in_features, layer.out_features) != (d_model, d_model):
            check.fail(
                f"{name} is nn.Linear({layer.in_features}, {layer.out_features}), but for d_model={d_model} "
                f"it should be nn.Linear({d_model}, {d_model})."
            )
    no_bias = [name for name in _NAMES if getattr(module, name).bias is None]
    if no_bias:
        check.fail(
            f"{', '.join(no_bias)} {'is' if len(no_bias) == 1 else 'are'} built without a bias (`bias=False`). The "
            f"exercise asks for nn.Linear's default bias, and later cells copy these biases: this lesson's "
            f"comparison with nn.MultiheadAttention, and lesson 07's copy of your model into nn.Transformer, whose "
            f"attention has biases. Build them as `nn.Linear(d_model, d_model)`."
        )
    check.ok("has W_q, W_k, W_v, W_o, each nn.Linear(d_model, d_model)")
    try:
        names = [p.name for p in inspect.signature(module.forward).parameters.values()][:4]
    except (TypeError, ValueError):
        names = []
    if sorted(names[:3]) == ["key", "query", "value"] and names[:3] != ["query", "key", "value"]:
        check.fail(
            f"MultiHeadAttention.forward takes its inputs in the order ({', '.join(names[:3])}), but callers pass "
            f"them as forward(query, key, value, mask=None), as nn.MultiheadAttention does. In cross-attention "
            f"the query comes from the decoder and key/value from the encoder, so the order matters."
        )
    if names and names != ["query", "key", "value", "mask"]:
        check.fail(
            f"MultiHeadAttention.forward names its inputs ({', '.join(names)}); the exercise's names are "
            f"forward(query, key, value, mask=None), and they are part of it: later code passes them by name "
            f"(lesson 06's attention plot reads query, key, value and mask, and lesson 07 swaps your attention for "
            f"PyTorch's fused one, which your layers then call with the names they use)."
        )


# --------------------------------------------------------------------------
# The check.


def _check_runs(check: Check, module: nn.Module, x: torch.Tensor) -> None:
    """Self-attention runs, keeps the shape, and gives the same output twice in eval mode."""
    stages.eval_deterministic(check, module, lambda m: _run(check, m, x, x, x, shape=x.shape,
                                                            what="the output for self-attention"),
                              "MultiHeadAttention", 0.0)
    check.ok("self-attention returns (B, L, d_model)")


def _check_value_path(check: Check, case: _Case, x: torch.Tensor) -> None:
    """Uniform attention (W_q = 0): the value path, the head split/merge and W_o, without the scores."""
    B, L, D = x.shape
    _install(case.module, case.uniform)
    out = _run(check, case.module, x, x, x, shape=(B, L, D), what="the output for self-attention")
    values = _project(case.wu, "W_v", x)  # (B, L, D)
    expected = _project(case.wu, "W_o", _average(values, _allowed(None, B, L, L)))
    if not close_enough(out, expected):
        _diagnose_value_path(check, out, case.wu, x, case.num_heads)
    check.ok("with equal scores, every position gets W_o(average of the value projections)")


def _check_self_attention(check: Check, case: _Case, x: torch.Tensor) -> None:
    """Positions are not mixed, batch elements are independent, and the values match nn.MultiheadAttention."""
    B, L, D = x.shape
    module, H = case.module, case.num_heads
    _install(module, case.weights)
    out = _run(check, module, x, x, x, shape=(B, L, D), what="the output for self-attention")
    perm = torch.tensor([3, 0, 4, 1, 2])
    xp = x[:, perm]
    shuffled = _run(check, module, xp, xp, xp, shape=(B, L, D), what="the output for shuffled positions")
    if not close_enough(shuffled, out.detach()[:, perm].double()):
        check.fail(
            "Shuffling the positions of the input should shuffle the rows of the output the same way "
            "(attention has no notion of order), but with your MultiHeadAttention the output at one position "
            "changes when the other positions move.\nLikely cause: the query or key is split into heads "
            "with `view(B, num_heads, L, d_k)` (or without `.transpose(1, 2)`), so one head's rows mix "
            "features of several positions. Split with `view(B, L, num_heads, d_k).transpose(1, 2)`."
        )
    single = _run(check, module, x[1:], x[1:], x[1:], shape=(1, L, D), what="the output for one batch element")
    if not close_enough(single, out.detach()[1:].double()):
        check.fail(
            "The output for one batch element changes when other batch elements are present: a view or "
            "reshape mixes the batch axis with another axis. Keep B as the first dimension throughout "
            "(read it from the input: `B = query.size(0)`)."
        )
    check.ok("permuting positions permutes the output; batch elements are independent")
    if not close_enough(out, _oracle(case.w, H, x, x, x)):
        _diagnose_scores(check, out, case.w, x, H)
    check.ok("self-attention matches nn.MultiheadAttention with the same weights")


def _check_cross_attention(check: Check, case: _Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """L_q != L_k, key and value different tensors."""
    (B, L, D), L_k = q.shape, k.shape[1]
    module, wu = case.module, case.wu
    out = _run(check, module, q, k, v, shape=(B, L, D), what="the output for cross-attention", crash=(
        f"MultiHeadAttention fails when the query and the key/value have different lengths "
        f"(L_q={L}, L_k={L_k}), as in the decoder's cross-attention.\nLikely cause: key and value are "
        f"reshaped with the query's length; read each length from its own tensor (`key.size(1)`), "
        f"and merge the heads back with the query's length."))
    _install(module, case.uniform)
    out_u = _run(check, module, q, k, v, shape=(B, L, D), what="the output for cross-attention")
    expected_u = _project(wu, "W_o", _average(_project(wu, "W_v", v), _allowed(None, B, L, L_k)))
    if not close_enough(out_u, expected_u):
        slip = _named_slip(CROSS_SLIPS, out_u, wu, case.num_heads, q, k, v)
        if slip is not None:
            check.fail(slip.says.showing(f"Seen with L_q={L}, L_k={L_k} and all scores equal (W_q set to zero)."))
        check.close(out_u, expected_u, "the output for cross-attention with equal scores (W_q set to zero)",
                    hint="Each query should average W_v(value) over the keys, then apply W_o.")
    _install(module, case.weights)
    expected = _oracle(case.w, case.num_heads, q, k, v)
    if not close_enough(out, expected):
        check.close(out, expected, f"the output for cross-attention (L_q={L}, L_k={L_k})",
                    hint="Self-attention is right, so look at what differs: the lengths of key and value.")
    check.ok(f"cross-attention (L_q={L} != L_k={L_k}) matches nn.MultiheadAttention")


def _check_masks(check: Check, case: _Case, q, k, v, g: torch.Generator, previous: torch.Tensor) -> torch.Tensor:
    """(B, 1, 1, L_k) padding and (B, 1, L_q, L_k) per query, each row hides some keys but not all."""
    (B, L, _), L_k = q.shape, k.shape[1]
    padding = torch.tensor([[1, 1, 0, 1, 1, 0, 0], [1, 0, 1, 1, 1, 1, 0]], dtype=torch.bool)[:, None, None, :]
    per_query = torch.rand(B, 1, L, L_k, generator=g) < 0.5
    per_query[..., 0] = True
    per_query[..., -1] = False
    masks = ((padding, "padding mask of shape (B, 1, 1, L_k)"), (per_query, "mask of shape (B, 1, L_q, L_k)"))
    for mask, kind in masks:
        _check_mask(check, case.module, case.weights, case.uniform, case.w, case.wu, q, k, v, mask, kind,
                    case.num_heads)
    check.ok("masks of shape (B, 1, 1, L_k) and (B, 1, L_q, L_k) are honoured (True = may attend)")
    _check_attention_weights(check, case.module, case.w, case.num_heads, q, k, v, per_query, previous,
                             "a (B, 1, L_q, L_k) mask")
    check.ok("keeps the weights of the last call in attention_weights, shape (B, num_heads, L_q, L_k)")
    return padding


def _check_other_size(check: Check, cls, g: torch.Generator) -> None:
    """Other sizes, with dropout > 0 in eval mode."""
    D2, H2 = 24, 4
    other = check.build(cls, D2, H2, 0.5)
    _check_structure(check, other, D2, H2)
    other.eval()
    w2 = _install(other, stages.random_attention_weights(g, D2))
    x2 = torch.randn(3, 6, D2, generator=g)
    mask2 = torch.ones(3, 1, 1, 6, dtype=torch.bool)
    mask2[0, ..., 4:] = False
    mask2[2, ..., 1] = False
    what = f"the output for d_model={D2}, num_heads={H2}"
    first = stages.eval_deterministic(check, other, lambda m: _run(check, m, x2, x2, x2, mask2, shape=(3, 6, D2),
                                                                   what=what), "MultiHeadAttention(24, 4)", 0.5)
    check.close(
        first, _oracle(w2, H2, x2, x2, x2, mask2), f"the output for d_model={D2}, num_heads={H2}",
        hint="It works for d_model=12, num_heads=3: does your class use the d_model and num_heads it was given "
        "(d_k = d_model // num_heads) rather than fixed numbers?",
    )
    check.ok("works for d_model=24, num_heads=4, and dropout is off in eval mode")


def _check_divisibility(check: Check, cls) -> None:
    """A d_model that num_heads does not divide must be refused when the module is built."""
    refused = check.attempt(cls, 10, 4, what="MultiHeadAttention(10, 4)")
    if isinstance(refused, Raised) and isinstance(refused.exception, NotImplementedError):
        pass
    elif isinstance(refused, Raised):  # the learner's error: what we want
        exc = refused.exception
        if not isinstance(exc, ValueError):
            check.problem(
                f"MultiHeadAttention(10, 4) raises {type(exc).__name__}"
                + ("" if str(exc).strip() else " without a message")
                + ", but the exercise asks for a ValueError (lesson 04's next cell catches ValueError): "
                "`if d_model % num_heads != 0: raise ValueError(\"d_model must be divisible by num_heads\")`."
            )
        elif not str(exc).strip():
            check.problem(
                "MultiHeadAttention(10, 4) raises ValueError without a message. Say what is wrong: "
                "`raise ValueError(\"d_model must be divisible by num_heads\")`."
            )
        else:
            check.ok("refuses a d_model that num_heads does not divide with a ValueError and a message")
    else:
        check.problem(
            "MultiHeadAttention(10, 4) was built without complaint, but 10 is not divisible by 4 heads: the "
            "heads would not cover d_model. Raise a ValueError with a message in __init__ when "
            "`d_model % num_heads != 0`."
        )


# --------------------------------------------------------------------------
# The known slips: mutants of multi-head attention, written out in float64, each replayed where it shows.


def _split(t: torch.Tensor, H: int, how: str) -> torch.Tensor:
    """(B, L, D) cut into heads: the paper's way, (B, H, L, d_k), or as a known slip cuts it."""
    B, L, D = t.shape
    return {"heads": lambda: t.reshape(B, L, H, D // H).transpose(1, 2),
            "no transpose": lambda: t.reshape(B, L, H, D // H),  # attention then runs over the heads
            "bare view": lambda: t.reshape(B, H, L, D // H),  # each head's rows mix positions
            "interleaved": lambda: t.reshape(B, L, D // H, H).permute(0, 3, 1, 2)}[how]()


def _merge(out: torch.Tensor, B: int, L_q: int, D: int, how: str) -> torch.Tensor:
    """The heads put back side by side, (B, L_q, D): the paper's way, or as a known slip does it."""
    return {"transpose": lambda: out.transpose(1, 2).reshape(B, L_q, D),
            "plain": lambda: out.reshape(B, L_q, D),
            "interleaved": lambda: out.permute(0, 2, 3, 1).reshape(B, L_q, D)}[how]()


def _mha(w: dict, H: int, query, key, value, mask=None, *, split: str = "heads", merge: str = "transpose",
         scale: str = "d_k", heads: int | None = None, swap: tuple = (), untransposed: tuple = (),
         wo_first: bool = False, output: bool = True, residual: bool = False) -> torch.Tensor:
    """Multi-head attention in float64 with the weights ``w`` (nn.MultiheadAttention's arithmetic), or with the
    known slip its flags name: how the heads are split and merged, the scale of the scores, the number of heads,
    two projections swapped or used without their transpose, W_o applied first or never, the query added back."""
    H, w = heads or H, dict(w)
    if swap:
        w[swap[0]], w[swap[1]] = w[swap[1]], w[swap[0]]

    def project(name: str, x: torch.Tensor) -> torch.Tensor:
        weight, bias = w[name]
        return x.double() @ (weight if name in untransposed else weight.T) + bias

    (B, L_q, D), d_k = query.shape, query.shape[-1] // H
    q, k, v = project("W_q", query), project("W_k", key), project("W_v", value)
    if wo_first:
        v, output = project("W_o", v), False
    q, k, v = (_split(t, H, split) for t in (q, k, v))
    factor = {"d_k": d_k ** -0.5, "d_model": D ** -0.5, "none": 1.0, "twice": 1.0 / d_k}[scale]
    scores = q @ k.transpose(-2, -1) * factor
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    out = _merge(scores.softmax(-1) @ v, B, L_q, D, merge)
    out = project("W_o", out) if output else out
    return out + query.double() if residual else out


def _turn(name: str, also: str = "") -> Diagnosis:
    return Diagnosis(f"`{name}.weight` is used without its transpose{also}: nn.Linear computes x @ W^T + b.",
                     f"A product written by hand is `x @ self.{name}.weight.T + self.{name}.bias`, or simply call "
                     f"`self.{name}(x)`." + (" The same goes for W_o (and W_q, W_k)." if also else ""))


#: slips of the value path, the head split and merge and W_o: seen with all scores equal (W_q set to zero)
VALUE_PATH_SLIPS = (
    Slip("residual inside", Diagnosis(
        "Your output is the attention output *plus the query*: a residual connection is added inside "
        "MultiHeadAttention.", "The residual (and the LayerNorm) belong to the encoder/decoder layer; here return "
        "just `self.W_o(...)` of the merged heads."), dict(residual=True)),
    Slip("no output projection", Diagnosis(
        "Your output equals the merged heads *before* the output projection: W_o is never applied.",
        "After concatenating the heads back to (B, L_q, d_model), return `self.W_o(...)` of it."), dict(output=False)),
    Slip("K and V projections swapped", Diagnosis(
        "Your values are projected with W_k (and the keys with W_v): the K and V projections are swapped.",
        "K = W_k(key), V = W_v(value)."), dict(swap=("W_k", "W_v"))),
    Slip("heads attend to heads", Diagnosis(
        "In your MultiHeadAttention the heads attend to each other instead of to the positions.",
        "After `view(B, L, num_heads, d_k)` the heads must be moved in front of the positions with "
        "`.transpose(1, 2)`, so that attention runs over an axis of length L for each (batch, head)."),
        dict(split="no transpose", merge="plain")),
    Slip("heads attend to heads, merged with a transpose", Diagnosis(
        "In your MultiHeadAttention the heads attend to each other instead of to the positions (the split has no "
        "transpose, the merge has one).", "After `view(B, L, num_heads, d_k)` the heads must be moved in front of "
        "the positions with `.transpose(1, 2)`."), dict(split="no transpose")),
    Slip("split with a bare view", Diagnosis(
        "The heads are split with `view(B, num_heads, L, d_k)` directly, which cuts the memory in the wrong places: "
        "each head's rows mix features of several positions.", "Split with `view(B, L, num_heads, d_k).transpose(1, "
        "2)` and merge back with `.transpose(1, 2)` then a reshape."), dict(split="bare view", merge="plain")),
    Slip("split with a bare view, merged with a transpose", Diagnosis(
        "The heads are split with `view(B, num_heads, L, d_k)` directly, so each head's rows mix features of "
        "several positions.", "Split with `view(B, L, num_heads, d_k).transpose(1, 2)`."), dict(split="bare view")),
    Slip("merged without a transpose", Diagnosis(
        "The heads are merged in the wrong order: the attention output has shape (B, num_heads, L, d_k), and a "
        "`view(B, L, d_model)` straight away mixes positions.",
        "Transpose back first: `out.transpose(1, 2).contiguous().view(B, L, d_model)`."), dict(merge="plain")),
    Slip("heads concatenated interleaved", Diagnosis(
        "The heads are concatenated in the wrong order: head h's d_k features should sit in columns h * d_k to "
        "(h + 1) * d_k, and yours interleaves the heads' features.", "`out.transpose(1, 2).reshape(B, L, d_model)` "
        "puts them there from (B, num_heads, L, d_k)."), dict(merge="interleaved")),
    Slip("W_v without its transpose", _turn("W_v"), dict(untransposed=("W_v",))),
    Slip("W_o without its transpose", _turn("W_o"), dict(untransposed=("W_o",))),
    Slip("every projection without its transpose", _turn("W_v", ", and so is `W_o.weight`"),
         dict(untransposed=_NAMES)),
)

#: slips of the scores: invisible with equal scores, seen with the weights installed
SCORE_SLIPS = (
    Slip("W_o applied first", Diagnosis(
        "W_o is applied to the values before the heads are split (W_o(W_v(value))), not to the merged heads.",
        "The output projection comes last: split, attend per head, merge the heads back to (B, L_q, d_model), then "
        "`self.W_o(...)`."), dict(wo_first=True)),
    Slip("interleaved heads", Diagnosis(
        "Each head takes every num_heads-th feature (an interleaved split such as `view(B, L, d_k, num_heads)`) "
        "instead of a block of d_k consecutive features.", "Head h owns features h * d_k to (h + 1) * d_k, as in "
        "nn.MultiheadAttention: split with `view(B, L, num_heads, d_k).transpose(1, 2)` and merge back the same "
        "way."), dict(split="interleaved", merge="interleaved")),
    *(Slip(f"{h} heads", Diagnosis(
        f"Your module splits d_model={_D} into {h} heads of size {_D // h}, but it was built with num_heads={_H} "
        f"(d_k = {_D // _H}).", "Use the num_heads given to __init__ (store it as an attribute) rather than a fixed "
        "number."), dict(heads=h)) for h in range(1, _D + 1) if _D % h == 0 and h != _H),
    Slip("scaled by sqrt(d_model)", Diagnosis(
        f"The scores are divided by sqrt(d_model) = sqrt({_D}) instead of sqrt(d_k) = sqrt({_D // _H}).",
        "Each head compares vectors of size d_k = d_model // num_heads, so the scale is 1 / sqrt(d_k)."),
        dict(scale="d_model")),
    Slip("not scaled", Diagnosis(
        "The scores are not scaled.", "Divide Q K^T by sqrt(d_k) (your scaled_dot_product_attention does this if you "
        "pass it the per-head tensors)."), dict(scale="none")),
    Slip("scaled twice", Diagnosis(
        "The scores are scaled twice by 1 / sqrt(d_k).", "Your scaled_dot_product_attention already scales, so do "
        "not scale Q (or the scores) again in MultiHeadAttention."), dict(scale="twice")),
    Slip("Q and K projections swapped", Diagnosis(
        "The Q and K projections are swapped.", "Q = W_q(query) and K = W_k(key)."), dict(swap=("W_q", "W_k"))),
)


def _self_attention_only(w: dict, H: int, query, key, value, mask=None) -> torch.Tensor:
    """Attends over the query whatever key and value it is given (a mask of the query's length kept)."""
    fits = mask is not None and mask.shape[-1] == query.shape[1]
    return _mha(w, H, query, query, query, mask if fits else None)


#: slips of cross-attention (L_q != L_k, key and value different tensors), seen with equal scores
CROSS_SLIPS = (
    Slip("values from the key input", Diagnosis(
        "In cross-attention your values come from the `key` input instead of the `value` input (the two were "
        "swapped).", "forward(query, key, value): K = W_k(key) and V = W_v(value)."),
        lambda w, H, q, k, v, mask=None: _mha(w, H, q, v, k, mask)),
    Slip("self-attention only", Diagnosis(
        "In cross-attention your values come from the `query` input: the module attends over the query itself "
        "(self-attention) whatever key and value it is given.",
        "forward(query, key, value): Q = W_q(query), K = W_k(key), V = W_v(value)."), _self_attention_only),
)

#: slips of the mask, seen with equal scores
MASK_SLIPS = (
    Slip("mask ignored", Diagnosis(
        "Your MultiHeadAttention attends to every key, as if there were no mask: the mask never reaches the "
        "attention.", "Pass it on: `scaled_dot_product_attention(Q, K, V, mask)` (its head axis of size 1 "
        "broadcasts over the heads)."), lambda w, H, q, k, v, mask=None: _mha(w, H, q, k, v)),
    Slip("mask inverted", Diagnosis(
        "Your MultiHeadAttention attends exactly to the keys the mask hides: the mask's polarity is inverted.",
        "True means 'may attend', so hide the positions where the mask is False (`scores.masked_fill(~mask, "
        "float('-inf'))` or `mask == 0`), and do not invert the mask before passing it on."),
        lambda w, H, q, k, v, mask=None: _mha(w, H, q, k, v, None if mask is None else ~mask)),
)

SLIPS = VALUE_PATH_SLIPS + SCORE_SLIPS + CROSS_SLIPS + MASK_SLIPS


def _named_slip(slips, out: torch.Tensor, w: dict, H: int, *inputs: torch.Tensor) -> Slip | None:
    """The first of ``slips`` whose replay on these inputs, with the weights ``w``, is what the learner's module gave."""
    return matching_slip(slips, lambda slip: slip.replay(_mha, w, H, *inputs), same_tensor(out, **_LOOSE))


def _as_answer(slip: Slip) -> type[nn.Module]:
    """The slip made into a learner's MultiHeadAttention class (for the generated catalogue tests)."""
    class SlippedAttention(nn.Module):
        def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0):
            super().__init__()
            if d_model % num_heads:
                raise ValueError("num_heads does not divide d_model")
            self.num_heads, self.d_k = num_heads, d_model // num_heads
            self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model) for _ in _NAMES)
            self.dropout = nn.Dropout(p=dropout)

        def forward(self, query, key, value, mask=None):
            w = {name: (getattr(self, name).weight.double(), getattr(self, name).bias.double()) for name in _NAMES}
            self.attention_weights = stages.attention_weights_oracle(w, self.num_heads, query, key, mask).float()
            return slip.replay(_mha, w, self.num_heads, query, key, value, mask).to(query.dtype)

    return SlippedAttention


_EQUAL_SCORES = ("Seen with all scores equal (W_q set to zero), where every query should get W_o(average of the value "
                 "projections over the keys).")
_SCORES = ("Seen with the same weights as nn.MultiheadAttention: your output differs from its output, yet is right "
           "when all scores are equal (so the value path works).")


def _diagnose_value_path(check: Check, out, wu, x, H) -> None:
    """With equal scores the output is known exactly; name the slip that explains what we got."""
    slip = _named_slip(VALUE_PATH_SLIPS, out, wu, H, x, x, x)
    if slip is not None:
        check.fail(slip.says.showing(_EQUAL_SCORES))
    check.close(out, _mha(wu, H, x, x, x), "the output for self-attention with equal scores (W_q set to zero)",
                hint="With all scores equal each query averages the values, so the output should be W_o(average over "
                "positions of W_v(x)), the same at every position. Check the value projection, how the heads are "
                "split and merged, and W_o.")


def _diagnose_scores(check: Check, out, w, x, H) -> None:
    """The value path is right but the values are not: name the likely mistake in the scores."""
    slip = _named_slip(SCORE_SLIPS, out, w, H, x, x, x)
    if slip is not None:
        check.fail(slip.says.showing(_SCORES))
    check.close(out, _oracle(w, H, x, x, x), "the output for self-attention",
                hint="With equal scores your output is right, so the difference is in the scores: Q = W_q(query) and "
                "K = W_k(key) split into heads like V, and scores Q K^T / sqrt(d_k) per head. (If "
                "check_scaled_dot_product_attention does not pass yet, fix that first.)")


def _check_mask(check: Check, module, weights, uniform_weights, w, wu, q, k, v, mask, kind: str, H: int) -> None:
    B, L, L_k = q.shape[0], q.shape[1], k.shape[1]
    _install(module, uniform_weights)
    out = _run(check, module, q, k, v, mask, shape=(B, L, q.shape[2]), what=f"the output with a {kind}", hint=(
        f"It works without a mask but crashes with a {kind}. Pass the mask to "
        f"scaled_dot_product_attention as it is: it already has its head axis of size 1 and broadcasts "
        f"against the scores (B, num_heads, L_q, L_k); do not unsqueeze or reshape it."))
    allowed = _allowed(mask, B, L, L_k)
    values = _project(wu, "W_v", v)
    expected = _project(wu, "W_o", _average(values, allowed))
    if not close_enough(out, expected):
        slip = _named_slip(MASK_SLIPS, out, wu, H, q, k, v, mask)
        if slip is not None:
            check.fail(slip.says.showing(f"Seen with a {kind} and all scores equal (W_q set to zero)."))
        check.close(
            out, expected, f"the output with a {kind} and equal scores (W_q set to zero)",
            hint="Each query should average W_v(value) over the keys its mask row allows. Does the mask reach "
            "your scaled_dot_product_attention unchanged, with its head axis in place?",
        )
    _install(module, weights)
    out = _run(check, module, q, k, v, mask, shape=(B, L, q.shape[2]), what=f"the output with a {kind}")
    check.close(out, _oracle(w, H, q, k, v, mask), f"the output with a {kind}",
                hint="The output with all keys allowed is right, so look at how the mask is used.")


def _check_gradients(check: Check, module, weights, w, q, k, v, mask, H: int) -> None:
    """Gradients w.r.t. the inputs and the four projections, against nn.MultiheadAttention's."""
    _install(module, weights)
    B, L, D = q.shape

    def expected(r: torch.Tensor) -> dict[str, torch.Tensor]:
        leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
        mha, out = _oracle(w, H, *leaves, mask=mask, grad=True)
        # in_proj_weight is one tensor: its three chunks share one gradient, cut the same way.
        grads = torch.autograd.grad((out * r).sum(), leaves + [mha.in_proj_weight, mha.out_proj.weight])
        return dict(zip(("query", "key", "value", *_NAMES), [*grads[:3], *grads[3].chunk(3), grads[4]]))

    stages.gradients(
        check, lambda query, key, value: _run(check, module, query, key, value, mask, shape=(B, L, D),
                                              what="the output with a padding mask"),
        {"query": q, "key": k, "value": v}, expected, "MultiHeadAttention", "nn.MultiheadAttention",
        params={name: getattr(module, name).weight for name in _NAMES})


# --------------------------------------------------------------------------
# The contract: what later cells read, sizes beyond the small case, dropout measured.


def _check_distinct_projections(check: Check, module: nn.Module) -> None:
    """W_q, W_k, W_v and W_o must be four separate layers (a shared one learns one projection for all roles)."""
    layers = {name: getattr(module, name) for name in _NAMES}
    for i, a in enumerate(_NAMES):
        for b in _NAMES[i + 1:]:
            same_layer = layers[a] is layers[b]
            same_weight = isinstance(layers[a], nn.Linear) and isinstance(layers[b], nn.Linear) and (
                layers[a].weight is layers[b].weight)
            if same_layer or same_weight:
                shared = [n for n in _NAMES if layers[n] is layers[a] or getattr(layers[n], "weight", None) is
                          getattr(layers[a], "weight", 0)]
                check.fail(
                    f"{' = '.join(shared)} are one and the same nn.Linear (as in "
                    f"`self.W_q = self.W_k = self.W_v = nn.Linear(d_model, d_model)`), so the queries, keys and "
                    f"values share one projection and can never learn different roles.\n"
                    f"Create each projection separately: `self.W_q = nn.Linear(d_model, d_model)`, then "
                    f"`self.W_k = nn.Linear(d_model, d_model)`, and so on."
                )


def _check_head_attributes(check: Check, module: nn.Module, d_model: int, num_heads: int, record: bool = True) -> None:
    """``num_heads`` and ``d_k``: later cells (the heads plot, lesson 06's cross-attention plot) read them."""
    wanted = {"num_heads": num_heads, "d_k": d_model // num_heads}
    for name, value in wanted.items():
        found = getattr(module, name, None)
        if found is None:
            others = [n for n, v in vars(module).items() if isinstance(v, int) and not isinstance(v, bool)
                      and v == value and not n.startswith("_") and n not in wanted]
            guess = f" (it keeps {value} in `{others[0]}`?)" if others else ""
            check.fail(
                f"Your MultiHeadAttention({d_model}, {num_heads}) has no attribute `{name}`{guess}.\n"
                f"Later cells read `mha.num_heads` and `mha.d_k` (lesson 04's plots, lesson 06's cross-attention "
                f"plot): store them under these names in __init__: `self.num_heads = num_heads` and "
                f"`self.d_k = d_model // num_heads`."
            )
        if isinstance(found, bool) or not isinstance(found, int) or found != value:
            check.fail(
                f"MultiHeadAttention({d_model}, {num_heads}).{name} is {describe(found)}, but it should be "
                f"{value}" + (" (d_k = d_model // num_heads, the size of one head)" if name == "d_k" else
                              " (the num_heads it was built with)") + "."
            )
    if record:
        check.ok(f"stores num_heads and d_k = d_model // num_heads (d_model={d_model}, num_heads={num_heads})")


def _check_attention_weights(check: Check, module, w, H, q, k, v, mask, previous, what: str) -> torch.Tensor:
    """After a call, ``attention_weights`` holds that call's weights, (B, num_heads, L_q, L_k)."""
    B, L_q, L_k = q.shape[0], q.shape[1], k.shape[1]
    before = getattr(module, "attention_weights", None)
    before = before.detach().clone() if isinstance(before, torch.Tensor) else before
    _run(check, module, q, k, v, *([] if mask is None else [mask]), shape=(B, L_q, q.shape[2]),
         what=f"the output for {what}")
    stored = getattr(module, "attention_weights", None)
    shape = (B, H, L_q, L_k)
    intro = f"After a call with {what}, your MultiHeadAttention's `attention_weights`"
    expected = stages.attention_weights_oracle(w, H, q, k, mask)
    if (isinstance(stored, torch.Tensor) and isinstance(before, torch.Tensor) and identical(stored.detach(), before)
            and not close_enough(stored, expected)):
        check.fail(f"{intro} still holds the weights of an earlier call: set `self.attention_weights = weights` "
                   f"in forward, on every call (not only the first).")
    if not isinstance(stored, torch.Tensor):
        check.fail(
            f"{intro} is {describe(stored)}.\nKeep the weights your scaled_dot_product_attention returns: "
            f"`out, weights = scaled_dot_product_attention(q, k, v, mask)` then `self.attention_weights = weights` "
            f"(shape (B, num_heads, L_q, L_k)). Lesson 04 plots them, one map per head."
        )
    if tuple(stored.shape) != shape:
        extra = " Averaged over the heads? Keep one map per head." if tuple(stored.shape) == (B, L_q, L_k) else ""
        check.fail(f"{intro} has shape {fmt_shape(stored.shape)}; it should be (B, num_heads, L_q, L_k) = "
                   f"{fmt_shape(shape)}.{extra}")
    if close_enough(stored, expected):
        return stored.detach().clone()
    if not close_enough(stored.detach().double().sum(-1), torch.ones(B, H, L_q, dtype=torch.float64), **_LOOSE):
        check.fail(f"{intro} has rows that do not sum to 1: it holds the scores (before the softmax), not the "
                   f"attention weights. Store the weights your scaled_dot_product_attention returns.")
    check.close(stored, expected, f"`attention_weights` after a call with {what}",
                hint="They should be the softmax weights of each head, as nn.MultiheadAttention's "
                "(need_weights=True, average_attn_weights=False) with the same projections.")
    return stored.detach().clone()


def _check_sizes(check: Check, cls, g: torch.Generator) -> None:
    """One head, a d_model that is not a power of two, and sentences as long as lesson 06's (max_len = 64)."""
    for D, H, B, L, L_k in ((20, 1, 2, 9, 9), (20, 4, 2, 64, 70), (12, 3, 1, 5, 6)):  # B = 1: lesson 04's plot
        what = f"d_model={D}, num_heads={H}, L_q={L}, L_k={L_k}"
        module = check.build(cls, D, H)
        _check_head_attributes(check, module, D, H, record=False)
        module.eval()
        w = _install(module, stages.random_attention_weights(g, D))
        q, kv = torch.randn(B, L, D, generator=g), torch.randn(B, L_k, D, generator=g)
        mask = torch.ones(B, 1, 1, L_k, dtype=torch.bool)
        mask[0, ..., L_k - 3:] = False
        out = _run(check, module, q, kv, kv, mask, shape=(B, L, D), what=f"the output for {what}", hint=(
            f"MultiHeadAttention works for the small sizes but fails for {what} (lesson 06 uses sentences of up "
            f"to max_len = 64 tokens): is a size fixed somewhere, or does a `.squeeze()` drop the head axis?"))
        check.close(out, _oracle(w, H, q, kv, kv, mask), f"the output for {what}",
                    hint="It works for the smaller sizes: is something fixed to a size, or does a `.squeeze()` "
                    "remove the head axis when num_heads=1?")
        stored = getattr(module, "attention_weights", None)
        if not isinstance(stored, torch.Tensor) or tuple(stored.shape) != (B, H, L, L_k):
            check.fail(f"With {what} and a batch of {B}, `attention_weights` is {describe(stored)}; it should have "
                       f"shape (B, num_heads, L_q, L_k) = {fmt_shape((B, H, L, L_k))}. (A `.squeeze()` removes the "
                       f"head axis when num_heads=1 and the batch axis when B=1, and lesson 04 plots "
                       f"`attention_weights[0]`, the heads of the first sentence: use `view`/`transpose` with "
                       f"explicit sizes, and store the weights as they are.)")
    check.ok("works with num_heads=1, d_model=20 (not a power of two), sentences of 64 and 70 tokens and a batch "
             "of one sentence")


def _check_dropout(check: Check, cls, g: torch.Generator) -> None:
    """Train mode: dropout with rate p on the attention weights only, fresh on every call, from the global RNG."""
    D, H, B, L_q, L_k, p = 20, 2, 4, 8, 8, 0.5
    module = check.build(cls, D, H, p)
    weights = stages.random_attention_weights(g, D)
    identity = (torch.eye(D), torch.zeros(D))
    weights["W_q"] = (weights["W_q"][0] * 0.5, weights["W_q"][1])
    weights["W_v"], weights["W_o"] = identity, identity
    w = _install(module, weights)
    q, k = torch.randn(B, L_q, D, generator=g), torch.randn(B, L_k, D, generator=g)
    v = stages.designed_values(B, L_k, D, H)
    reference = stages.attention_weights_oracle(w, H, q, k)  # (B, H, L_q, L_k) without dropout
    module.train()

    def sites() -> list[stages.Site]:
        out = _run(check, module, q, k, v, shape=(B, L_q, D), what=f"the output in training mode (dropout={p})")
        dropped, sums, rest = stages.read_weights(out, L_k, H)
        if not stages.weights_read_back(dropped, sums, rest):
            columns = (dropped.abs() < 1e-6)
            on_values = bool(columns.any()) and bool((columns == columns[:, :, :1]).all())
            where = "on the values (V)" if on_values else "on the merged heads or the output"
            check.fail(
                f"In training mode your MultiHeadAttention applies a dropout after the attention, {where} (whether "
                f"or not it drops the attention weights as well).\nLike nn.MultiheadAttention, drop entries of the "
                f"weights themselves, and nothing else: "
                f"`out = self.dropout(weights) @ v` (the layers of lesson 05 add the dropout on each sublayer's "
                f"output; one here would double it)."
            )
        return [stages.Site("the attention weights", dropped, reference,
                            {"head": 1, "sentence of the batch": 0, "query": 2})]

    stages.dropout_measured(
        check, sites, p, "MultiHeadAttention",
        fix="Apply `self.dropout = nn.Dropout(dropout)` to the weights in training: `out = self.dropout(weights) @ v`.",
        not_exact="In training mode the attention weights of your MultiHeadAttention are not the eval-mode weights "
                  "with some entries zeroed and the rest scaled by 1 / (1 - p): the dropout acts before the softmax "
                  "(on the scores, or on Q or K), which changes every weight of the row.\nApply dropout to the weights, "
                  "after the softmax: `self.dropout(weights) @ v`.")
    _learns_in_training(check, module, q, k, v, p)
    stored = getattr(module, "attention_weights", None)
    if not isinstance(stored, torch.Tensor) or tuple(stored.shape) != (B, H, L_q, L_k):
        check.fail(f"After a call in training mode, `attention_weights` is {describe(stored)}; it should hold that "
                   f"call's weights, shape {fmt_shape((B, H, L_q, L_k))}: store them on every call, in either mode.")
    module.eval()
    stages.contract_defaults(check, cls, "MultiHeadAttention")
    check.ok("stores the attention weights in training mode too")


def _learns_in_training(check: Check, module: nn.Module, q, k, v, p: float) -> None:
    """In training mode too, where the output comes from the dropped weights, gradients reach W_q and W_k."""
    module.zero_grad(set_to_none=True)
    out = _run(check, module, q, k, v, shape=q.shape, what=f"the output in training mode (dropout={p})")
    if not out.requires_grad:
        return  # named by the gradient stage
    out.mul(torch.randn(out.shape, generator=generator(12))).sum().backward()
    silent = [name for name in ("W_q", "W_k") if getattr(module, name).weight.grad is None
              or not bool(getattr(module, name).weight.grad.abs().sum() > 0)]
    module.zero_grad(set_to_none=True)
    if silent:
        check.fail(f"In training mode no gradient reaches {' and '.join(f'`{n}`' for n in silent)} of your "
                   f"MultiHeadAttention: the weights it drops are cut off from autograd (`weights.detach()` or "
                   f"`.data` before `self.dropout(weights) @ v`, or attention weights returned detached by "
                   f"scaled_dot_product_attention). Keep the weights in the graph; detach only the copy stored in "
                   f"`self.attention_weights`.")
    check.ok("in training mode too, gradients reach W_q and W_k through the dropped weights")


MULTI_HEAD_ATTENTION = Exercise(
    "MultiHeadAttention", _check_multi_head_attention,
    oracle="nn.MultiheadAttention in float64 carrying the learner's four projections (its masks inverted: True = "
           "blocked there); with W_q set to zero, the exact average of the value projections",
    cases="d_model 12 and 3 heads: self-attention (2, 5), cross-attention L_q 5 and L_k 7, a padding mask and a "
          "per-query mask; then d_model 24 with 4 heads, one head and d_model 20, sentences of 64 and 70 tokens, a "
          "batch of one; dropout 0.5 measured in training; all drawn from the check's seed",
    slips=SLIPS, answer=_as_answer)
