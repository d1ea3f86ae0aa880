"""Checker for lesson 01: scaled dot-product attention.

The oracle is PyTorch's own ``F.scaled_dot_product_attention``, run in float64.
The attention weights come from the same function with the identity matrix as
the values (``softmax(...) @ I`` is the weights themselves), so no attention
formula is written out here. The known slips (``SOFTMAX_SLIPS``, ``MASK_SLIPS``,
``FILL_SLIPS``, ``SCALE_SLIPS``, ``OUTPUT_SLIPS``: mutants of the oracle) are
replayed only to *name* a mistake once the comparison with the oracle failed;
invariants (rows summing to 1, finite values, the axis of the softmax) name the rest.

What the rest of the course relies on (``contracts.CONTRACTS["scaled_dot_product_attention"]``)
is checked stage by stage: 4-D and 3-D inputs with every kind of mask the
course passes, large scores, self-attention, long sequences with a single
head, float64 inputs, gradients, and inputs on a (pretended) GPU.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from .. import contracts
from . import stages
from ._core import (ATOL, RTOL, Check, CheckResult, Raised, close_enough, fmt_number, fmt_shape, fmt_values,
                    generator)
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip

_NAME = "scaled_dot_product_attention"
_SIGNATURE = contracts.contract(_NAME).signature.split(" ->")[0]  # how the course calls it
_LOOSE = (1e-4, 1e-3)  # (atol, rtol) for large scores, where float32 loses digits


def check_scaled_dot_product_attention(scaled_dot_product_attention: Callable) -> CheckResult:
    """Check ``scaled_dot_product_attention(query, key, value, mask=None) -> (output, weights)``."""
    return SCALED_DOT_PRODUCT_ATTENTION.check(scaled_dot_product_attention)


def _check_scaled_dot_product_attention(check: Check, fn: Callable) -> None:
    check.callable_(fn, _NAME)
    g = generator(0)
    q, k, v, allowed = _unmasked_stage(check, fn, g)
    _masks_stage(check, fn, g, q, k, v, allowed)
    _large_scores_stage(check, fn, q, k, v, allowed)
    _self_attention_stage(check, fn, g)
    _long_stage(check, fn, g)
    q64, k64, v64, mask64 = _float64_stage(check, fn, g)
    _gradients_stage(check, fn, g)
    _float64_precision(check, fn, q64, k64, v64, mask64)
    _device_stage(check, fn, g)


# --------------------------------------------------------------------------
# The stages, in the order a learner meets the problems.


def _unmasked_stage(check: Check, fn: Callable, g: torch.Generator):
    """(batch, heads, L, d) with every size different, no mask (the default)."""
    # d_k = 6: sqrt(d_k) differs from d_k / 2, from every other size and from common hard-coded numbers (8 = sqrt(64)).
    B, H, L_q, L_k, d_k, d_v = 2, 3, 5, 7, 6, 4
    q = torch.randn(B, H, L_q, d_k, generator=g)
    k = torch.randn(B, H, L_k, d_k, generator=g)
    v = torch.randn(B, H, L_k, d_v, generator=g)
    _check_case(check, fn, q, k, v, None, "none")
    check.ok("on (B, H, L, d) inputs with mask=None (the default): (output, weights) of the right shapes, the weights "
             "a softmax over the keys scaled by 1/sqrt(d_k), the output as F.scaled_dot_product_attention's "
             "(d_k != d_v, L_q != L_k)")
    allowed = torch.arange(L_k).expand(B, L_k) < torch.tensor([[5], [3]])  # (B, L_k)
    return q, k, v, allowed


def _masks_stage(check: Check, fn: Callable, g: torch.Generator, q, k, v, allowed) -> None:
    """The masks the course passes: padding (B, 1, 1, L_k), per query (B, 1, L_q, L_k), shared (L_q, L_k)."""
    B, L_q, L_k = q.shape[0], q.shape[-2], k.shape[-2]
    mask = allowed.reshape(B, 1, 1, L_k)
    _check_case(check, fn, q, k, v, mask, "positional", batched_ok=True)
    check.ok("a (B, 1, 1, L_k) mask hides keys where it is False (True means 'may attend')")

    i = torch.arange(L_q).reshape(L_q, 1)
    j = torch.arange(L_k).reshape(1, L_k)
    mask = ((j <= i + 1) & allowed.reshape(B, 1, 1, L_k)).reshape(B, 1, L_q, L_k)
    _check_case(check, fn, q, k, v, mask, "keyword", batched_ok=True)
    check.ok("a (B, 1, L_q, L_k) mask passed as mask=... works")

    B3, L_q3, L_k3, d_k3, d_v3 = 3, 6, 5, 2, 8
    q3 = torch.randn(B3, L_q3, d_k3, generator=g)
    k3 = torch.randn(B3, L_k3, d_k3, generator=g)
    v3 = torch.randn(B3, L_k3, d_v3, generator=g)
    mask3 = _rows_with_both(torch.rand(L_q3, L_k3, generator=g) < 0.6)
    _check_case(check, fn, q3, k3, v3, mask3, "positional", batched_ok=True, earlier=(6,))
    check.ok("works on 3-D inputs with an (L_q, L_k) mask")


def _large_scores_stage(check: Check, fn: Callable, q, k, v, allowed) -> None:
    """Scores around +-800: a softmax without the max subtraction overflows."""
    B, H, L_k = q.shape[0], q.shape[1], k.shape[-2]
    ql, kl = q.clone(), k.clone()
    ql[..., 0] = 44.0 * torch.tensor([1.0, -1.0, 1.0]).reshape(1, H, 1)
    kl[..., 0] = 44.0
    _check_case(check, fn, ql, kl, v, allowed.reshape(B, 1, 1, L_k), "positional", batched_ok=True, large=True)
    check.ok("numerically stable for large scores")


def _self_attention_stage(check: Check, fn: Callable, g: torch.Generator) -> None:
    """One tensor as query, key and value, so L_q == L_k (no mask given)."""
    x = torch.randn(3, 6, 5, generator=g)
    result = check.call(fn, x, x, x)
    out, weights = check.unpack(result, ("output", "weights"), f"Your {_NAME}")
    L = x.shape[-2]
    if isinstance(weights, torch.Tensor) and tuple(weights.shape) == (*x.shape[:-1], L):
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        if not close_enough(weights, _oracle(x, x, x, None)[1]) and close_enough(weights, _oracle(x, x, x, causal)[1]):
            check.fail(
                "When query and key have the same length and no mask is given, your weights hide the future "
                "(they are 0 above the diagonal): the function adds a causal mask on its own.\n"
                "Apply only the mask it is given (`mask=None` means every key may be attended); the decoder "
                "passes the causal mask explicitly."
            )
    _check_case(check, fn, x, x, x, None, "none", earlier=(6, 2))
    check.ok("self-attention (query = key = value, L_q == L_k) without a mask hides nothing")


def _long_stage(check: Check, fn: Callable, g: torch.Generator) -> None:
    """Sentences of lesson 06's length: L_q = 64, L_k = 70, one head, d_k = 10, padding and causal masks."""
    B, H, L_q, L_k, d_k, d_v = 2, 1, 64, 70, 10, 10
    q = torch.randn(B, H, L_q, d_k, generator=g)
    k = torch.randn(B, H, L_k, d_k, generator=g)
    v = torch.randn(B, H, L_k, d_v, generator=g)
    lengths = torch.tensor([[70], [41]])
    causal = torch.arange(L_k)[None, :] <= torch.arange(L_q)[:, None] + 6  # (L_q, L_k)
    mask = (torch.arange(L_k)[None, :] < lengths).reshape(B, 1, 1, L_k) & causal  # (B, 1, L_q, L_k)
    _check_case(check, fn, q, k, v, mask, "keyword", batched_ok=True, earlier=(6, 2, 5))
    check.ok("long sequences (L_q = 64, L_k = 70) with a single head (H = 1) and d_k = 10")


