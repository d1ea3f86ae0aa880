"""Checkers for lesson 05: the position-wise feed-forward network and the encoder and decoder layers.

Each checker takes the learner's class, builds small instances of its own and
tests what the layer means. The contract first: the submodules later lessons
read (``linear1``/``linear2``; ``self_attn``, ``cross_attn``, ``feed_forward``,
``norm1``...), and the components' own checkers on the classes the layer uses.
Then properties (shapes, positions processed independently, masks honoured,
causality, dropout only in training), then the values against PyTorch's own
``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` carrying the
learner's weights, with known wrong wirings tried to name a cause. Hooks on the
sublayers show the residual wiring and measure each sublayer's dropout.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import _anatomy as anatomy
from . import _twins as twins
from . import stages
from ._core import Check, CheckResult, Raised, close_enough, describe, generator, run_check
from ._dropout import drop_pattern
from ._hooks import Recorder

_D_MODEL, _NUM_HEADS, _D_FF = 16, 4, 24
_ATOL, _RTOL = 1e-4, 1e-4  # layers compare float32 stacks with float64 twins


def check_feed_forward(FeedForward: type[nn.Module]) -> CheckResult:
    """Check ``FeedForward(d_model, d_ff, dropout)``: linear2(dropout(relu(linear1(x)))), position by position."""
    return run_check("FeedForward", _check_feed_forward, FeedForward)


def check_encoder_layer(EncoderLayer: type[nn.Module]) -> CheckResult:
    """Check ``EncoderLayer(d_model, num_heads, d_ff, dropout)``: post-LN self-attention and feed-forward."""
    return run_check("EncoderLayer", _check_encoder_layer, EncoderLayer)


def check_decoder_layer(DecoderLayer: type[nn.Module]) -> CheckResult:
    """Check ``DecoderLayer(d_model, num_heads, d_ff, dropout)``: masked self-attention, cross-attention, feed-forward."""
    return run_check("DecoderLayer", _check_decoder_layer, DecoderLayer)


def _check_feed_forward(check: Check, FeedForward: type[nn.Module]) -> None:
    check.callable_(FeedForward, "FeedForward", want_class=True)
    g = generator(0)
    ff = stages.is_module(check, check.build(FeedForward, _D_MODEL, _D_FF, 0.0), "FeedForward")
    stages.contract_parts(check, ff, "FeedForward", {"d_model": _D_MODEL, "d_ff": _D_FF, "dropout": 0.0})
    ff.eval()
    x = torch.randn(3, 5, _D_MODEL, generator=g)
    out = check.call(ff, x, what="FeedForward.forward")
    hint = ""
    if isinstance(out, torch.Tensor) and out.shape[-1:] == (_D_FF,):
        hint = (
            f"The last dimension is d_ff = {_D_FF}: the second linear layer, nn.Linear(d_ff, d_model), "
            f"which maps back to d_model, seems to be missing."
        )
    out = check.tensor(out, "the output of FeedForward(16, 24)", shape=(3, 5, _D_MODEL), dtype=torch.float32, shape_hint=hint)
    check.ok("returns a (batch, length, d_model) tensor")

    perm = torch.tensor([3, 0, 4, 1, 2])
    moved = check.tensor(check.call(ff, x[:, perm], what="FeedForward.forward"), "the output", shape=(3, 5, _D_MODEL))
    changed = x.clone()
    changed[:, 2] = torch.randn(3, _D_MODEL, generator=g)
    local = check.tensor(check.call(ff, changed, what="FeedForward.forward"), "the output", shape=(3, 5, _D_MODEL))
    others = [0, 1, 3, 4]
    if not close_enough(moved, out[:, perm], _ATOL, _RTOL) or not close_enough(local[:, others], out[:, others], _ATOL, _RTOL):
        check.fail(
            "Your FeedForward mixes positions: changing or shuffling some positions of the input changed "
            "the outputs at other positions.\n"
            "The network is position-wise: the same two linear layers act on each position's d_model "
            "vector on its own, so apply them along the last dimension only (no reshaping across positions)."
        )
    check.ok("processes each position independently (position-wise)")
    _check_ffn_values(check, ff, x, out)
    _check_ffn_dropout(check, FeedForward, x)
    stages.module_on_gpu(check, ff, x, what="FeedForward")


def _check_encoder_layer(check: Check, EncoderLayer: type[nn.Module]) -> None:
    check.callable_(EncoderLayer, "EncoderLayer", want_class=True)
    g = generator(1)
    B, L = 2, 5
    layer = stages.is_module(check, check.build(EncoderLayer, _D_MODEL, _NUM_HEADS, _D_FF, 0.0), "EncoderLayer")
    _contract(check, layer, "EncoderLayer")
    _uses_d_ff(check, layer, "EncoderLayer")
    layer.eval()
    x = torch.randn(B, L, _D_MODEL, generator=g)
    keep = torch.ones(B, 1, 1, L, dtype=torch.bool)
    keep[1, ..., 3:] = False  # the last two positions of sentence 1 are padding

    def run(layer_, x_, mask_=None):
        out_ = stages.one_tensor(check, check.call(layer_, x_, mask_, what="EncoderLayer.forward"), "EncoderLayer")
        if mask_ is not None:
            _nan_with_mask(check, out_, "EncoderLayer")
        return check.tensor(out_, "the output of EncoderLayer", shape=(B, L, _D_MODEL), dtype=torch.float32)

    plain = run(layer, x)
    check.ok("returns a (batch, length, d_model) tensor")
    _allow_all_is_no_mask(check, run(layer, x, torch.ones(B, 1, 1, L, dtype=torch.bool)), plain, "EncoderLayer", "a mask")
    out = run(layer, x, keep)
    check.ok("runs with and without a mask (mask=None)")

    x2 = x.clone()
    x2[1, 3:] = torch.randn(2, _D_MODEL, generator=g)
    if close_enough(run(layer, x2)[1, :3], plain[1, :3], _ATOL, _RTOL):
        _causal_encoder(check, run, layer, x, plain, g)
        check.fail(
            "Without a mask, changing some positions of x did not change the outputs at the other "
            "positions: your EncoderLayer does not mix information between positions.\n"
            "Its first sublayer is self-attention over the whole sequence: self_attn(x, x, x, mask)."
        )
    if not close_enough(run(layer, x2, keep)[1, :3], out[1, :3], _ATOL, _RTOL):
        check.fail(
            "Positions hidden by the mask still influence the outputs: changing padded positions of x "
            "changed the outputs at the real positions.\n"
            "Pass the mask to the self-attention as it is: self_attn(x, x, x, mask). Its shape (batch, 1, 1, "
            "length) hides keys (the last axis); transposing it would hide queries instead."
        )
    check.ok("honours the mask: hidden positions do not influence the others")
    layout = _values(check, layer, "EncoderLayer", out, lambda layer_: run(layer_, x, keep),
                     lambda layout_, normalised: _compare_encoderlayer(check, layout_, run, g, x, keep, normalised))

    def build(p):
        return lambda: stages.is_module(check, check.build(EncoderLayer, _D_MODEL, _NUM_HEADS, _D_FF, p), "EncoderLayer")

    _dropout_in_training(check, build(0.5), lambda layer_: run(layer_, x, keep), "EncoderLayer")
    _check_dropout_measured(check, lambda p: build(p)(), lambda layer_: run(layer_, x, keep), "EncoderLayer", x)
    _everything_dropped(check, build(1.0), lambda layer_: layer_(x, keep), x, "EncoderLayer")
    stages.module_on_gpu(check, layer, x, keep, what="EncoderLayer")
    _check_layer_sizes(check, EncoderLayer, "EncoderLayer")
    if layout.missing:
        check.ok(_layout_unused(layout, "EncoderLayer"))


def _check_decoder_layer(check: Check, DecoderLayer: type[nn.Module]) -> None:
    check.callable_(DecoderLayer, "DecoderLayer", want_class=True)
    g = generator(2)
    B, T, S = 2, 4, 6  # target length T differs from memory length S
    layer = stages.is_module(check, check.build(DecoderLayer, _D_MODEL, _NUM_HEADS, _D_FF, 0.0), "DecoderLayer")
    _contract(check, layer, "DecoderLayer")
    _uses_d_ff(check, layer, "DecoderLayer")
    layer.eval()
    x = torch.randn(B, T, _D_MODEL, generator=g)
    memory = torch.randn(B, S, _D_MODEL, generator=g)
    src_keep = torch.ones(B, 1, 1, S, dtype=torch.bool)
    src_keep[1, ..., 4:] = False  # the last two memory positions of sentence 1 are padding
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool)).expand(B, 1, T, T).clone()

    def run(layer_, x_, memory_, src_mask_=None, tgt_mask_=None):
        out_ = Raised(None, "")
        if src_mask_ is not None and tgt_mask_ is not None:  # which mask went where names a crash's usual cause
            out_ = check.attempt(layer_, x_, memory_, src_mask_, tgt_mask_, what="DecoderLayer.forward")
            if isinstance(out_, Raised):
                _masks_where_they_belong(check, layer_, x_, memory_, src_mask_, tgt_mask_)
        if isinstance(out_, Raised):
            out_ = check.call(layer_, x_, memory_, src_mask_, tgt_mask_, what="DecoderLayer.forward")
        out_ = stages.one_tensor(check, out_, "DecoderLayer")
        hint = ""
        if isinstance(out_, torch.Tensor) and out_.dim() == 3 and out_.shape[1] == S:
            hint = (
                "The output has one row per memory position: in cross-attention the queries come from the "
                "decoder (x), the keys and values from memory: cross_attn(x, memory, memory, src_mask)."
            )
        if (src_mask_ is not None or tgt_mask_ is not None) and not hint:
            _nan_with_mask(check, out_, "DecoderLayer")
        return check.tensor(out_, "the output of DecoderLayer", shape=(B, T, _D_MODEL), dtype=torch.float32, shape_hint=hint)

    plain = run(layer, x, memory)
    check.ok("returns a (batch, target length, d_model) tensor when memory has another length")
    allow_src = torch.ones(B, 1, 1, S, dtype=torch.bool)
    allow_tgt = torch.ones(B, 1, T, T, dtype=torch.bool)
    masked = run(layer, x, memory, allow_src, allow_tgt)
    if not close_enough(masked, plain, _ATOL, _RTOL) and close_enough(masked, run(layer, x, memory, None, causal), _ATOL, _RTOL):
        check.fail(
            "With a tgt_mask that allows every position (all True), your DecoderLayer still hides the future: it "
            "combines the tgt_mask it is given with a causal mask of its own. Use the mask it is given as it is, "
            "self_attn(x, x, x, tgt_mask): the model builds tgt_mask (padding AND causal) with make_target_mask, and "
            "lesson 07's one-token-at-a-time decoding passes a mask that is not square."
        )
    _allow_all_is_no_mask(check, masked, plain, "DecoderLayer", "masks")
    out = run(layer, x, memory, src_keep, causal)
    check.ok("runs with and without masks (src_mask=None, tgt_mask=None)")

    _decoder_properties(check, run, layer, x, memory, src_keep, causal, plain, out, g)
    layout = _values(check, layer, "DecoderLayer", out, lambda layer_: run(layer_, x, memory, src_keep, causal),
                     lambda layout_, normalised: _compare_decoderlayer(check, layout_, run, g, x, memory, src_keep,
                                                                       causal, normalised))

    def build(p):
        return lambda: stages.is_module(check, check.build(DecoderLayer, _D_MODEL, _NUM_HEADS, _D_FF, p), "DecoderLayer")

    _dropout_in_training(check, build(0.5), lambda layer_: run(layer_, x, memory, src_keep, causal), "DecoderLayer")
    _check_dropout_measured(check, lambda p: build(p)(), lambda layer_: run(layer_, x, memory, src_keep, causal),
                            "DecoderLayer", x, memory)
    _everything_dropped(check, build(1.0), lambda layer_: layer_(x, memory, src_keep, causal), x, "DecoderLayer")
    stages.module_on_gpu(check, layer, x, memory, src_keep, causal, what="DecoderLayer")
    _check_layer_sizes(check, DecoderLayer, "DecoderLayer")
    if layout.missing:
        check.ok(_layout_unused(layout, "DecoderLayer"))


# --------------------------------------------------------------------------
# Shared pieces.


def _is_normalised(out: torch.Tensor) -> bool:
    """Every row has mean 0 and standard deviation 1, as a fresh LayerNorm leaves it."""
    o = out.detach().double()
    mean = o.mean(-1)
    std = o.std(-1, unbiased=False)
    return bool((mean.abs() < 1e-3).all() and ((std - 1).abs() < 0.05).all())


def _dropout_in_training(check: Check, build: Callable[[], nn.Module], run: Callable[[nn.Module], torch.Tensor], name: str) -> None:
    """Eval mode deterministic; train mode random; dropout on the sublayer outputs, before the residual addition."""
    layer = build()
    stages.eval_deterministic(check, layer, run, name, 0.5)
    first = stages.train_random(check, layer, run, name, 0.5, fix=(
        "Create nn.Dropout(dropout) in __init__ and apply it to the output of each sublayer: "
        "LayerNorm(x + dropout(sublayer(x)))."))
    # A fresh LayerNorm has gain 1 and bias 0, so the pattern dropout leaves is visible in the output.
    rows = first.detach().double().reshape(-1, first.shape[-1])
    zeros = float((rows == 0).double().mean())
    repeats = 0
    for row in rows:
        counts = torch.unique(row.round(decimals=6), return_counts=True)[1]
        repeats += int(counts.max() >= 3)
    if zeros > 0.2:
        check.fail(
            f"In training mode {round(zeros * 100)}% of your {name}'s outputs are exactly 0: dropout is "
            f"applied after the LayerNorm, to the layer's output.\n"
            f"Dropout belongs on the sublayer's output, before the residual addition: "
            f"LayerNorm(x + dropout(sublayer(x)))."
        )
    if repeats > rows.shape[0] // 2:
        check.fail(
            f"In training mode many values in each output row of your {name} are identical: dropout zeroes "
            f"entries of the sum x + sublayer(x) before the LayerNorm, which drops the residual too.\n"
            f"Apply dropout to the sublayer's output only, then add: LayerNorm(x + dropout(sublayer(x))), "
            f"not LayerNorm(dropout(x + sublayer(x)))."
        )
    check.ok("applies dropout to the sublayer outputs, not to the residual or to the normalised output")


def _everything_dropped(check: Check, build: Callable[[], nn.Module], run: Callable[[nn.Module], torch.Tensor],
                        x: torch.Tensor, name: str) -> None:
    """With dropout=1.0 in training every sublayer output is dropped: the layer reduces to LayerNorm(...LayerNorm(x)).

    Freshly created LayerNorms have gain 1 and bias 0, so each output row is then the
    input row centred and rescaled. A sublayer whose output skips dropout (dropout
    only on the attention weights, say) leaves its trace in the output.
    """
    try:
        layer = build()
        layer.train()
        out = run(layer)
    except Exception:  # a layer that refuses p = 1 (a hand-written dropout, an assertion): not judged here
        return
    o = out.detach().double()
    if not bool(torch.isfinite(o).all()):
        return  # a hand-written dropout dividing by 1 - p
    xc = x.double() - x.double().mean(-1, keepdim=True)
    oc = o - o.mean(-1, keepdim=True)
    cosine = (xc * oc).sum(-1) / (xc.norm(dim=-1) * oc.norm(dim=-1)).clamp_min(1e-12)
    if bool((cosine < 1 - 1e-4).any()):
        check.fail(
            f"Built with dropout=1.0 and in training mode, your {name} should drop every sublayer's output, so "
            f"that it reduces to LayerNorm(x + 0) for each sublayer: every output row would be its input row, "
            f"normalised. Yours is not: something reaches the output without going through a dropout.\n"
            f"Apply dropout to the output of each sublayer, before the residual addition: "
            f"LayerNorm(x + dropout(sublayer(x))). Dropout on the attention weights or inside FeedForward does "
            f"not replace it, and the residual input x itself is not dropped."
        )
    check.ok("drops each sublayer's output in training (dropout=1.0 leaves just the normalised input)")


def _allow_all_is_no_mask(check: Check, masked: torch.Tensor, plain: torch.Tensor, name: str, masks: str) -> None:
    """A mask that allows everything must change nothing: the polarity test."""
    if not close_enough(masked, plain, _ATOL, _RTOL):
        check.fail(
            f"With {masks} that allow{'s' if masks.startswith('a ') else ''} every position (all True), the "
            f"output of your {name} differs from the output without {'a mask' if masks.startswith('a ') else 'masks'}: "
            f"True is treated as 'hidden'.\n"
            f"In this course True means 'may attend' (as in F.scaled_dot_product_attention): scores are filled "
            f"with -inf where the mask is False (masked_fill(~mask, ...) or masked_fill(mask == 0, ...)). "
            f"nn.MultiheadAttention uses the opposite convention: pass it ~mask."
        )
    check.ok("treats True in a mask as 'may attend' (an all-True mask changes nothing)")


def _nan_with_mask(check: Check, out, name: str) -> None:
    if isinstance(out, torch.Tensor) and out.is_floating_point() and not bool(torch.isfinite(out.detach()).all()):
        check.fail(
            f"The output of your {name} contains NaN or infinite values when a mask is given (without a mask it "
            f"is finite): some row of the attention has every key hidden.\n"
            f"Is the mask used as it is given, True = 'may attend', on the key axis (the last one)? Scores are "
            f"filled with -inf where the mask is False: masked_fill(~mask, float('-inf')) or "
            f"masked_fill(mask == 0, ...); a transposed mask hides queries instead of keys. For "
            f"nn.MultiheadAttention, which blocks where True, pass ~mask."
        )


def _unused_parameters(check: Check, layer: nn.Module, out: torch.Tensor, name: str) -> None:
    """Every parameter must receive a gradient from a loss on the output."""
    stages.every_parameter_learns(check, layer, out, name)


def _parameters(check: Check, layer: nn.Module, layout: twins.LayerLayout, name: str) -> None:
    """The paper's layer: attention(s) with biases, the feed-forward network, one LayerNorm (gain and bias) per sublayer."""
    bare = [n for n in layout.norms if anatomy.norm_without_affine(n)]
    if bare:
        check.fail(
            f"{len(bare)} of the LayerNorms in your {name} ha{'s' if len(bare) == 1 else 've'} no learned gain and "
            f"bias (elementwise_affine=False or bias=False).\n"
            f"The paper's layer normalisation has both; nn.LayerNorm(d_model) creates them by default."
        )
    d, n_attn = _D_MODEL, 1 if name == "EncoderLayer" else 2
    attention, ffn, norm = 4 * (d * d + d), d * _D_FF + _D_FF + _D_FF * d + d, 2 * d
    expected = n_attn * attention + ffn + (n_attn + 1) * norm
    actual = anatomy.count_parameters(layer)
    # The attention projections may leave out their biases (the paper's W^Q, W^K, W^V, W^O are plain matrices).
    bias_free = anatomy.bias_free_projections(layer)
    expected -= bias_free * d
    if bias_free:
        check.ok("attention projections without bias, as in the paper's equations")
    if actual != expected:
        check.fail(
            f"Your {name}(d_model={d}, num_heads={_NUM_HEADS}, d_ff={_D_FF}) has {actual:,} parameters; the "
            f"paper's layer has {expected:,}: {n_attn} attention module{'s' if n_attn > 1 else ''} x {attention:,} "
            f"(W_q, W_k, W_v, W_o with biases; {4 * d:,} fewer each without), the feed-forward network {ffn:,}, "
            f"and {n_attn + 1} LayerNorms x "
            f"{norm} (gain and bias).\n"
            f"Likely causes: a LayerNorm without gain or bias, a LayerNorm shared between sublayers, an extra or "
            f"missing module."
        )
    check.ok(f"has the paper's number of parameters ({expected:,})")


