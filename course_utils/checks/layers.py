"""Checkers for lesson 05: the position-wise feed-forward network and the encoder and decoder layers.

Each checker takes the learner's class, builds small instances of its own and
tests what the layer means. The contract first: the submodules later lessons
read (``linear1``/``linear2``; ``self_attn``, ``cross_attn``, ``feed_forward``,
``norm1``...), and the components' own checkers on the classes the layer uses.
Then properties (shapes, positions processed independently, masks honoured,
causality, dropout only in training), then the values against PyTorch's own
``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` carrying the
learner's weights, with the known slips tried to name a cause. Hooks on the
sublayers show the residual wiring and measure each sublayer's dropout.

The layer stages are the library's (:mod:`.stages.wiring`), run with :data:`POST_LN`: the paper's wiring, its
formula and calls for the messages, and its slip tables (wrong layers as mutants of the right one). Lesson 09's
pre-LN layers (:mod:`.ablation`) run the same stages with their own wiring.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import stages
from ._core import Check, CheckResult, close_enough, generator
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip, same_tensor
from .stages.wiring import DECODER_RESIDUAL_SLIPS, D_FF as _D_FF, D_MODEL as _D_MODEL, Pieces, Wiring, decoder_layer_stages, \
    encoder_layer_stages, slipped_layer

_ATOL, _RTOL = 1e-4, 1e-4  # layers compare float32 stacks with float64 twins


def check_feed_forward(FeedForward: type[nn.Module]) -> CheckResult:
    """Check ``FeedForward(d_model, d_ff, dropout)``: linear2(dropout(relu(linear1(x)))), position by position."""
    return FEED_FORWARD.check(FeedForward)


def check_encoder_layer(EncoderLayer: type[nn.Module]) -> CheckResult:
    """Check ``EncoderLayer(d_model, num_heads, d_ff, dropout)``: post-LN self-attention and feed-forward."""
    return ENCODER_LAYER.check(EncoderLayer)


def check_decoder_layer(DecoderLayer: type[nn.Module]) -> CheckResult:
    """Check ``DecoderLayer(d_model, num_heads, d_ff, dropout)``: masked self-attention, cross-attention, feed-forward."""
    return DECODER_LAYER.check(DecoderLayer)


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
    stages.every_parameter_learns(check, ff, check.call(ff, x, what="FeedForward.forward"), "FeedForward", why=(
        "Both linear layers run, so the gradient is cut on the way: a `.detach()`, `.data` or `torch.no_grad()` "
        "between them (or around the first) keeps it from reaching linear1. Keep the whole computation in the graph."))
    _check_ffn_dropout(check, FeedForward, x)
    stages.module_on_gpu(check, ff, x, what="FeedForward")
    stages.state_dict_round_trip(check, lambda: check.build(FeedForward, _D_MODEL, _D_FF, 0.0), lambda m: m(x),
                                 "FeedForward")
    stages.contract_defaults(check, FeedForward, "FeedForward")


# --------------------------------------------------------------------------
# FeedForward: the oracle with its slips, relu(x W1 + b1) W2 + b2 with the module's own matrices.


def _ffn(x: torch.Tensor, cand: tuple, act: Callable = torch.relu, after: bool = False, relu_in: bool = False,
         b1: bool = True, b2: bool = True, residual: bool = False, norm: bool = False) -> torch.Tensor:
    """relu(x W1 + b1) W2 + b2 with the matrices ``cand`` = (A, b1, B, b2), in their dtype; the flags are the slips."""
    a, bias1, b, bias2 = cand
    x = x.to(a.dtype)
    h = (torch.relu(x) if relu_in else x) @ a + (0 if bias1 is None or not b1 else bias1)
    y = act(h) @ b + (0 if bias2 is None or not b2 else bias2)
    y = torch.relu(y) if after else y
    y = x + y if residual or norm else y
    return F.layer_norm(y, (y.shape[-1],)) if norm else y


def _ffn_value(x: torch.Tensor, cand: tuple) -> torch.Tensor:
    return _ffn(x, cand)


_RELU_ONLY = "the paper's feed-forward network uses ReLU, max(0, x W1 + b1)."

#: the known slips, tried in order once FeedForward's values differ from relu(x W1 + b1) W2 + b2
FFN_SLIPS = (
    Slip("no activation", Diagnosis("there is no ReLU between the two linear layers:",
                                    "FFN(x) = max(0, x W1 + b1) W2 + b2."), dict(act=lambda h: h)),
    Slip("gelu", Diagnosis("you used GELU:", _RELU_ONLY), dict(act=F.gelu)),
    Slip("gelu tanh", Diagnosis("you used GELU:", _RELU_ONLY), dict(act=lambda h: F.gelu(h, approximate="tanh"))),
    Slip("leaky relu", Diagnosis("you used LeakyReLU (negative values scaled by 0.01, not set to 0):", _RELU_ONLY),
         dict(act=F.leaky_relu)),
    Slip("silu", Diagnosis("you used SiLU (Swish):", _RELU_ONLY), dict(act=F.silu)),
    Slip("relu before", Diagnosis(
        "a ReLU is applied to the input too, before the first linear layer:",
        "only the hidden layer has a ReLU; the input (the output of a LayerNorm, with negative values) goes into "
        "linear1 as it is."), dict(relu_in=True)),
    Slip("relu after", Diagnosis(
        "a ReLU is applied after the second linear layer too:",
        "only the hidden layer has a ReLU, the output of linear2 is returned as it is (it must be able to go "
        "negative)."), dict(after=True)),
    Slip("relu moved after", Diagnosis(
        "the ReLU is applied after the second linear layer instead of between the two:",
        "the hidden layer is relu(linear1(x)), and the output of linear2 is returned as it is (it must be able to "
        "go negative). Without a ReLU between them, the two linear layers amount to a single one."),
        dict(act=lambda h: h, after=True)),
    Slip("b1 unused", Diagnosis(
        "the first layer's bias b1 is never added:",
        "the hidden layer is max(0, x W1 + b1). A matrix product with `linear1.weight` alone leaves b1 out; call "
        "`self.linear1(x)` instead."), dict(b1=False)),
    Slip("b2 unused", Diagnosis(
        "the second layer's bias b2 is never added:",
        "the output is max(0, x W1 + b1) W2 + b2. A matrix product with `linear2.weight` alone leaves b2 out; call "
        "`self.linear2(h)` instead."), dict(b2=False)),
    Slip("residual", Diagnosis(
        "the input is added to the output (a residual connection):",
        "the residual and the LayerNorm belong in the encoder/decoder layer, not inside FeedForward."),
        dict(residual=True)),
    Slip("residual and norm", Diagnosis(
        "the output is LayerNorm(x + ffn(x)):",
        "the residual connection and the LayerNorm belong in the encoder/decoder layer; FeedForward returns "
        "linear2(dropout(relu(linear1(x)))) only."), dict(norm=True)),
)


def _as_feed_forward(slip: Slip) -> type[nn.Module]:
    """The slip made into a learner's FeedForward class (for the generated catalogue tests)."""
    class SlippedFeedForward(nn.Module):
        def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
            super().__init__()
            self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
            self.dropout = nn.Dropout(p=dropout)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            weights = (self.linear1.weight.T, self.linear1.bias, self.linear2.weight.T, self.linear2.bias)
            return slip.replay(_ffn, x, weights)

    return SlippedFeedForward