def _float64_stage(check: Check, fn: Callable, g: torch.Generator) -> tuple:
    """float64 inputs (the course checks whole layers in float64): the output stays float64; returns the inputs."""
    q, k, v, mask = _small_inputs(g, torch.float64)
    _check_case(check, fn, q, k, v, mask, "positional", batched_ok=True, earlier=(2, 5, 10))
    check.ok("float64 inputs give a float64 output (the dtype of the inputs is kept)")
    return q, k, v, mask


def _float64_precision(check: Check, fn: Callable, q, k, v, mask) -> None:
    """In float64 every step stays in float64: gradcheck (finite differences) agrees with autograd."""
    leaves = [t[:1].clone().requires_grad_(True) for t in (q, k, v)]  # one sentence: 138 entries to perturb

    def output(*qkv: torch.Tensor) -> torch.Tensor:
        return fn(*qkv, mask[:1])[0]

    consistent = check.attempt(torch.autograd.gradcheck, output, tuple(leaves), raise_exception=False,
                               what="torch.autograd.gradcheck on your function")
    if consistent is False:  # float64 finite differences are exact to about 1e-10; float32 steps make them noise
        check.fail("For float64 inputs your output has the float64 dtype, but some step computes in float32 (a "
                   "`.float()`, or a float32 tensor mixed in) and converts back: its values move in steps of "
                   "float32's precision, so `torch.autograd.gradcheck` finds the gradients do not match the "
                   "function. Float64 is how later checkers and gradient checks measure small differences: keep "
                   "every step in the inputs' dtype (`torch.softmax(scores, dim=-1)` as it is).")
    check.ok("computes in float64 for float64 inputs (torch.autograd.gradcheck agrees)")


def _gradients_stage(check: Check, fn: Callable, g: torch.Generator) -> None:
    """Gradients flow to query, key and value as in PyTorch's attention."""
    q, k, v = (torch.randn(2, 3, n, d, generator=g, dtype=torch.float64) for n, d in ((4, 3), (5, 3), (5, 2)))
    mask = torch.tensor([[1, 1, 0, 1, 1], [1, 0, 1, 1, 0]], dtype=torch.bool).reshape(2, 1, 1, 5)

    expected = stages.oracle_gradients(lambda *qkv: F.scaled_dot_product_attention(*qkv, attn_mask=mask),
                                       {"query": q, "key": k, "value": v})
    stages.gradients(
        check, lambda query, key, value: _call(check, fn, query, key, value, mask, "positional", batched_ok=True)[0],
        {"query": q.float(), "key": k.float(), "value": v.float()}, expected, "output",
        "F.scaled_dot_product_attention", causes={frozenset({"query", "key"}): (
            "No gradient (or a wrong one) reaches `query` and `key`: the weights are cut off from autograd before "
            "`weights @ value`.\nLikely cause: `weights.detach()`, `.data`, or computing the weights under "
            "`torch.no_grad()`. Keep the weights in the graph.")})

    # Lesson 04's MultiHeadAttention trains through the returned weights: `dropout(weights) @ v`.
    detached = ("The attention weights your function returns are cut off from autograd (`.detach()`, `.data`, or "
                "computed under `torch.no_grad()`). Lesson 04's MultiHeadAttention applies dropout to these weights "
                "in training, `self.dropout(weights) @ v`, so with detached weights no gradient would reach W_q and "
                "W_k. Return the weights as they are; detach only the copy you store for plotting.")
    leaves = [t.float().requires_grad_(True) for t in (q, k)]
    weights = _call(check, fn, *leaves, v.float(), mask, "positional", batched_ok=True)[1]
    if isinstance(weights, torch.Tensor) and weights.grad_fn is None:
        check.fail(detached)

    def oracle_weights(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        scores = (query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))).masked_fill(~mask, float("-inf"))
        return scores.softmax(-1)  # (B, H, L_q, L_k)

    stages.gradients(
        check, lambda query, key: _call(check, fn, query, key, v.float(), mask, "positional", batched_ok=True)[1],
        {"query": q.float(), "key": k.float()}, stages.oracle_gradients(oracle_weights, {"query": q, "key": k}),
        "attention weights", "softmax(QK^T / sqrt(d_k)) for the weights it returns",
        causes={frozenset({"query", "key"}): detached})