def _values(check: Check, layer: nn.Module, name: str, out: torch.Tensor, run_masked: Callable,
            compare: Callable) -> twins.LayerLayout:
    """Compare with PyTorch's layer where the parts are found (else: post-LN and gradients), then count parameters."""
    normalised = _is_normalised(out)
    layout = twins.LayerLayout(layer, "encoder" if name == "EncoderLayer" else "decoder", _D_MODEL, _NUM_HEADS, _D_FF)
    if layout.missing:
        if not normalised:
            check.fail(_norm_message(name))
        check.ok("ends with a LayerNorm (post-LN)")
        _unused_parameters(check, layer, run_masked(layer), name)
    else:
        compare(layout, normalised)
    _parameters(check, layer, layout, name)
    return layout


def _norm_message(name: str) -> str:
    return (
        f"The output of your {name} is not layer-normalised: with freshly created LayerNorms every "
        f"output row should have mean 0 and standard deviation 1.\n"
        f"The paper's layers are post-LN: each sublayer ends with LayerNorm(x + dropout(sublayer(x))). "
        f"Did you forget a LayerNorm, use pre-LN (x + sublayer(LayerNorm(x))), or another normalisation "
        f"(RMSNorm, BatchNorm)?"
    )


def _best_match(layout: twins.LayerLayout, out: torch.Tensor, run_twin: Callable, variants: list) -> tuple:
    """(matched assignment or None, name of the first variant that matches or None)."""
    for twin, attentions, norms in layout.twins():
        with torch.no_grad():
            if close_enough(out, run_twin(twin), _ATOL, _RTOL):
                return (attentions, norms), None
    for twin, _, norms in layout.twins():
        if len({id(n) for n in norms}) < len(norms) <= len(layout.norms):
            continue  # a variant is looked for with one LayerNorm per sublayer only
        with torch.no_grad():
            for cause, variant in variants:
                try:
                    expected = variant(twin)
                except RuntimeError:
                    continue
                if close_enough(out, expected, _ATOL, _RTOL):
                    return None, cause
    return None, None