def _check_ffn_values(check: Check, ff: nn.Module, x: torch.Tensor, out: torch.Tensor) -> None:
    """relu(x W1 + b1) W2 + b2 with the module's own two matrices; named causes otherwise."""
    candidates = _ffn_weights(check, ff)
    match = next((c for c in candidates if close_enough(out, _ffn_value(x, c), _ATOL, _RTOL)), None)
    if match is None:
        _ffn_wrong_values(check, x, out, candidates)
    if match[1] is None or match[3] is None:
        missing = " and ".join(b for b, m in (("b1", match[1]), ("b2", match[3])) if m is None)
        check.fail(
            f"Your FeedForward computes {'relu(x W1)' if match[1] is None else 'relu(x W1 + b1)'} "
            f"{'W2' if match[3] is None else 'W2 + b2'}: without {missing}. The paper's network has both biases: "
            f"FFN(x) = max(0, x W1 + b1) W2 + b2; nn.Linear includes a bias by default."
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


def _ffn_weights(check: Check, ff: nn.Module) -> list[tuple]:
    """Every plausible (A, b1, B, b2) of the module's parameters; none found is the failure, with the shapes seen."""
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
    return candidates


def _ffn_wrong_values(check: Check, x: torch.Tensor, out: torch.Tensor, candidates: list[tuple]) -> None:
    """The values differ for every candidate: a known slip, an output that cannot go negative, or the comparison."""
    same = same_tensor(out.double(), _ATOL, _RTOL)
    slip = matching_slip(FFN_SLIPS, lambda s: [s.replay(_ffn, x, c) for c in candidates],
                         lambda outs: any(same(o) for o in outs))
    if slip is not None:
        check.fail(f"The output of FeedForward has the wrong values: {slip.says}")
    expected = _ffn_value(x, candidates[0])
    if bool((out >= 0).all()) and bool((expected < -_ATOL).any()):
        check.fail("The output of FeedForward has no negative entry, where relu(x W1 + b1) W2 + b2 has many: "
                   "something that cannot go negative (a ReLU, a softmax, an absolute value) is applied to the "
                   "output of linear2. Only the hidden layer has a ReLU; return linear2's output as it is.")
    check.close(out, expected, "the output of FeedForward", atol=_ATOL, rtol=_RTOL,
                hint="Expected relu(x W1^T + b1) W2^T + b2 with your two linear layers (in eval mode).")




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
# A LayerNorm of the learner's own class inside a layer (lesson 05's exercise), judged where the contract asks for one.


def own_norm_problem(norm: nn.Module, shown: str, d_model: int) -> str:
    """"" if a layer norm of the learner's own class computes nn.LayerNorm's values with its parameters (gain first,
    then bias, as lesson 07 copies them); else what differs."""
    params = list(norm.parameters())
    if len(params) != 2 or not isinstance(d_model, int):
        return ""
    gain, bias = params
    x = torch.randn(2, 3, d_model, generator=generator(4)) * 3 + 1  # (2, 3, d_model)
    eps = getattr(norm, "eps", 1e-5)
    eps = eps if isinstance(eps, float) and 0 < eps < 1e-3 else 1e-5
    try:
        with torch.no_grad():
            got = norm(x.clone())
            want = F.layer_norm(x, (d_model,), gain, bias, eps)
    except Exception:  # noqa: BLE001  (the layer's own stages run it, and report a crash with its line)
        return ""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or torch.allclose(got, want, atol=1e-4, rtol=1e-4):
        return ""
    return (f"{shown} is your {type(norm).__name__}, but it does not compute a layer norm: on inputs of shape "
            f"(2, 3, {d_model}) it differs from nn.LayerNorm with the same gain and bias by up to "
            f"{float((got - want).abs().max()):.2g}. {_own_norm_cause(got, x, gain, bias, eps)}")


def _own_norm_cause(got: torch.Tensor, x: torch.Tensor, gain: torch.Tensor, bias: torch.Tensor, eps: float) -> str:
    """Which known slip of a LayerNorm gives ``got``: Bessel's variance, RMSNorm, statistics over the positions."""
    centred, var = x - x.mean(-1, keepdim=True), x.var(-1, keepdim=True)  # var with Bessel's correction
    bessel = [centred / torch.sqrt(var + eps) * gain + bias, centred / (var.sqrt() + eps) * gain + bias]
    rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain + bias
    over_positions = F.layer_norm(x.transpose(1, 2), (x.shape[1],), eps=eps).transpose(1, 2) * gain + bias
    close = lambda other: torch.allclose(got, other, atol=1e-3, rtol=1e-3)  # noqa: E731
    if any(close(b) for b in bessel):
        return ("It divides the variance by d_model - 1: `x.std()` and `x.var()` apply Bessel's correction by "
                "default. Use `x.var(-1, unbiased=False, keepdim=True)` (or correction=0), as nn.LayerNorm does; "
                "lesson 07 compares your model with PyTorch's layers, which do.")
    if close(rms):
        return ("It does not subtract the mean: that is RMSNorm. The paper's layers use layer normalisation, "
                "(x - mean) / sqrt(var + eps), with the mean and variance of each vector's d_model features.")
    if close(over_positions):
        return ("It normalises over the positions (dim 1) instead of each vector's d_model features: take the "
                "statistics along the last axis, `x.mean(-1, keepdim=True)`.")
    return "Run check_layer_norm on it: it names what differs."


# --------------------------------------------------------------------------
# Post-LN, the paper's wiring: the right layer with flags (the slips' oracle), and the slip tables.

_GELU = Diagnosis("the feed-forward network uses GELU:", "the paper's uses ReLU, FFN(x) = max(0, x W1 + b1) W2 + b2")
_POST_LN = "LayerNorm(x + dropout(sublayer(x)))"


def _post_ln_encoder(p: Pieces, ffn: bool = True, res1: bool = True, res2: bool = True,
                     act: Callable = torch.relu) -> torch.Tensor:
    """The post-LN encoder layer over a twin's pieces; each flag is one known slip."""
    y = p.n1((p.x if res1 else 0) + p.sa(p.x))
    return p.n2((y if res2 else 0) + p.ff(y, act)) if ffn else y


def _one_pre_ln(sublayer: str, norm: str) -> Diagnosis:
    return Diagnosis(f"the {sublayer} sublayer is pre-LN, y + dropout({sublayer}({norm}(y))), while the rest of the "
                     f"layer is post-LN.", f"The paper's layer normalises every sublayer's sum: "
                     f"{norm}(y + dropout({sublayer}(y)))")


_NO_NORM = Diagnosis("there is no LayerNorm:", f"each sublayer is {_POST_LN}")
_NORM_INSIDE = Diagnosis("the LayerNorm is applied to the sublayer's output before the residual addition;",
                         f"it normalises the sum: {_POST_LN}")
_PRE_LN_HERE = Diagnosis("this is pre-LN, x + sublayer(LayerNorm(x));",
                         f"the paper (and this course) use post-LN: {_POST_LN}")
_NO_RESIDUALS = Diagnosis("the residual connections are missing:",
                          "each sublayer output is added to its input before the LayerNorm")

#: the known wrong post-LN encoder layers, tried in order once the values differ (a mutant: flags of
#: _post_ln_encoder, or a function of the pieces)
ENCODER_SLIPS = (
    Slip("no residual around self-attention", Diagnosis(
        "the residual connection around self-attention is missing:",
        "LayerNorm(x + dropout(self_attn(x))) adds the sublayer's input x back"), dict(res1=False)),
    Slip("no residual around feed-forward", Diagnosis(
        "the residual connection around the feed-forward network is missing:",
        "LayerNorm(y + dropout(ffn(y))) adds the sublayer's input y back"), dict(res2=False)),
    Slip("no residuals", _NO_RESIDUALS, dict(res1=False, res2=False)),
    Slip("no feed-forward", Diagnosis("the feed-forward sublayer is missing:",
                                      "after self-attention comes LayerNorm(y + dropout(ffn(y)))"), dict(ffn=False)),
    Slip("pre-LN", _PRE_LN_HERE, lambda p: (lambda y: y + p.ff(p.n2(y)))(p.x + p.sa(p.n1(p.x)))),
    Slip("no LayerNorm", _NO_NORM, lambda p: (lambda y: y + p.ff(y))(p.x + p.sa(p.x))),
    Slip("LayerNorm inside", _NORM_INSIDE, lambda p: (lambda y: y + p.n2(p.ff(y)))(p.x + p.n1(p.sa(p.x)))),
    Slip("sublayers swapped", Diagnosis("the sublayers are in the wrong order:",
                                        "self-attention comes first, then the feed-forward network"),
         lambda p: (lambda y: p.n2(y + p.sa(y)))(p.n1(p.x + p.ff(p.x)))),
    Slip("gelu", _GELU, dict(act=F.gelu)),
    Slip("gelu tanh", _GELU, dict(act=lambda h: F.gelu(h, approximate="tanh"))),
    Slip("self-attention pre-LN", _one_pre_ln("self_attn", "norm1"),
         lambda p: (lambda y: p.n2(y + p.ff(y)))(p.x + p.sa(p.n1(p.x)))),
    Slip("feed-forward pre-LN", _one_pre_ln("feed_forward", "norm2"),
         lambda p: (lambda y: y + p.ff(p.n2(y)))(p.n1(p.x + p.sa(p.x)))),
)


def _post_ln_decoder(p: Pieces, res: tuple = (1, 1, 1), query_x: bool = False, ffn: bool = True,
                     act: Callable = torch.relu, kv_norm: str = "") -> torch.Tensor:
    """The post-LN decoder layer over a twin's pieces; each flag is one known slip. (A mask not used, or keys and
    values not read from memory, are named earlier by what the layer must do: hide, be causal, read memory.)"""
    x, memory = p.x, p.memory
    y1 = p.n1((x if res[0] else 0) + p.sa(x))
    kv = getattr(p, kv_norm)(memory) if kv_norm else memory
    y2 = p.n2((y1 if res[1] else 0) + p.ca(x if query_x else y1, kv))
    return p.n3((y2 if res[2] else 0) + p.ff(y2, act)) if ffn else y2


def _one_pre_ln_decoder(p: Pieces, i: int) -> torch.Tensor:
    """Sublayer ``i`` pre-LN, the others post-LN."""
    x, memory = p.x, p.memory
    y1 = x + p.sa(p.n1(x)) if i == 0 else p.n1(x + p.sa(x))
    y2 = y1 + p.ca(p.n2(y1), memory) if i == 1 else p.n2(y1 + p.ca(y1, memory))
    return y2 + p.ff(p.n3(y2)) if i == 2 else p.n3(y2 + p.ff(y2))


def _memory_normalised(norm: str) -> Slip:
    return Slip(f"memory through {norm}", Diagnosis(
        f"memory goes through {norm} before the cross-attention reads it:",
        "the encoder's output is already normalised (each encoder layer ends with a LayerNorm), so use it as it is: "
        "cross_attn(x, memory, memory, src_mask)"), dict(kv_norm=f"n{norm[-1]}"))


#: the known wrong post-LN decoder layers, tried in order once the values differ
DECODER_SLIPS = (
    *(_memory_normalised(norm) for norm in ("norm1", "norm2", "norm3")),
    Slip("query from the input", Diagnosis(
        "the cross-attention query is the layer's input instead of the output of the first sublayer",
        "(the query must be the result of the masked self-attention sublayer)"), dict(query_x=True)),
    *DECODER_RESIDUAL_SLIPS,
    Slip("no residuals", _NO_RESIDUALS, dict(res=(0, 0, 0))),
    Slip("no feed-forward", Diagnosis("the feed-forward sublayer is missing:",
                                      "the third sublayer is LayerNorm(y + dropout(ffn(y)))"), dict(ffn=False)),
    Slip("pre-LN", _PRE_LN_HERE, lambda p: (lambda y2: y2 + p.ff(p.n3(y2)))(
        (lambda y1: y1 + p.ca(p.n2(y1)))(p.x + p.sa(p.n1(p.x))))),
    Slip("no LayerNorm", _NO_NORM, lambda p: (lambda y2: y2 + p.ff(y2))((lambda y1: y1 + p.ca(y1))(p.x + p.sa(p.x)))),
    Slip("LayerNorm inside", _NORM_INSIDE, lambda p: (lambda y2: y2 + p.n3(p.ff(y2)))(
        (lambda y1: y1 + p.n2(p.ca(y1)))(p.x + p.n1(p.sa(p.x))))),
    Slip("sublayers out of order", Diagnosis(
        "the sublayers are in the wrong order:",
        "masked self-attention first, then cross-attention, then the feed-forward network"),
        lambda p: (lambda y2: p.n3(y2 + p.ff(y2)))((lambda y1: p.n2(y1 + p.sa(y1)))(p.n1(p.x + p.ca(p.x))))),
    Slip("gelu", _GELU, dict(act=F.gelu)),
    Slip("gelu tanh", _GELU, dict(act=lambda h: F.gelu(h, approximate="tanh"))),
    *(Slip(f"{name} pre-LN", _one_pre_ln(name, norm), lambda p, i=i: _one_pre_ln_decoder(p, i))
      for i, (name, norm) in enumerate((("self_attn", "norm1"), ("cross_attn", "norm2"), ("feed_forward", "norm3")))),
)


def layer_components() -> dict[str, tuple[Callable, str]]:
    """The components a lesson 05 or 09 layer is made of, with their checkers (blamed first)."""
    from .multi_head import check_multi_head_attention

    attention = (check_multi_head_attention, "MultiHeadAttention")
    return {"self_attn": attention, "cross_attn": attention, "feed_forward": (check_feed_forward, "FeedForward")}


POST_LN = Wiring(
    norm_first=False, names={"encoder": "EncoderLayer", "decoder": "DecoderLayer"},
    sublayer=_POST_LN, self_attn="self_attn(x, x, x, {mask})",
    cross_attn="cross_attn(x, memory, memory, src_mask)",
    hints={"encoder": "Expected nn.TransformerEncoderLayer (post-LN, ReLU) with your weights: "
                      "y = LayerNorm(x + dropout(self_attn(x, x, x, mask))), out = LayerNorm(y + dropout(ffn(y))).",
           "decoder": "Expected nn.TransformerDecoderLayer (post-LN, ReLU) with your weights: "
                      "y1 = LayerNorm(x + self_attn(x, x, x, tgt_mask)), y2 = LayerNorm(y1 + cross_attn(y1, memory, "
                      "memory, src_mask)), out = LayerNorm(y2 + ffn(y2)) (dropout on each sublayer output)."},
    slips={"encoder": ENCODER_SLIPS, "decoder": DECODER_SLIPS},
    wrong={"encoder": _post_ln_encoder, "decoder": _post_ln_decoder},
    components=layer_components, own_norm=own_norm_problem,
    whose="paper's", reads="x before the sublayer reads it", names_why=". Lesson 07 copies each LayerNorm by its name.",
    read_note="each sublayer works on the output of the previous one.",
    residual_note="{norm}(y + dropout({sub}(y, ...))) adds back the very tensor the sublayer received.",
    wired="{norms} close the sublayers in order, each residual adds back the sublayer's own input")


def _encoder_layer(check: Check, EncoderLayer: type[nn.Module]) -> None:
    encoder_layer_stages(check, EncoderLayer, POST_LN)


def _decoder_layer(check: Check, DecoderLayer: type[nn.Module]) -> None:
    decoder_layer_stages(check, DecoderLayer, POST_LN)


FEED_FORWARD = Exercise(
    "FeedForward", _check_feed_forward,
    oracle="relu(x W1 + b1) W2 + b2 with the module's own two matrices, in float64",
    cases="FeedForward(16, 24): a (3, 5, 16) input drawn from seed 0, shuffled and changed positions, the input x 40; "
          "FeedForward(16, 8, dropout=0.3) for the dropout on the hidden activations",
    slips=FFN_SLIPS, answer=_as_feed_forward)

ENCODER_LAYER = Exercise(
    "EncoderLayer", _encoder_layer,
    oracle="nn.TransformerEncoderLayer (post-LN, ReLU, float64) carrying the learner's weights",
    cases="d_model 16, 4 heads, d_ff 24: x (2, 5, 16) with the last two positions of sentence 1 padded; "
          "then 1 head, d_model 20, d_ff 36 on sentences of 64 tokens",
    slips=ENCODER_SLIPS, answer=lambda slip: slipped_layer(POST_LN, "encoder", slip))

DECODER_LAYER = Exercise(
    "DecoderLayer", _decoder_layer,
    oracle="nn.TransformerDecoderLayer (post-LN, ReLU, float64) carrying the learner's weights",
    cases="d_model 16, 4 heads, d_ff 24: x (2, 4, 16), memory (2, 6, 16) with two padded memory positions, a causal "
          "tgt_mask; then 1 head, d_model 20, d_ff 36, 64 target and 70 memory tokens",
    slips=DECODER_SLIPS, answer=lambda slip: slipped_layer(POST_LN, "decoder", slip))