def _device_stage(check: Check, fn: Callable, g: torch.Generator) -> None:
    """Inputs on a GPU: a pretended one everywhere, and the real one when there is one."""
    q, k, v, mask = _small_inputs(g, torch.float32)
    stages.on_gpu(check, fn, q, k, v, what=_NAME, inputs="query, key and value (with no mask)",
                  outputs=("the output", "the weights"), source="query")
    stages.on_gpu(check, fn, q, k, v, mask, what=_NAME, inputs="query, key, value and the mask",
                  outputs=("the output", "the weights"), source="query")
    # lesson 08 trains under bfloat16 autocast; in float16 it first tries this function and falls back to 32 bits
    stages.in_16_bits(check, lambda dtype: fn(q.to(dtype), k.to(dtype), v.to(dtype), mask), _NAME, float16=False)


# --------------------------------------------------------------------------
# The oracle and the inputs.


def _oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float | None = None):
    """(output, weights) from PyTorch in float64; weights = attention applied to identity values."""
    q, k, v = q.double(), k.double(), v.double()
    eye = torch.eye(k.shape[-2], dtype=torch.float64)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask, scale=scale)
    return out, weights


def _small_inputs(g: torch.Generator, dtype: torch.dtype):
    """query (2, 2, 4, 6), key (2, 2, 5, 6), value (2, 2, 5, 3) and a (2, 1, 1, 5) padding mask."""
    q = torch.randn(2, 2, 4, 6, generator=g, dtype=dtype)
    k = torch.randn(2, 2, 5, 6, generator=g, dtype=dtype)
    v = torch.randn(2, 2, 5, 3, generator=g, dtype=dtype)
    mask = torch.tensor([[1, 1, 1, 0, 1], [1, 0, 1, 1, 1]], dtype=torch.bool).reshape(2, 1, 1, 5)
    return q, k, v, mask


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """query . key for every (query, key) pair, unscaled, float64 (used only to name mistakes)."""
    return q.double() @ k.double().transpose(-2, -1)


def _rows_with_both(allowed: torch.Tensor) -> torch.Tensor:
    """Make sure every row of a (..., L_q, L_k) boolean mask has a True and a False."""
    allowed = allowed.clone()
    rows = allowed.reshape(-1, allowed.shape[-1])
    for i, row in enumerate(rows):
        row[i % row.numel()] = True
        row[(i + 1) % row.numel()] = False
    return rows.reshape(allowed.shape)


def _mask_text(mask: torch.Tensor | None) -> str:
    return "no mask" if mask is None else f"a boolean mask of shape {fmt_shape(mask.shape)}"


# --------------------------------------------------------------------------
# Running the learner's function.


def _runs(check: Check, fn: Callable, *args: Any, **kwargs: Any) -> bool:
    """Whether the learner's function runs on other inputs and returns two items (silent)."""
    result = check.attempt(fn, *args, **kwargs)
    return isinstance(result, (tuple, list)) and len(result) == 2


def _crash_hint(check: Check, fn: Callable, q, k, v, mask, how: str, batched_ok: bool) -> str:
    """After a crash, try nearby inputs to say what the crash depends on."""
    lead = q.shape[:-2]
    try:
        inspect.signature(fn).bind(q, k, v, mask)
    except TypeError:
        return f"Define it with the signature of the exercise: `def {_SIGNATURE}:`."
    except ValueError:  # no signature to read (a builtin): go on probing
        pass
    if how == "keyword" and _runs(check, fn, q, k, v, mask):
        return (
            "It runs when the mask is passed positionally but not as `mask=...`: "
            "name the fourth parameter `mask` (with the default `mask=None`)."
        )
    if max(q.shape[-2], k.shape[-2]) >= 64:
        short = (q[..., :8, :], k[..., :8, :], v[..., :8, :])
        short_mask = None if mask is None else mask[..., : min(8, mask.shape[-2]), :8]
        if _runs(check, fn, *short, short_mask):
            return (
                f"It works for short sequences (8 positions) but crashes for long ones (L_q = {q.shape[-2]}, "
                f"L_k = {k.shape[-2]}): a size is fixed somewhere, such as a table or a mask built once for a few "
                f"positions. Build everything from the sizes of the inputs."
            )
    if q.dtype != torch.float32 and _runs(check, fn, q.float(), k.float(), v.float(), mask):
        return (
            f"It works with float32 inputs but crashes with {q.dtype} ones: a tensor is created in the default "
            f"dtype (float32) and then mixed with the inputs. Create it with `dtype=query.dtype` (or "
            f"`scores.new_zeros(...)`, `torch.zeros_like(scores)`), or leave the dtype to the inputs."
        )
    if mask is not None and _runs(check, fn, q, k, v):
        return (
            f"It runs without a mask but crashes with a mask of shape {fmt_shape(mask.shape)}. "
            f"A mask arrives already broadcastable to the scores {fmt_shape((*lead, q.shape[-2], k.shape[-2]))}: "
            f"use it as it is (no unsqueeze or view) and fill the scores where it is False."
        )
    if len(lead) >= 2 and _runs(check, fn, q[0], k[0], v[0], None if mask is None or mask.dim() < 3 else mask[0]):
        return (
            f"It works on {len(lead) + 1}-D inputs but crashes on {len(lead) + 2}-D ones such as these, "
            f"(batch, heads, L, d), as lesson 04 calls it. Likely cause: an axis counted from the front "
            f"(`key.transpose(1, 2)`, `query.size(2)`), which names another axis once a leading dimension is "
            f"added. Count from the end: `key.transpose(-2, -1)`, `query.size(-1)`."
        )
    if len(lead) and _runs(check, fn, q[(0,) * len(lead)], k[(0,) * len(lead)], v[(0,) * len(lead)]):
        return (
            "It works on 2-D inputs (L, d) but crashes with leading batch/head dimensions. "
            "Likely cause: transposing the wrong axes of `key` (`key.T` or `key.transpose(0, 1)` on a batched "
            "tensor). Swap only the last two axes: `key.transpose(-2, -1)`."
        )
    if batched_ok:
        return (
            f"It worked on 4-D inputs (batch, heads, L, d) but crashed on {len(lead) + 2}-D ones. "
            f"Count axes from the end (-1, -2) rather than from the front, so that any number of "
            f"leading dimensions works."
        )
    side = torch.randn(*lead, 5, 5, generator=generator(99))
    if _runs(check, fn, side, side.clone(), side.clone()):
        return (
            "It works when L_q == L_k and d_k == d_v but crashes when they differ. Likely causes: `key` not "
            "transposed, or `key` and `value` (or `query`) used in each other's place. The scores are "
            "query @ key^T, shape (..., L_q, L_k); the output is weights @ value, shape (..., L_q, d_v)."
        )
    return (
        f"Expected shapes: query {fmt_shape(q.shape)}, key {fmt_shape(k.shape)}, value {fmt_shape(v.shape)} "
        f"-> scores query @ key^T (key with its last two axes swapped) (..., L_q, L_k) = "
        f"{fmt_shape((*lead, q.shape[-2], k.shape[-2]))} "
        f"-> output (..., L_q, d_v) = {fmt_shape((*lead, q.shape[-2], v.shape[-1]))}."
    )