def _check_norm_use(check: Check, name: str, layout: twins.LayerLayout, used: tuple) -> None:
    """Each sublayer must have its own LayerNorm (its own learned gain and bias)."""
    distinct = len({id(n) for n in used})
    if distinct == len(used):
        return
    if len(layout.norms) < layout.slots:
        check.fail(
            f"Your {name} has {len(layout.norms)} LayerNorm{'s' if len(layout.norms) != 1 else ''} for its "
            f"{layout.slots} sublayers: one LayerNorm is shared between sublayers.\n"
            f"Each sublayer needs its own nn.LayerNorm(d_model), with its own learned gain and bias "
            f"(after training they differ)."
        )
    check.fail(
        f"Your {name} uses the same LayerNorm for two sublayers although it creates {len(layout.norms)}: "
        f"a copy-paste slip such as norm1 where norm2 was meant?\n"
        f"Each sublayer has its own LayerNorm, with its own learned gain and bias."
    )


def _uses_d_ff(check: Check, layer: nn.Module, name: str) -> None:
    if not any(_D_FF in p.shape for p in layer.parameters()):
        check.fail(
            f"None of the weights of {name}(d_model={_D_MODEL}, num_heads={_NUM_HEADS}, d_ff={_D_FF}) has a "
            f"dimension of size d_ff = {_D_FF}: the feed-forward sublayer is missing, or it ignores d_ff.\n"
            f"The last sublayer is LayerNorm(x + dropout(ffn(x))) with FeedForward(d_model, d_ff, dropout)."
        )
    check.ok("has a feed-forward network of hidden size d_ff")