def _shape_hint(kind: str, actual: torch.Size, q, k, v, mask) -> str:
    lead = tuple(q.shape[:-2])
    L_q, L_k, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    shape = tuple(actual)
    if mask is not None and len(shape) > len(lead) + 2:
        return (
            f"It has more axes than the inputs. Likely cause: the mask (shape {fmt_shape(mask.shape)}) is "
            f"reshaped inside the function (for example `mask.unsqueeze(1)`), so broadcasting adds an axis. "
            f"The mask already broadcasts against the scores (..., L_q, L_k): use it as given."
        )
    if kind == "output":
        if shape[:-1] == (*lead, L_q) and shape[-1] == d_k:
            return (
                f"Its last dimension is d_k = {d_k}, the size of the keys, where the values have d_v = {d_v}. "
                f"Likely cause: multiplying the weights by `key` instead of `value`."
            )
        return "The output has one row per query and the size of the values: (..., L_q, d_v)."
    if shape == (*lead, L_k, L_q):
        return "Your weights are transposed: the scores are query @ key^T (one row per query), not key @ query^T."
    return "The weights hold one entry per (query, key) pair: (..., L_q, L_k)."


def _call(check: Check, fn: Callable, q, k, v, mask, how: str, batched_ok: bool = False):
    """Call the learner's function; return (output, weights) after type, shape and dtype checks."""
    args: tuple = (q, k, v)
    kwargs: dict = {}
    if how == "positional":
        args += (mask,)
    elif how == "keyword":
        kwargs["mask"] = mask
    probe = check.attempt(fn, *(t.clone() for t in args), **{n: t.clone() for n, t in kwargs.items()})
    hint = ""
    if isinstance(probe, Raised) and not isinstance(probe.exception, NotImplementedError):
        hint = _crash_hint(check, fn, q, k, v, mask, how, batched_ok)
    result = check.call(fn, *args, hint=hint, **kwargs)
    out, weights = check.unpack(result, ("output", "weights"), f"Your {_NAME}")
    lead = tuple(q.shape[:-2])
    want_out = (*lead, q.shape[-2], v.shape[-1])
    want_w = (*lead, q.shape[-2], k.shape[-2])
    if (
        isinstance(out, torch.Tensor)
        and isinstance(weights, torch.Tensor)
        and tuple(out.shape) == want_w
        and tuple(weights.shape) == want_out
    ):
        check.fail(
            f"Your {_NAME} seems to return (weights, output) in the wrong order: the first item has shape "
            f"{fmt_shape(out.shape)} and the second {fmt_shape(weights.shape)}.\n"
            f"Return the output first, then the weights: `return output, weights`."
        )
    for kind, value, want in (("output", out, want_out), ("weights", weights, want_w)):
        hint = _shape_hint(kind, value.shape, q, k, v, mask) if isinstance(value, torch.Tensor) else ""
        check.tensor(value, f"the {kind}", shape=want, dtype="float", finite=False, shape_hint=hint)
        _require_dtype(check, kind, value, q)
    return out, weights


def _require_dtype(check: Check, kind: str, value: torch.Tensor, q: torch.Tensor) -> None:
    """Output and weights keep the inputs' dtype: lesson 04 multiplies the weights (after dropout) by the values."""
    if value.dtype == q.dtype:
        return
    coarse = value.dtype in (torch.float16, torch.bfloat16)
    check.fail(
        f"Your {kind} {'has' if kind == 'output' else 'have'} dtype {value.dtype}, but the inputs are "
        f"{q.dtype}: attention should keep the dtype of its inputs"
        + (" (lesson 04 applies dropout to your weights and multiplies them by the values, which needs one dtype)"
           if kind == "weights" else "")
        + ".\n"
        + (
            f"{value.dtype} is too coarse for these values (about 3 significant digits). Likely cause: "
            f"a `.half()` or an autocast inside; compute in the inputs' dtype."
            if coarse
            else "Likely cause: a conversion inside the function (such as `.double()`, `.float()` or "
            "`softmax(..., dtype=torch.float64)`) that is not undone. Convert back with `.to(query.dtype)`, or "
            "leave the dtype alone."
        )
    )


# --------------------------------------------------------------------------
# One case: run, then diagnose each mechanism from the outside in.


def _check_case(check: Check, fn: Callable, q, k, v, mask, how: str, batched_ok: bool = False, large: bool = False,
                earlier: tuple[int, ...] = ()):
    out, weights = _call(check, fn, q, k, v, mask, how, batched_ok)
    if how == "none":
        _require_deterministic(check, fn, q, k, v, out, weights)
    _require_finite(check, out, weights, mask, large, lambda m: check.attempt(fn, q, k, v, m, what=_NAME))
    ref_out, ref_w = _oracle(q, k, v, mask)
    atol, rtol = _LOOSE if large else (ATOL, RTOL)
    if not close_enough(weights, ref_w, atol, rtol):
        _require_rows_sum_to_one(check, weights, q, k, mask, ref_w)
        if mask is not None:
            _name_mask_mistake(check, out, weights, q, k, v, mask, large)
        if not large:
            _name_scale(check, weights, q, k, v, mask, earlier)
        check.close(
            weights, ref_w, "the weights tensor", atol=atol, rtol=rtol,
            hint=f"(inputs: query {fmt_shape(q.shape)}, key {fmt_shape(k.shape)}, value {fmt_shape(v.shape)}, "
            f"{_mask_text(mask)})\nThe weights should be softmax(query @ key^T / sqrt(d_k)) over the last "
            f"dimension, with the scores filled with -inf where the mask is False.",
        )
    if not close_enough(out, ref_out, atol, rtol):
        _name_output_mistake(check, out, q, k, v, mask, ref_out, atol, rtol)
    return out, weights


def _require_deterministic(check: Check, fn: Callable, q, k, v, out, weights) -> None:
    again = check.call(fn, q, k, v)
    same = isinstance(again, (tuple, list)) and len(again) == 2
    same = same and all(
        isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
        and bool(torch.allclose(a.detach(), b.detach(), rtol=0, atol=0, equal_nan=True))
        for a, b in zip(again, (out, weights))
    )
    if not same:
        check.fail(
            f"Your {_NAME} returned different results for the same inputs.\n"
            f"Likely cause: dropout or another random step inside. This function should be deterministic: "
            f"leave dropout to the module that calls it."
        )


def _name_output_mistake(check: Check, out, q, k, v, mask, ref_out, atol: float, rtol: float) -> None:
    got = {"output": out.detach().double()}
    slip = matching_slip(OUTPUT_SLIPS, lambda s: s.replay(None, q, k, v, mask), _agrees(got, atol, rtol))
    if slip is not None:
        check.fail(slip.says.showing(f"  expected (first values): {fmt_values(ref_out)}\n"
                                     f"  actual   (first values): {fmt_values(got['output'])}"))
    check.close(out, ref_out, "the output", atol=atol, rtol=rtol,
                hint="Your weights are right, so the output should be `weights @ value`.")


# --------------------------------------------------------------------------
# Naming a mistake once the values differ from the oracle.


def _require_finite(check: Check, out, weights, mask, large: bool, with_mask: Callable | None = None) -> None:
    """No NaN or inf, or a named cause; ``with_mask(m)`` runs the learner's function on the same inputs with mask m."""
    for name, t in (("weights", weights), ("output", out)):
        bad = ~torch.isfinite(t.detach())
        if not bool(bad.any()):
            continue
        count = int(bad.sum())
        kind = "NaN" if bool(t.detach().isnan().any()) else "infinite"
        verb = "contain" if name == "weights" else "contains"
        head = f"Your {name} {verb} {count} {kind} value{'s' if count != 1 else ''} (out of {t.numel()})"
        if large:
            check.fail(
                f"{head} when the scores are large (around +-800).\n"
                f"Likely cause: a numerically unstable softmax. exp() of a large score overflows to inf "
                f"(and of a very negative one underflows to 0), giving inf/inf or 0/0. Subtract each row's "
                f"maximum before exp(), or use `torch.softmax(scores, dim=-1)`, which does it for you."
            )
        if mask is not None and name == "weights":
            hidden = ~mask.expand(weights.shape)
            w = weights.detach()
            rows_hiding = hidden.any(-1)
            everywhere = with_mask(torch.ones_like(mask)) if with_mask is not None and bool(w.isnan().all()) else None
            if isinstance(everywhere, tuple) and everywhere and isinstance(everywhere[-1], torch.Tensor) and bool(
                    everywhere[-1].detach().isnan().all()):
                check.fail(
                    f"{head}, and still every weight is NaN with a mask that hides nothing.\n"
                    f"Likely cause: the mask is turned into numbers and multiplied by -inf, as in "
                    f"`scores + (~mask) * float('-inf')`: where the mask is True that is 0 * -inf, which is NaN, "
                    f"not 0. Fill the hidden scores instead: `scores.masked_fill(~mask, float('-inf'))`, or add "
                    f"`torch.zeros_like(scores).masked_fill(~mask, float('-inf'))`."
                )
            if bool(w.isnan().any(-1).eq(rows_hiding).all()):
                check.fail(
                    f"{head}: NaN in exactly the rows where the mask hides a key.\n"
                    f"Likely cause: the hidden scores are filled with a positive infinity (`float('inf')`, a "
                    f"missing minus sign): the softmax then computes inf - inf. Fill with `float('-inf')`."
                )
            if bool(w.isneginf()[hidden].all()) and bool(torch.isfinite(w[~hidden]).all()):
                check.fail(
                    f"{head}: -inf exactly where the mask is False.\n"
                    f"Likely cause: the mask is applied after the softmax. Fill the *scores* with a large "
                    f"negative number (or -inf) where the mask is False, then take the softmax."
                )
            check.fail(
                f"{head} with {_mask_text(mask)} (every row of it allows at least one key).\n"
                f"Likely causes: a mask with the wrong polarity that hides a whole row (True means 'may attend'), "
                f"or exp()/division done by hand on -inf scores."
            )
        check.fail(
            f"{head}.\nLikely causes: a division by zero, or exp() of large numbers without subtracting "
            f"the maximum first."
        )