def _layout_unused(layout: twins.LayerLayout, name: str) -> str:
    return (
        f"only the properties above were checked: your {name}'s layout could not be matched to PyTorch's layer "
        f"({layout.missing}), so its exact values were not compared"
    )


# --------------------------------------------------------------------------
# FeedForward


def _ffn_candidates(module: nn.Module, d_model: int, d_ff: int) -> list[tuple]:
    """Every (A, b1, B, b2) drawn from the module's parameters with x @ A: d_model -> d_ff, h @ B: d_ff -> d_model."""
    params = [p for p in module.parameters()]
    firsts, seconds = [], []
    for p in params:
        if p.dim() == 3 and p.shape[-1] == 1:  # nn.Conv1d(kernel_size=1): the paper's "two convolutions"
            p = p.reshape(p.shape[0], p.shape[1])
        if p.dim() != 2:
            continue
        if tuple(p.shape) == (d_ff, d_model):
            firsts.append((p, p.detach().double().T))
            seconds.append((p, p.detach().double()))
        if tuple(p.shape) == (d_model, d_ff):
            firsts.append((p, p.detach().double()))
            seconds.append((p, p.detach().double().T))
    biases1 = [p.detach().double() for p in params if tuple(p.shape) == (d_ff,)] or [None]
    biases2 = [p.detach().double() for p in params if tuple(p.shape) == (d_model,)] or [None]
    found = []
    for p1, a in firsts:
        for p2, b in seconds:
            if p1 is p2 or (p1.shape == p2.shape and p1.data_ptr() == p2.data_ptr()):
                continue
            found += [(a, b1, b, b2) for b1 in biases1 for b2 in biases2]
    return found


def _ffn_value(x: torch.Tensor, cand: tuple, act: Callable = torch.relu, after: bool = False) -> torch.Tensor:
    a, b1, b, b2 = cand
    h = x.double() @ a + (0 if b1 is None else b1)
    y = act(h) @ b + (0 if b2 is None else b2)
    return torch.relu(y) if after else y


def _check_ffn_values(check: Check, ff: nn.Module, x: torch.Tensor, out: torch.Tensor) -> None:
    """relu(x W1 + b1) W2 + b2 with the module's own two matrices; named causes otherwise."""
    candidates = _ffn_candidates(ff, _D_MODEL, _D_FF)
    if not candidates:
        sizes = sorted({tuple(p.shape) for p in ff.parameters() if p.dim() == 2})
        check.fail(
            f"Could not find the two weight matrices of FeedForward(d_model={_D_MODEL}, d_ff={_D_FF}): "
            f"one mapping d_model -> d_ff, one mapping d_ff -> d_model. Your weight matrices have shapes "
            f"{', '.join(str(s) for s in sizes) or 'none'}.\n"
            f"Use nn.Linear(d_model, d_ff) then nn.Linear(d_ff, d_model): is the hidden size d_ff, and is the "
            f"second linear layer there?"
        )
    match = next((c for c in candidates if close_enough(out, _ffn_value(x, c), _ATOL, _RTOL)), None)
    if match is None:
        variants = {
            "no activation": (
                lambda c: _ffn_value(x, c, act=lambda h: h),
                "there is no ReLU between the two linear layers: FFN(x) = max(0, x W1 + b1) W2 + b2.",
            ),
            "gelu": (
                lambda c: _ffn_value(x, c, act=F.gelu),
                "you used GELU: the paper's feed-forward network uses ReLU, max(0, x W1 + b1).",
            ),
            "gelu tanh": (
                lambda c: _ffn_value(x, c, act=lambda h: F.gelu(h, approximate="tanh")),
                "you used GELU: the paper's feed-forward network uses ReLU, max(0, x W1 + b1).",
            ),
            "relu after": (
                lambda c: _ffn_value(x, c, after=True),
                "a ReLU is applied after the second linear layer too: only the hidden layer has a ReLU, "
                "the output of linear2 is returned as it is (it must be able to go negative).",
            ),
            "residual": (
                lambda c: x.double() + _ffn_value(x, c),
                "the input is added to the output (a residual connection): the residual and the LayerNorm "
                "belong in the encoder/decoder layer, not inside FeedForward.",
            ),
            "residual and norm": (
                lambda c: F.layer_norm(x.double() + _ffn_value(x, c), (_D_MODEL,)),
                "the output is LayerNorm(x + ffn(x)): the residual connection and the LayerNorm belong in the "
                "encoder/decoder layer; FeedForward returns linear2(dropout(relu(linear1(x)))) only.",
            ),
        }
        for _, (value, cause) in variants.items():
            if any(close_enough(out, value(c), _ATOL, _RTOL) for c in candidates):
                check.fail(f"The output of FeedForward has the wrong values: {cause}")
        check.close(
            out, _ffn_value(x, candidates[0]), "the output of FeedForward",
            atol=_ATOL, rtol=_RTOL,
            hint="Expected relu(x W1^T + b1) W2^T + b2 with your two linear layers (in eval mode).",
        )
    if match[1] is None or match[3] is None:
        check.fail(
            "Your FeedForward computes relu(x W1) W2 without biases. The paper's network has them: "
            "FFN(x) = max(0, x W1 + b1) W2 + b2; nn.Linear includes a bias by default."
        )
    big = 40.0 * x  # large hidden activations: ReLU and its bounded or smooth look-alikes part ways
    out_big = check.tensor(check.call(ff, big, what="FeedForward.forward"), "the output", shape=(3, 5, _D_MODEL))
    if not close_enough(out_big, _ffn_value(big, match), atol=1e-3, rtol=_RTOL):
        check.fail(
            "For inputs of large magnitude (x * 40) the output of your FeedForward is no longer "
            "relu(x W1 + b1) W2 + b2, although it is for ordinary inputs: the activation is not exactly ReLU.\n"
            "Is it bounded (ReLU6, a clamp with a maximum) or a look-alike (softplus, leaky ReLU)? "
            "Use torch.relu (or nn.ReLU()): max(0, x W1 + b1)."
        )
    check.ok("computes relu(x W1 + b1) W2 + b2 with its two linear layers")