def _require_rows_sum_to_one(check: Check, weights, q, k, mask, ref_w) -> None:
    w = weights.detach().double()
    sums = w.sum(-1)
    if close_enough(sums, torch.ones_like(sums), atol=1e-4, rtol=0):
        return
    if close_enough(w, ref_w, atol=5e-3, rtol=0):
        check.fail(
            f"Your weights are close to the right ones but not within float32 precision (row sums: "
            f"{fmt_values(sums)}; largest difference {fmt_number(float((w - ref_w).abs().max()))}).\n"
            f"Likely cause: part of the computation runs in half precision (`.half()`, float16, bfloat16) and "
            f"is converted back. Compute in the inputs' dtype."
        )
    exp_sums = w.exp().sum(-1)
    if bool((w <= 1e-12).all()) and close_enough(exp_sums, torch.ones_like(exp_sums), atol=1e-4, rtol=0):
        check.fail(
            "Your weights are the *logarithms* of probabilities (all negative, and their exp() sums to 1 per "
            "row): a log_softmax.\nUse `torch.softmax(scores, dim=-1)`, so that each row of the weights is a "
            "probability distribution summing to 1."
        )
    if mask is not None:
        _, free = _oracle(q, k, k, None)
        allowed = mask.expand(w.shape)
        if close_enough(w[allowed], free[allowed]):
            check.fail(
                f"The rows of your weights do not sum to 1 when a mask is given (row sums: {fmt_values(sums)}), "
                f"and the weights at the allowed positions equal the unmasked softmax.\n"
                f"Likely cause: the mask is applied after the softmax. Mask the scores first (fill a large "
                f"negative number where the mask is False), then take the softmax, so every row still sums to 1."
            )
    allowed = torch.ones(w.shape, dtype=torch.bool) if mask is None else mask.expand(w.shape)
    slip = matching_slip(SOFTMAX_SLIPS, lambda s: s.replay(None, q, k, k, mask),
                         lambda wrong: close_enough(w[allowed], wrong["weights"][allowed]))
    if slip is not None:
        check.fail(slip.says.showing(f"  row sums (first values): {fmt_values(sums)}"))
    if bool((w < -1e-6).any()):
        check.fail(
            f"Your weights contain negative values (smallest {fmt_number(float(w.min()))}), and their rows do not "
            f"sum to 1 (row sums: {fmt_values(sums)}).\n"
            f"A softmax never returns negative numbers: are you returning the scores instead of their softmax?"
        )
    for dim in range(w.dim() - 1):
        other = w.sum(dim)
        if close_enough(other, torch.ones_like(other), atol=1e-4, rtol=0):
            axis = dim - w.dim()
            labels = {4: ("B", "H", "L_q", "L_k"), 3: ("B", "L_q", "L_k"), 2: ("L_q", "L_k")}.get(w.dim())
            where = ""
            if labels:
                role = {"B": "the batch axis", "H": "the head axis", "L_q": "the query axis"}[labels[dim]]
                where = f" (dim={dim}: {role} of these ({', '.join(labels)}) weights)"
            check.fail(
                f"The rows of your weights do not sum to 1 (row sums: {fmt_values(sums)}); they sum to 1 along "
                f"dim {axis}{where} instead.\n"
                f"Likely cause: the softmax is taken over the wrong dimension (or the weights are returned "
                f"transposed). Each query's weights over the keys must sum to 1: use `dim=-1`, the last dimension."
            )
    check.fail(
        f"The rows of your weights do not sum to 1.\n"
        f"  row sums (first values): {fmt_values(sums)}\n"
        f"Is the softmax taken over the last dimension (dim=-1), and are the weights returned as they come "
        f"out of it?"
    )


def _name_scale(check: Check, weights, q, k, v, mask=None, earlier: tuple[int, ...] = ()) -> None:
    """The weights are normalised but wrong: find which scale they used (on the allowed keys)."""
    w = weights.detach().double()
    d_k = q.shape[-1]
    for old_d_k in earlier:
        if old_d_k != d_k and close_enough(w, _oracle(q, k, v, mask, scale=1 / math.sqrt(old_d_k))[1]):
            check.fail(
                f"Your weights match scores divided by sqrt({old_d_k}), the d_k of an earlier call (d_k = {old_d_k}); "
                f"here d_k = {d_k}. The scale is computed once and kept between calls (a global, a default "
                f"argument or a cache).\nCompute it from each call's own query: `math.sqrt(query.size(-1))`."
            )
    slip = matching_slip(SCALE_SLIPS, lambda s: s.replay(None, q, k, v, mask), _agrees({"weights": w}))
    if slip is not None:
        check.fail(slip.says.showing(
            f"d_k = {d_k}, so the scores should be multiplied by 1/sqrt(d_k) = {fmt_number(1 / math.sqrt(d_k))}; the "
            f"scaling keeps the scores in a range where the softmax is not saturated."))
    # Any other constant: on the allowed keys, log-weights are scale * scores up to a per-row constant.
    allowed = torch.ones(w.shape, dtype=torch.bool) if mask is None else mask.expand(w.shape)
    m = allowed.double()
    count = m.sum(-1, keepdim=True).clamp_min(1)
    raw = _scores(q, k)
    logw = w.clamp_min(1e-300).log()
    a = (raw - (raw * m).sum(-1, keepdim=True) / count) * m
    b = (logw - (logw * m).sum(-1, keepdim=True) / count) * m
    denominator = float((a * a).sum())
    if denominator > 0:
        scale = float((a * b).sum()) / denominator
        if scale > 0 and close_enough(w, _oracle(q, k, v, mask, scale=scale)[1], atol=1e-4, rtol=1e-3):
            check.fail(
                f"Your weights match a softmax of the scores multiplied by {fmt_number(scale)}, but the scale should "
                f"be 1/sqrt(d_k) = {fmt_number(1 / math.sqrt(d_k))} (d_k = {d_k}).\n"
                f"Likely cause: dividing by the square root of another size (d_model, a sequence length, a "
                f"hard-coded number). d_k is the last dimension of query and key: `query.size(-1)`."
            )


def _name_mask_mistake(check: Check, out, weights, q, k, v, mask, large: bool) -> None:
    """The weights are normalised but wrong with a mask: name the mask mistake if one fits."""
    w = weights.detach().double()
    hidden = ~mask.expand(w.shape)
    leaked = w[hidden & (w.abs() > 1e-6)]
    got = {"weights": w, "output": out.detach().double()}
    slip = matching_slip(MASK_SLIPS, lambda s: s.replay(None, q, k, v, mask), _agrees(got))
    if slip is not None:
        check.fail(slip.says.showing(f"Weights at masked positions (first values): {fmt_values(w[hidden])}"))
    if large and leaked.numel():
        check.fail(
            f"With large scores (around +-800) your weights are not 0 where the mask is False (nonzero values "
            f"there: {fmt_values(leaked)}), although they were with ordinary scores.\n"
            f"Likely cause: the value the masked scores are filled with is not negative enough (such as -100): "
            f"a real score can be even lower. Fill with `float('-inf')` (or a huge negative number such as -1e9 "
            f"or `torch.finfo(scores.dtype).min`)."
        )
    slip = matching_slip(FILL_SLIPS, lambda s: s.replay(None, q, k, v, mask), _agrees(got))
    if slip is not None:
        check.fail(slip.says.showing(f"Weights at masked positions (first values): {fmt_values(w[hidden])}"))
    if leaked.numel():
        check.fail(
            f"Your weights are not 0 everywhere the mask is False ({leaked.numel()} of {int(hidden.sum())} masked "
            f"entries are nonzero, for example {fmt_values(leaked, 4)}).\n"
            f"Fill the scores with -inf (or -1e9) where the mask is False, before the softmax, using the whole "
            f"mask as it is given (it broadcasts against the scores)."
        )


# --------------------------------------------------------------------------
# The known slips: mutants of the oracle, ``mutant(query, key, value, mask) -> {"weights": ..., "output": ...}`` in
# float64. A tensor left out is not part of the slip (the learner's may be anything there); "tolerance" is how close
# an answer with the slip comes, where float32 cannot be exact. Each group is tried where its mistake shows.


def _agrees(got: dict, atol: float = ATOL, rtol: float = RTOL) -> Callable[[dict], bool]:
    """``agrees`` for :func:`matching_slip`: every tensor the slip gives is close to the learner's."""
    def agrees(wrong: dict) -> bool:
        a, r = wrong.get("tolerance", (atol, rtol))
        return all(close_enough(got[key], wrong[key], a, r) for key in ("weights", "output") if key in wrong)

    return agrees


def _weights(q, k, v, mask, scale: float | None = None) -> dict:
    return {"weights": _oracle(q, k, v, mask, scale=scale)[1]}


def _scaled_by(scale_of: Callable) -> Callable:
    """A scale slip: the scores multiplied by ``scale_of(query, key, value)`` instead of 1/sqrt(d_k)."""
    def mutant(q, k, v, mask) -> dict:
        scale = scale_of(q, k, v)
        if abs(scale - 1 / math.sqrt(q.shape[-1])) < 1e-12:
            raise ValueError("that size gives the right scale for these inputs")
        return _weights(q, k, v, mask, scale)

    return mutant


def _with_mask(mutant: Callable) -> Callable:
    """A mask slip: it shows only when a mask is given."""
    def masked(q, k, v, mask) -> dict:
        if mask is None:
            raise ValueError("no mask given")
        return mutant(q, k, v, mask)

    return masked


def _filled(value: float, tolerance: tuple[float, float] = (ATOL, RTOL)) -> Callable:
    """The hidden scores filled with ``value`` (not a very negative one)."""
    def mutant(q, k, v, mask) -> dict:
        scores = _scores(q, k) / math.sqrt(q.shape[-1])
        return {"weights": torch.softmax(scores.masked_fill(~mask, value), dim=-1), "tolerance": tolerance}

    return _with_mask(mutant)


def _first_batch_mask(q, k, v, mask) -> dict:
    if mask is None or mask.dim() < 3 or mask.shape[0] < 2:
        raise ValueError("no batch of masks")
    return _weights(q, k, v, mask[:1])


_SOFTMAX_FIX = ("Attention weights are the softmax of the scaled scores over the keys: `torch.softmax(scores, dim=-1)`; "
                "each row is then a probability distribution summing to 1.")

#: weights that are not a softmax (matched on the keys the mask allows)
SOFTMAX_SLIPS = (
    Slip("no softmax", Diagnosis("Your weights equal the scores divided by sqrt(d_k): the softmax is missing.",
                                 _SOFTMAX_FIX), lambda q, k, v, mask: {"weights": _scores(q, k) / math.sqrt(q.shape[-1])}),
    Slip("no softmax, no scale", Diagnosis(
        "Your weights equal the unscaled scores query @ key^T: the softmax is missing.", _SOFTMAX_FIX),
        lambda q, k, v, mask: {"weights": _scores(q, k)}),
)