def _check_ffn_dropout(check: Check, FeedForward, x: torch.Tensor) -> None:
    """Dropout: off in eval mode, on the hidden activations in train mode (rate, scale, fresh masks)."""
    def build(d_ff: int, p: float) -> nn.Module:
        return stages.is_module(check, check.build(FeedForward, _D_MODEL, d_ff, p), "FeedForward")

    def run(module: nn.Module) -> torch.Tensor:
        return check.call(module, x, what="FeedForward.forward")

    stages.eval_deterministic(check, build(_D_FF, 0.5), run, f"FeedForward({_D_MODEL}, {_D_FF}, dropout=0.5)", 0.5)
    # With d_ff < d_model the hidden vector can be recovered from the output, so dropout's footprint on it is visible.
    p, small = 0.3, 8
    ffs = build(small, p).eval()
    base = run(ffs)
    cand = next((c for c in _ffn_candidates(ffs, _D_MODEL, small) if close_enough(base, _ffn_value(x, c), _ATOL, _RTOL)), None)
    if cand is None:
        check.fail(
            "FeedForward(16, 8, dropout=0.3) in eval mode does not compute relu(x W1 + b1) W2 + b2, although "
            "FeedForward(16, 24) does. Does your class use its d_ff argument (and no fixed size)?"
        )
    where = "linear2(dropout(relu(linear1(x))))"
    stages.train_random(check, ffs, run, f"FeedForward(16, 8, dropout={p})", p,
                        fix=f"Apply nn.Dropout(dropout) to the hidden activations: {where}.")
    a, b1, b, b2 = cand
    h = torch.relu(x.double() @ a + b1)  # (B, L, small): the hidden vector without dropout

    def sites() -> list[stages.Site]:
        rows = (run(ffs).detach().double() - b2).reshape(-1, _D_MODEL)
        hidden = torch.linalg.lstsq(b.T, rows.T).solution.T  # (B * L, small): the vector linear2 received
        if not close_enough(hidden @ b, rows, _ATOL, _RTOL):
            check.fail(
                "In training mode the output of your FeedForward is not linear2 of anything: dropout is applied "
                f"after the second linear layer.\nDropout sits on the hidden activations: {where}; the layer that "
                f"uses FeedForward applies its own dropout to the sublayer's output."
            )
        return [stages.Site("the hidden activations", hidden.reshape(h.shape), h,
                            {"position": 1, "sentence of the batch": 0})]

    stages.dropout_measured(
        check, sites, p, "FeedForward", fix=f"Use one nn.Dropout(dropout) on the hidden activations: {where}.",
        not_exact="In training mode the hidden vector of your FeedForward is not relu(linear1(x)) with some units "
                  "zeroed and the rest scaled by 1 / (1 - p): dropout is in the wrong place (on the input, or "
                  f"before the ReLU?).\nUse {where}.")
    ffs.eval()


# --------------------------------------------------------------------------
# EncoderLayer


def _compare_encoderlayer(check: Check, layout: twins.LayerLayout, run: Callable, g: torch.Generator,
                          x: torch.Tensor, keep: torch.Tensor, normalised: bool) -> None:
    """Compare with PyTorch's layer carrying the learner's weights; name the cause on a mismatch."""
    B, L = x.shape[:2]
    twins.randomise_norms(layout.norms, g)
    out = run(layout.layer, x, keep).double()
    xd = x.double()
    mask = twins.torch_mask(keep, B, _NUM_HEADS, L, L)

    def sa(t, q, m=mask):
        return t.self_attn(q, q, q, attn_mask=m, need_weights=False)[0]

    def ff(t, y, act=torch.relu):
        return t.linear2(act(t.linear1(y)))

    def post(t, ffn=True, res1=True, res2=True, m=mask, act=torch.relu):
        y = t.norm1((xd if res1 else 0) + sa(t, xd, m))
        return t.norm2((y if res2 else 0) + ff(t, y, act)) if ffn else y

    variants = [
        ("the residual connection around self-attention is missing: LayerNorm(x + dropout(self_attn(x))) "
        "adds the sublayer's input x back", lambda t: post(t, res1=False)),
        ("the residual connection around the feed-forward network is missing: LayerNorm(y + dropout(ffn(y))) "
        "adds the sublayer's input y back", lambda t: post(t, res2=False)),
        ("the residual connections are missing: each sublayer output is added to its input before "
        "the LayerNorm", lambda t: post(t, res1=False, res2=False)),
        ("the mask is not used by the self-attention", lambda t: post(t, m=None)),
        ("the feed-forward sublayer is missing: after self-attention comes LayerNorm(y + dropout(ffn(y)))", lambda t: post(t, ffn=False)),
        ("this is pre-LN, x + sublayer(LayerNorm(x)); the paper (and this course) use post-LN: "
        "LayerNorm(x + dropout(sublayer(x)))", lambda t: _pre_ln_encoder(t, xd, sa, ff)),
        ("there is no LayerNorm: each sublayer is LayerNorm(x + dropout(sublayer(x)))", lambda t: _no_norm_encoder(t, xd, sa, ff)),
        ("the LayerNorm is applied to the sublayer's output before the residual addition; it normalises the "
        "sum: LayerNorm(x + dropout(sublayer(x)))", lambda t: _norm_inside_encoder(t, xd, sa, ff)),
        ("the sublayers are in the wrong order: self-attention comes first, then the feed-forward network", lambda t: _swapped_encoder(t, xd, sa, ff)),
        (_GELU_CAUSE, lambda t: post(t, act=F.gelu)),
        (_GELU_CAUSE, lambda t: post(t, act=lambda h: F.gelu(h, approximate="tanh"))),
    ]
    matched, cause = _best_match(layout, out, lambda t: twins.run_twin(t, xd, src_mask=mask), variants)
    if matched is None:
        if cause:
            check.fail(f"The output of your EncoderLayer has the wrong values: {cause}.")
        _check_wiring(check, layout.layer, "EncoderLayer", lambda layer_: run(layer_, x, keep), x)
        _unused_parameters(check, layout.layer, run(layout.layer, x, keep), "EncoderLayer")
        if not normalised:
            check.fail(_norm_message("EncoderLayer"))
        twin = next(layout.twins())[0]
        with torch.no_grad():
            expected = twins.run_twin(twin, xd, src_mask=mask)
        check.close(
            out, expected, "the output of EncoderLayer", atol=_ATOL, rtol=_RTOL,
            hint="Expected nn.TransformerEncoderLayer (post-LN, ReLU) with your weights: "
            "y = LayerNorm(x + dropout(self_attn(x, x, x, mask))), out = LayerNorm(y + dropout(ffn(y))).",
        )
    _check_norm_use(check, "EncoderLayer", layout, matched[1])
    _check_norm_order(check, "EncoderLayer", layout.layer, matched[1])
    _unused_parameters(check, layout.layer, run(layout.layer, x, keep), "EncoderLayer")
    check.ok("matches nn.TransformerEncoderLayer (post-LN) carrying your weights")


def _decoder_variants(xd, md, sa, ca, ff, post, tmask, smask) -> list:
    """Known wrong decoder layers, as functions of a PyTorch twin: (cause, variant)."""
    def pre_ln(t):
        y1 = xd + sa(t, t.norm1(xd))
        y2 = y1 + ca(t, t.norm2(y1), md)
        return y2 + ff(t, t.norm3(y2))

    def no_norm(t):
        y1 = xd + sa(t, xd)
        y2 = y1 + ca(t, y1, md)
        return y2 + ff(t, y2)

    def norm_inside(t):
        y1 = xd + t.norm1(sa(t, xd))
        y2 = y1 + t.norm2(ca(t, y1, md))
        return y2 + t.norm3(ff(t, y2))

    def cross_first(t):
        y1 = t.norm1(xd + ca(t, xd, md))
        y2 = t.norm2(y1 + sa(t, y1))
        return t.norm3(y2 + ff(t, y2))

    variants = [
        ("the target mask is not used by the self-attention: self_attn(x, x, x, tgt_mask)", lambda t: post(t, tm=None)),
        ("the source mask is not used by the cross-attention: cross_attn(x, memory, memory, src_mask)", lambda t: post(t, sm=None)),
        ("the cross-attention takes its keys and values from the decoder's own states instead of memory: "
        "cross_attn(x, memory, memory, src_mask)", lambda t: post(t, kv="y", sm=tmask)),
        ("the cross-attention query is the layer's input instead of the output of the first sublayer "
        "(the query must be the result of the masked self-attention sublayer)", lambda t: post(t, query_x=True)),
        ("the residual connection around the masked self-attention is missing", lambda t: post(t, res=(False, True, True))),
        ("the residual connection around the cross-attention is missing", lambda t: post(t, res=(True, False, True))),
        ("the residual connection around the feed-forward network is missing", lambda t: post(t, res=(True, True, False))),
        ("the residual connections are missing: each sublayer output is added to its input before the "
        "LayerNorm", lambda t: post(t, res=(False, False, False))),
        ("the feed-forward sublayer is missing: the third sublayer is LayerNorm(y + dropout(ffn(y)))", lambda t: post(t, ffn=False)),
        ("this is pre-LN, x + sublayer(LayerNorm(x)); the paper (and this course) use post-LN: "
        "LayerNorm(x + dropout(sublayer(x)))", pre_ln),
        ("there is no LayerNorm: each sublayer is LayerNorm(x + dropout(sublayer(x)))", no_norm),
        ("the LayerNorm is applied to the sublayer's output before the residual addition; it normalises the "
        "sum: LayerNorm(x + dropout(sublayer(x)))", norm_inside),
        ("the sublayers are in the wrong order: masked self-attention first, then cross-attention, then the "
        "feed-forward network", cross_first),
        (_GELU_CAUSE, lambda t: post(t, act=F.gelu)),
        (_GELU_CAUSE, lambda t: post(t, act=lambda h: F.gelu(h, approximate="tanh"))),
    ]
    return variants


_GELU_CAUSE = ("the feed-forward network uses GELU: the paper's uses ReLU, "
               "FFN(x) = max(0, x W1 + b1) W2 + b2")


def _pre_ln_encoder(t, x, sa, ff):
    y = x + sa(t, t.norm1(x))
    return y + ff(t, t.norm2(y))


def _no_norm_encoder(t, x, sa, ff):
    y = x + sa(t, x)
    return y + ff(t, y)


def _norm_inside_encoder(t, x, sa, ff):
    y = x + t.norm1(sa(t, x))
    return y + t.norm2(ff(t, y))


def _swapped_encoder(t, x, sa, ff):
    y = t.norm1(x + ff(t, x))
    return t.norm2(y + sa(t, y))


# --------------------------------------------------------------------------
# DecoderLayer


def _decoder_properties(check: Check, run: Callable, layer: nn.Module, x, memory, src_keep, causal,
                        plain: torch.Tensor, out: torch.Tensor, g: torch.Generator) -> None:
    """Memory is used, src_mask hides memory positions, tgt_mask (and only it) makes the layer causal."""
    B, T = x.shape[:2]
    other = memory.clone()
    other[:, :4] = torch.randn(B, 4, _D_MODEL, generator=g)
    if close_enough(run(layer, x, other, src_keep, causal), out, _ATOL, _RTOL):
        check.fail(
            "Changing memory (the encoder output) does not change the output of your DecoderLayer: the "
            "cross-attention does not use it.\n"
            "In cross-attention the queries come from the decoder and the keys and values from memory: "
            "cross_attn(x, memory, memory, src_mask), not cross_attn(x, x, x, ...)."
        )
    check.ok("uses memory (changing the encoder output changes the result)")

    hidden = memory.clone()
    hidden[1, 4:] = torch.randn(2, _D_MODEL, generator=g)
    if not close_enough(run(layer, x, hidden, src_keep, causal), out, _ATOL, _RTOL):
        check.fail(
            "Memory positions hidden by src_mask still influence the output: changing padded positions of "
            "memory changed the result.\n"
            "Pass src_mask to the cross-attention: cross_attn(x, memory, memory, src_mask)."
        )
    check.ok("honours src_mask in the cross-attention")

    later = x.clone()
    later[:, 2:] = torch.randn(B, T - 2, _D_MODEL, generator=g)
    if close_enough(run(layer, later, memory)[:, :2], plain[:, :2], _ATOL, _RTOL):
        check.fail(
            "Without a target mask (tgt_mask=None), changing later target positions did not change earlier "
            "outputs: either your DecoderLayer does not mix information between target positions, or it "
            "builds a causal mask of its own instead of using tgt_mask.\n"
            "Its first sublayer is self-attention over the target with the mask it is given: "
            "self_attn(x, x, x, tgt_mask). (The model builds tgt_mask, padding included.)"
        )
    if not close_enough(run(layer, later, memory, src_keep, causal)[:, :2], out[:, :2], _ATOL, _RTOL):
        check.fail(
            "With a causal tgt_mask, changing target positions 2 and 3 changed the outputs at positions 0 "
            "and 1: the decoder can see the future.\n"
            "Pass tgt_mask to the (first) self-attention: self_attn(x, x, x, tgt_mask)."
        )
    check.ok("is causal with a causal tgt_mask (the future does not influence the past)")


def _compare_decoderlayer(check: Check, layout: twins.LayerLayout, run: Callable, g: torch.Generator,
                          x: torch.Tensor, memory: torch.Tensor, src_keep: torch.Tensor, causal: torch.Tensor,
                          normalised: bool) -> None:
    """Compare with PyTorch's layer carrying the learner's weights; name the cause on a mismatch."""
    (B, T), S = x.shape[:2], memory.shape[1]
    twins.randomise_norms(layout.norms, g)
    out = run(layout.layer, x, memory, src_keep, causal).double()
    xd, md = x.double(), memory.double()
    tmask = twins.torch_mask(causal, B, _NUM_HEADS, T, T)
    smask = twins.torch_mask(src_keep, B, _NUM_HEADS, T, S)

    def sa(t, q, m=tmask):
        return t.self_attn(q, q, q, attn_mask=m, need_weights=False)[0]

    def ca(t, q, kv, m=smask):
        return t.multihead_attn(q, kv, kv, attn_mask=m, need_weights=False)[0]

    def ff(t, y, act=torch.relu):
        return t.linear2(act(t.linear1(y)))

    def post(t, res=(True, True, True), tm=tmask, sm=smask, kv=None, query_x=False, ffn=True, act=torch.relu):
        y1 = t.norm1((xd if res[0] else 0) + sa(t, xd, tm))
        source = md if kv is None else (y1 if kv == "y" else xd)
        y2 = t.norm2((y1 if res[1] else 0) + ca(t, xd if query_x else y1, source, sm))
        return t.norm3((y2 if res[2] else 0) + ff(t, y2, act)) if ffn else y2

    variants = _decoder_variants(xd, md, sa, ca, ff, post, tmask, smask)
    matched, cause = _best_match(layout, out, lambda t: twins.run_twin(t, xd, md, src_mask=smask, tgt_mask=tmask), variants)
    if matched is None:
        if cause:
            check.fail(f"The output of your DecoderLayer has the wrong values: {cause}.")
        _check_wiring(check, layout.layer, "DecoderLayer", lambda layer_: run(layer_, x, memory, src_keep, causal), x)
        _unused_parameters(check, layout.layer, run(layout.layer, x, memory, src_keep, causal), "DecoderLayer")
        if not normalised:
            check.fail(_norm_message("DecoderLayer"))
        twin = next(layout.twins())[0]
        with torch.no_grad():
            expected = twins.run_twin(twin, xd, md, src_mask=smask, tgt_mask=tmask)
        check.close(
            out, expected, "the output of DecoderLayer", atol=_ATOL, rtol=_RTOL,
            hint="Expected nn.TransformerDecoderLayer (post-LN, ReLU) with your weights: "
            "y1 = LayerNorm(x + self_attn(x, x, x, tgt_mask)), y2 = LayerNorm(y1 + cross_attn(y1, memory, "
            "memory, src_mask)), out = LayerNorm(y2 + ffn(y2)) (dropout on each sublayer output).",
        )
    _check_norm_use(check, "DecoderLayer", layout, matched[1])
    _check_norm_order(check, "DecoderLayer", layout.layer, matched[1])
    _unused_parameters(check, layout.layer, run(layout.layer, x, memory, src_keep, causal), "DecoderLayer")
    check.ok("matches nn.TransformerDecoderLayer (post-LN) carrying your weights")