#: the mask used wrongly (before a fill value too weak for large scores is named)
MASK_SLIPS = (
    Slip("mask inverted", Diagnosis(
        "Your weights attend exactly where the mask is False and ignore where it is True: the mask polarity is "
        "inverted.", "In this course (as in `F.scaled_dot_product_attention`) True means 'may attend'. Fill the "
        "scores where the mask is False: `scores.masked_fill(~mask, float('-inf'))` or `mask == 0`, not `mask == 1`."),
        _with_mask(lambda q, k, v, mask: _weights(q, k, v, ~mask))),
    Slip("weights before the mask", Diagnosis(
        "Your output is right, but the weights you return are those from before the mask was applied (they are not 0 "
        "where the mask is False).", "Return the weights the output was computed with: the softmax of the *masked* "
        "scores."), _with_mask(lambda q, k, v, mask: {"weights": _oracle(q, k, v, None)[1],
                                                      "output": _oracle(q, k, v, mask)[0]})),
    Slip("mask ignored", Diagnosis(
        "Your weights are the same with and without the mask: the mask is ignored.", "Likely cause: "
        "`scores.masked_fill(...)` returns a new tensor; assign it back (`scores = scores.masked_fill(...)`), and "
        "apply it when `mask is not None`."), _with_mask(lambda q, k, v, mask: _weights(q, k, v, None))),
)

#: a fill value that is not very negative, and the first sentence's mask for all
FILL_SLIPS = (
    Slip("fill 0", Diagnosis(
        "Your weights at masked positions are not 0: the masked scores are set to 0 (or to a tiny number such as "
        "1e-9: did you mean -1e9, with a minus sign?), or the scores are multiplied by the mask.", "A score of 0 still "
        "gets a share of the softmax; fill with a large negative number instead: -inf or -1e9."), _filled(0.0)),
    Slip("fill +1e9", Diagnosis(
        "Your weights put all the weight on the keys the mask hides: the hidden scores are filled with a large "
        "positive number (such as 1e9 or `torch.finfo(...).max`): a minus sign is missing.", "Fill with -1e9, "
        "`float('-inf')` or `torch.finfo(scores.dtype).min`."), _filled(1e9, (1e-4, 1e-3))),
    Slip("first batch's mask", Diagnosis(
        "Your weights use the mask of the first batch element for every batch element.", "Use the whole mask as it is "
        "given: it already broadcasts against the scores (..., L_q, L_k)."), _first_batch_mask),
)

_USE_D_K = "Use d_k, the last dimension of query and key."

#: the scale of the scores (``_scaled_by``): the paper's is 1/sqrt(d_k)
SCALE_SLIPS = (
    Slip("no scale", Diagnosis("Your weights match a softmax of the scores without any scaling.",
                               "Divide the scores by sqrt(d_k)."), _scaled_by(lambda q, k, v: 1.0)),
    Slip("d_k", Diagnosis(
        "Your weights match scores divided by d_k instead of sqrt(d_k) (or by sqrt(d_k) twice: once on the query and "
        "once on the scores?).", "Divide once by `math.sqrt(d_k)`."), _scaled_by(lambda q, k, v: 1 / q.shape[-1])),
    Slip("times sqrt(d_k)", Diagnosis("Your weights match scores multiplied by sqrt(d_k) instead of divided.",
                                      "Divide by sqrt(d_k)."), _scaled_by(lambda q, k, v: math.sqrt(q.shape[-1]))),
    Slip("d_k / 2", Diagnosis(
        "Your weights match scores divided by d_k / 2 instead of sqrt(d_k).", "Careful with precedence: "
        "`d_k ** 1 / 2` is (d_k ** 1) / 2; write `d_k ** 0.5` or `math.sqrt(d_k)`."),
        _scaled_by(lambda q, k, v: 2 / q.shape[-1])),
    Slip("sqrt(d_v)", Diagnosis("Your weights match scores divided by sqrt(d_v), the size of the values.", _USE_D_K),
         _scaled_by(lambda q, k, v: 1 / math.sqrt(v.shape[-1]))),
    Slip("sqrt(L_k)", Diagnosis("Your weights match scores divided by sqrt(L_k), a sequence length.", _USE_D_K),
         _scaled_by(lambda q, k, v: 1 / math.sqrt(k.shape[-2]))),
    Slip("sqrt(L_q)", Diagnosis("Your weights match scores divided by sqrt(L_q), a sequence length.", _USE_D_K),
         _scaled_by(lambda q, k, v: 1 / math.sqrt(q.shape[-2]))),
)

#: the output, once the weights are right
OUTPUT_SLIPS = (
    Slip("output unmasked", Diagnosis(
        "Your weights are right, but the output is the one you get without the mask:", "compute the output from the "
        "masked weights (`weights @ value`), or pass the mask on."),
        _with_mask(lambda q, k, v, mask: {"output": _oracle(q, k, v, None)[0]})),
    Slip("output scaled", Diagnosis(
        "Your weights are right, but the output is `weights @ value` divided by sqrt(d_k):", "the scaling belongs to "
        "the scores (query @ key^T) only, not to the values or the output."),
        lambda q, k, v, mask: {"output": _oracle(q, k, v, mask)[0] / math.sqrt(q.shape[-1])}),
)


def _as_answer(slip: Slip) -> Callable:
    """The slip made into a learner's function (for the generated catalogue tests); the oracle where it does not
    show."""
    def slipped_scaled_dot_product_attention(query, key, value, mask=None):
        try:
            wrong = slip.replay(None, query, key, value, mask)
        except ValueError:
            wrong = {}
        weights = wrong.get("weights", _oracle(query, key, value, mask)[1])
        out = wrong.get("output", weights @ value.double())
        return out.to(query.dtype), weights.to(query.dtype)

    return slipped_scaled_dot_product_attention


SCALED_DOT_PRODUCT_ATTENTION = Exercise(
    _NAME, _check_scaled_dot_product_attention,
    oracle="F.scaled_dot_product_attention in float64; the weights from the same function with identity values",
    cases="(B, H, L, d) inputs with every size different, no mask; padding, per-query and (L_q, L_k) masks, 3-D "
          "inputs; scores around +-800; self-attention; L_q = 64, L_k = 70 with one head; float64 (gradcheck); "
          "gradients of the output and the weights; a GPU; bfloat16 autocast. Drawn from the check's seed",
    slips=(*SOFTMAX_SLIPS, *MASK_SLIPS, *FILL_SLIPS, *SCALE_SLIPS, *OUTPUT_SLIPS), answer=_as_answer)