# --------------------------------------------------------------------------
# The contract: names, components, wiring and dropout, observed with hooks on the checker's own instances.

_NORMS = {"EncoderLayer": ("norm1", "norm2"), "DecoderLayer": ("norm1", "norm2", "norm3")}
_SUBLAYERS = {
    "EncoderLayer": (("self_attn", "norm1"), ("feed_forward", "norm2")),
    "DecoderLayer": (("self_attn", "norm1"), ("cross_attn", "norm2"), ("feed_forward", "norm3")),
}
_ROLES = {("EncoderLayer", "self_attn"): "self-attention", ("DecoderLayer", "self_attn"): "the masked self-attention",
          ("DecoderLayer", "cross_attn"): "the cross-attention", ("EncoderLayer", "feed_forward"): "the feed-forward network",
          ("DecoderLayer", "feed_forward"): "the feed-forward network"}


def _contract(check: Check, layer: nn.Module, name: str) -> None:
    """The submodules later code reads, the components' own checkers, their kinds and sizes; norms over d_model."""
    from .multi_head import check_multi_head_attention

    wanted = {"self_attn": (check_multi_head_attention, "MultiHeadAttention"),
              "feed_forward": (check_feed_forward, "FeedForward")}
    if name == "DecoderLayer":
        wanted["cross_attn"] = wanted["self_attn"]
    sizes = {"d_model": _D_MODEL, "num_heads": _NUM_HEADS, "d_ff": _D_FF, "dropout": 0.0}
    stages.contract_parts(check, layer, name, sizes, components=stages.submodule_parts(layer, wanted))
    _check_norms(check, layer, name)


def _check_norms(check: Check, layer: nn.Module, name: str) -> None:
    """Each normN normalises over the last axis (the d_model features of one position)."""
    z = 3.0 * torch.randn(2, 5, _D_MODEL, generator=generator(13)) + 1.5
    for norm_name in _NORMS[name]:
        norm = getattr(layer, norm_name)
        if isinstance(norm, nn.LayerNorm) and tuple(norm.normalized_shape) != (_D_MODEL,):
            check.fail(f"`{norm_name}` of your {name} is nn.LayerNorm({tuple(norm.normalized_shape)}): it normalises "
                       f"over the wrong axes. Use nn.LayerNorm(d_model): each position's d_model features are "
                       f"normalised on their own.")
        out = check.attempt(norm, z, what=f"{name}.{norm_name}")
        if not isinstance(out, torch.Tensor) or out.shape != z.shape:
            continue
        o = out.detach().double()
        rows_ok = bool((o.mean(-1).abs() < 1e-2).all() and ((o.std(-1, unbiased=False) - 1).abs() < 0.05).all())
        for dim, axis in ((1, "the positions (dim 1)"), (0, "the batch (dim 0)")):
            other = bool((o.mean(dim).abs() < 1e-2).all() and ((o.std(dim, unbiased=False) - 1).abs() < 0.05).all())
            if other and not rows_ok:
                check.fail(f"`{norm_name}` of your {name} normalises over {axis}, not over the last axis: each "
                           f"position's d_model features must get mean 0 and variance 1 on their own "
                           f"(`x.mean(-1, keepdim=True)`, or nn.LayerNorm(d_model)).")


def _trace(check: Check, layer: nn.Module, name: str, run: Callable) -> tuple | None:
    """(steps, output): per sublayer its query input, output, the norm's input and output, seen by hooks."""
    names = [n for pair in _SUBLAYERS[name] for n in pair]
    with Recorder(layer, names) as rec:
        out = run(layer)
    steps = []
    for sub, norm in _SUBLAYERS[name]:
        seen = (rec.first_input(sub), rec.output(sub), rec.first_input(norm), rec.output(norm))
        if any(t is None for t in seen):
            return None  # a piece called twice or not at all: judged by values only
        inp, s, z, y = (t.detach().double() for t in seen)
        steps.append({"sub": sub, "norm": norm, "inp": inp, "s": s, "z": z, "y": y,
                      "args": rec.only(sub)[0] + tuple(rec.only(sub)[1].values())})
    return steps, out.detach().double()


def _which(value: torch.Tensor, known: dict) -> str:
    return next((label for label, t in known.items() if close_enough(value, t, atol=1e-4, rtol=1e-4)), "")


def _check_wiring(check: Check, layer: nn.Module, name: str, run: Callable, x: torch.Tensor) -> None:
    """In eval mode: each sublayer reads the previous norm's output, adds it back, and normN closes sublayer N."""
    traced = _trace(check, layer, name, run)
    if traced is None:
        return
    steps, out = traced
    current, current_label = x.double(), "x, the layer's input"
    known = {current_label: current}
    for step in steps:
        role = _ROLES[(name, step["sub"])]
        residual = step["z"] - step["s"]
        if not close_enough(residual, current, atol=1e-4, rtol=1e-4):
            options = dict(known, **{"nothing (the residual is missing)": torch.zeros_like(current),
                                     "the sublayer's own output a second time": step["s"]})
            which = _which(residual, options)
            if which:
                check.fail(f"The residual connection around {role} in your {name} adds {which} instead of "
                           f"{current_label}: {step['norm']}(y + dropout({step['sub']}(y, ...))) adds back the very "
                           f"tensor the sublayer received.")
            return
        if not close_enough(step["inp"], current, atol=1e-4, rtol=1e-4):
            which = _which(step["inp"], known)
            if which:
                check.fail(f"In your {name}, {role} receives {which} instead of {current_label}: each sublayer "
                           f"works on the output of the previous one.")
            return
        current, current_label = step["y"], f"the output of `{step['norm']}` (the previous sublayer)"
        known[current_label] = current
    check.ok("norm1, norm2" + (", norm3" if name == "DecoderLayer" else "") + " close the sublayers in order, "
             "each residual adds back the sublayer's own input (seen on the submodules' inputs and outputs)")


def _check_dropout_measured(check: Check, build: Callable, run: Callable, name: str, x: torch.Tensor,
                            memory: torch.Tensor | None = None, p: float = 0.5) -> None:
    """Train mode: rate p on each sublayer's output before the residual and inside each attention (on its
    weights), nowhere else (memory untouched), fresh masks, global RNG."""
    layer = build(p)
    from .multi_head import attention_dropout

    for sub in ("self_attn", "cross_attn")[: 1 if name == "EncoderLayer" else 2]:
        attention_dropout(check, getattr(layer, sub), _D_MODEL, _NUM_HEADS, p, f"`{sub}` of your {name}",
                          fix=f"Pass the rate on: `self.{sub} = MultiHeadAttention(d_model, num_heads, dropout)`.")
    layer.train()

    def sites() -> list[stages.Site] | None:
        traced = _trace(check, layer, name, run)
        if traced is None:
            return None
        steps, out = traced
        found, current = [], x.double()
        for i, step in enumerate(steps):
            current = current if i == 0 else steps[i - 1]["y"]
            role = _ROLES[(name, step["sub"])]
            if not close_enough(step["inp"], current):
                fed = drop_pattern(step["inp"], current)
                if fed.exact and fed.rate > 0:
                    check.fail(f"In training mode your {name} applies dropout to the input of {role} (to x before "
                               f"the sublayer reads it). The paper drops the sublayer's output instead: "
                               f"LayerNorm(x + dropout(sublayer(x))).")
                return None  # something else: the checks above have judged it
            if step["sub"] == "cross_attn" and memory is not None:
                _memory_untouched(check, step["args"], memory)
            found.append(stages.Site(f"the output of {role} (before the residual addition)", step["z"] - current,
                                     step["s"], {"position": 1, "sentence of the batch": 0, "feature": 2}))
        if not torch.equal(out, steps[-1]["y"]):
            check.fail(f"In training mode the output of your {name} is not the output of its last LayerNorm: "
                       f"something (a dropout?) acts after `{steps[-1]['norm']}`.")
        return found

    stages.dropout_measured(check, sites, p, name, fix="The paper's sublayer: LayerNorm(x + dropout(sublayer(x))), "
                            "with nn.Dropout(dropout), once per sublayer.")


def _memory_untouched(check: Check, args: tuple, memory: torch.Tensor) -> None:
    """The cross-attention's keys and values are memory as given (the encoder's output is not dropped again)."""
    for given in args[1:3]:
        if isinstance(given, torch.Tensor) and given.shape == memory.shape and not close_enough(given, memory):
            pattern = drop_pattern(given, memory)
            cause = (f"drops {round(100 * pattern.rate)}% of its entries" if pattern.exact and pattern.rate > 0
                     else "changes it")
            check.fail(f"In training mode your DecoderLayer {cause} before the cross-attention reads memory. memory "
                       f"is the encoder's output, already regularised inside the encoder: use it as it is, "
                       f"cross_attn(x, memory, memory, src_mask). Dropout belongs on each sublayer's output.")


def _check_norm_order(check: Check, name: str, layer: nn.Module, used: tuple) -> None:
    """norm1 closes the first sublayer, norm2 the second (and norm3 the third): later code copies them by name."""
    wanted = [getattr(layer, n) for n in _NORMS[name]]
    if all(a is b for a, b in zip(used, wanted)):
        return
    names = {id(m): n for n, m in layer.named_children()}
    order = ", ".join(f"`{names.get(id(n), '?')}`" for n in used)
    check.fail(f"Your {name} closes its sublayers with {order}, in that order: the names are part of the exercise, "
               f"and norm1 belongs to the first sublayer, norm2 to the second" + (", norm3 to the third" if
               name == "DecoderLayer" else "") + ". Lesson 07 copies each LayerNorm by its name.")


def _causal_encoder(check: Check, run: Callable, layer: nn.Module, x: torch.Tensor, plain: torch.Tensor,
                    g: torch.Generator) -> None:
    """Later positions do not reach earlier ones: if earlier ones reach later ones, that is a causal mask."""
    earlier = x.clone()
    earlier[:, :2] = torch.randn(x.shape[0], 2, x.shape[2], generator=g)
    if not close_enough(run(layer, earlier)[:, 2:], plain[:, 2:], _ATOL, _RTOL):
        check.fail(
            "Your EncoderLayer lets each position see only the positions before it (a causal mask): changing later "
            "positions never changes earlier outputs, but changing earlier positions changes later ones.\n"
            "The encoder reads the whole source sentence at once: use only the padding mask it is given, "
            "self_attn(x, x, x, mask). The causal mask belongs to the decoder's self-attention."
        )


def _masks_where_they_belong(check: Check, layer: nn.Module, x, memory, src_mask, tgt_mask) -> None:
    """Which mask each attention received (seen by pre-hooks, even when the call then crashes): name a misplaced one."""
    received: dict[str, list] = {}

    def hook(name):
        def remember(_module, args, kwargs):
            received.setdefault(name, []).append(args[3] if len(args) > 3 else kwargs.get("mask"))
        return remember

    handles = [getattr(layer, sub).register_forward_pre_hook(hook(sub), with_kwargs=True)
               for sub in ("self_attn", "cross_attn") if isinstance(getattr(layer, sub, None), nn.Module)]
    try:
        out = check.attempt(layer, x, memory, src_mask, tgt_mask, what="DecoderLayer.forward")
    finally:
        for handle in handles:
            handle.remove()
    crashed = f"\n\n{out.message}" if isinstance(out, Raised) else ""
    if received.get("cross_attn", [None])[0] is tgt_mask and len(received["cross_attn"]) == 1:
        check.fail(
            "Your DecoderLayer gives tgt_mask to the cross-attention: its scores are (target length x memory length), "
            "so the target mask does not fit them (it crashes when the lengths differ) and the source padding is "
            "never hidden. The cross-attention takes the source mask: cross_attn(x, memory, memory, src_mask); the "
            "target mask belongs to the masked self-attention, self_attn(x, x, x, tgt_mask)." + crashed
        )
    if received.get("self_attn", [None])[0] is src_mask and len(received["self_attn"]) == 1:
        check.fail(
            "Your DecoderLayer uses the two masks the wrong way round: the self-attention receives src_mask. The "
            "target mask (B, 1, L_tgt, L_tgt) goes to the masked self-attention, self_attn(x, x, x, tgt_mask); the "
            "source mask (B, 1, 1, L_src) to the cross-attention, cross_attn(x, memory, memory, src_mask). Check the "
            "order of forward's parameters too: forward(self, x, memory, src_mask=None, tgt_mask=None)." + crashed
        )


def _check_layer_sizes(check: Check, cls: type[nn.Module], name: str) -> None:
    """One head, d_model = 20 (not a power of two), and lesson 06's sentence length (64; memory of 70)."""
    D, H, d_ff, L, S = 20, 1, 36, 64, 70
    layer = stages.is_module(check, check.build(cls, D, H, d_ff, 0.0), name).eval()
    for sub in ("self_attn", "cross_attn")[: 1 if name == "EncoderLayer" else 2]:
        heads = getattr(getattr(layer, sub), "num_heads", None)
        if heads != H:
            check.fail(f"{name}(d_model={D}, num_heads={H}, d_ff={d_ff}) builds `{sub}` with num_heads = "
                       f"{describe(heads)}: pass the layer's own num_heads on, "
                       f"MultiHeadAttention(d_model, num_heads, dropout).")
    g = generator(17)
    x = torch.randn(2, L, D, generator=g)
    keep = torch.ones(2, 1, 1, S if name == "DecoderLayer" else L, dtype=torch.bool)
    keep[1, ..., -5:] = False
    args = (x, keep) if name == "EncoderLayer" else (
        x, torch.randn(2, S, D, generator=g), keep, torch.ones(L, L, dtype=torch.bool).tril().expand(2, 1, L, L))
    what = f"{name}(d_model={D}, num_heads={H}, d_ff={d_ff}) on sentences of {L} tokens"
    out = check.call(layer, *args, what=f"{name}.forward", hint=(
        f"It works for the small sizes but not for {what}: is a size fixed somewhere?"))
    out = check.tensor(out, f"the output of {what}", shape=(2, L, D), dtype=torch.float32)
    if not _is_normalised(out):
        check.fail(f"The output of {what} is not layer-normalised, although it is with d_model=16 and 4 heads: "
                   f"does your class use the d_model and num_heads it is given?")
    check.ok(f"works with num_heads=1, d_model={D} (not a power of two) and sentences of {L} tokens")
