"""Checkers for lesson 09 (ablations): LearnedPositionalEncoding, PreLNEncoderLayer, PreLNDecoderLayer.

Each catalogue is a reference class and variants of it that change one thing. The correct ones also run
through lesson 09 in tests/test_downstream.py.
"""

from __future__ import annotations

import functools
import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import expect
from course_utils.checks.ablation import (check_learned_positional_encoding, check_pre_ln_decoder_layer,
                                          check_pre_ln_encoder_layer)
from reference_modules import (DecoderLayer, EinsumAttention, EncoderLayer, FeedForward,
                               FusedAttention, MultiHeadAttention, OwnLayerNorm)


def variant(base, name=None, init=None, **methods):
    """``base`` with ``methods`` replaced; ``init(self, **arguments)`` runs after its __init__ (same signature)."""
    def __init__(self, *args, **kwargs):
        base.__init__(self, *args, **kwargs)
        bound = inspect.signature(base).bind(*args, **kwargs)
        bound.apply_defaults()
        init(self, **bound.arguments)

    return type(name or base.__name__, (base,), dict(methods, **{"__init__": functools.wraps(base.__init__)(
        __init__)} if init else {}))


_ARGS = {"attn": ("d_model", "num_heads", "dropout"), "norm": ("d_model",), "feed": ("d_model", "d_ff", "dropout"),
         "drop": ("dropout",)}


def parts(*order, **classes):
    """An ``init``: each named part becomes its class, built with the constructor's arguments for its kind; then the
    submodules named in ``order`` are registered again, last, in that order."""
    def init(s, **a):
        for name, cls in classes.items():
            setattr(s, name, cls(*(a[k] for k in next(v for p, v in _ARGS.items() if p in name))))
        for name in order:
            s.add_module(name, s._modules.pop(name))
    return init


RMSNorm = variant(OwnLayerNorm, "RMSNorm", forward=lambda s, x: s.gain * x * torch.rsqrt(x.pow(2).mean(-1, True) + 1e-6)
                  + s.shift)
PositionNorm = variant(OwnLayerNorm, "PositionNorm", forward=lambda s, x: s.gain * (x - x.mean(1, True)) / torch.sqrt(
    x.var(1, keepdim=True, unbiased=False) + s.eps) + s.shift)  # over the positions (dim 1), not the features
AnnotatedNorm = variant(OwnLayerNorm, "AnnotatedNorm", forward=lambda s, x: s.gain * (x - x.mean(-1, True)) / (
    x.std(-1, keepdim=True) + 1e-6) + s.shift)  # the Annotated Transformer's: unbiased std, eps added to it
CentredNorm = variant(OwnLayerNorm, "CentredNorm", forward=lambda s, x: s.gain * (x - x.mean(-1, True)) * torch.rsqrt(
    (x - x.mean(-1, True)).pow(2).mean(-1, True) + s.eps) + s.shift)  # nn.LayerNorm's statistics, written out
InvertedMaskAttention = variant(MultiHeadAttention, "InvertedMaskAttention", forward=lambda s, q, k, v, mask=None:
                                MultiHeadAttention.forward(s, q, k, v, None if mask is None else ~mask))
NoAffineNorm = functools.partial(nn.LayerNorm, elementwise_affine=False)


def _output_norm(s, x, *args):  # the stack's final LayerNorm put inside every layer
    return s.final_norm(super(type(s), s).forward(x, *args))


# --------------------------------------------------------------------------
# LearnedPositionalEncoding


class LearnedPositionalEncoding(nn.Module):
    """The lesson's way: a small random table, sliced to the input's length."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.pe = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


def lpe(forward=None, init=None, name=None):
    return variant(LearnedPositionalEncoding, name, init, **({"forward": forward} if forward else {}))


def table(make, keep=True):
    """An ``init``: ``pe`` becomes ``make(max_len, d_model)``, an nn.Parameter unless ``keep`` is False."""
    return lambda s, d_model, max_len, **_: (delattr(s, "pe"), setattr(s, "pe", (nn.Parameter if keep else (
        lambda t: t))(make(max_len, d_model))))


_SHARED = nn.Parameter(torch.randn(40, 16) * 0.02)

CORRECT_LEARNED_POSITIONS = [  # zeros: a no-op at first, yet every row receives its own gradient
    LearnedPositionalEncoding, lpe(init=table(torch.zeros), name="ZeroInitLearnedPositions"),
    lpe(lambda s, x: s.dropout(x + F.embedding(torch.arange(x.size(1), device=x.device), s.pe)[None]),
        table(lambda n, d: nn.init.normal_(torch.empty(n, d), std=0.02)), "LookupLearnedPositions"),
    lpe(lambda s, x: s.dropout(torch.add(x, s.pe.narrow(0, 0, x.size(1)).expand_as(x))),
        table(lambda n, d: nn.init.xavier_uniform_(torch.empty(n, d))), "NarrowLearnedPositions"),
    lpe(lambda s, x: s.dropout((x.double() + s.pe[: x.size(1)].double()).to(x.dtype)),
        lambda s, **_: nn.init.trunc_normal_(s.pe, std=0.02), "Float64LearnedPositions"),
]


@pytest.mark.parametrize("impl", CORRECT_LEARNED_POSITIONS)
def test_learned_positional_encoding_accepts_correct_variants(impl):
    expect(check_learned_positional_encoding(impl), "passed")


WRONG_LEARNED_POSITIONS = {
    "starts as loud as the words": (lpe(init=table(lambda n, d: nn.init.normal_(torch.empty(n, d)))),
                                    ["spread 1.", "torch.randn(max_len, d_model) * 0.02"]),
    "a buffer, not learned": (lpe(init=lambda s, d_model, max_len, **_: (delattr(s, "pe"), s.register_buffer("pe", torch.randn(
        max_len, d_model)))), ["registered buffer", "nothing ever learns it"]),
    "a plain tensor attribute": (lpe(init=table(torch.randn, keep=False)), ["plain tensor attribute", "not registered"]),
    "an nn.Embedding named pe": (lpe(init=table(nn.Embedding, keep=False)), ["`pe` = nn.Embedding", "`pe.weight`"]),
    "the table under another name": (lpe(lambda s, x: s.dropout(x + s.table[: x.size(1)]), lambda s, **_: setattr(
        s, "table", s._parameters.pop("pe"))), ["no parameter `pe`", "its parameter `table`", "under another name"]),
    "requires_grad=False": (lpe(init=lambda s, **_: s.pe.requires_grad_(False)), ["requires_grad=False", "never learns"]),
    "table transposed": (lpe(lambda s, x: s.dropout(x + s.pe[:, : x.size(1)].T), table(lambda n, d: torch.randn(d, n))),
                         ["looks transposed"]),
    "a fixed number of rows": (lpe(init=table(lambda n, d: torch.randn(512, d))), ["(512, 16)", "constructor's arguments"]),
    "uninitialised (torch.empty)": (lpe(init=table(lambda n, d: torch.full((n, d), 1e30))), ["never initialised", "empty"]),
    "a float64 table": (lpe(init=table(lambda n, d: torch.randn(n, d, dtype=torch.float64))), ["torch.float64", "float32"]),
    "one table shared by every instance": (lpe(init=lambda s, **_: setattr(s, "pe", _SHARED)), ["share one table"]),
    "indexing by the batch": (lpe(lambda s, x: s.dropout(x + s.pe[: x.size(0)].unsqueeze(1))), ["with the batch size"]),
    "the whole table, not sliced": (lpe(lambda s, x: s.dropout(x + s.pe)), ["adds the whole table"]),
    "shifted by one position": (lpe(lambda s, x: s.dropout(x + s.pe[1: x.size(1) + 1])), ["shifted by one position"]),
    "a copy made in __init__": (lpe(lambda s, x: s.dropout(x + s.table[: x.size(1)]), lambda s, **_: setattr(
        s, "table", s.pe.detach().clone())), ["copy made in __init__"]),
    "the table ignored": (lpe(lambda s, x: s.dropout(x)), ["does not add the table"]),
    "the table ignored, zero-initialised": (lpe(lambda s, x: s.dropout(x), table(torch.zeros)), ["does not add the table"]),
    "x forgotten": (lpe(lambda s, x: s.dropout(s.pe[: x.size(1)].expand_as(x))), ["returns the table alone"]),
    "the table scaled by sqrt(d_model)": (lpe(lambda s, x: s.dropout(x + s.pe[: x.size(1)] * math.sqrt(x.size(-1)))),
                                          ["multiplies the table by sqrt(d_model)"]),
    "the table scaled, zero-initialised": (lpe(lambda s, x: s.dropout(x + s.pe[: x.size(1)] * math.sqrt(x.size(-1))),
                                               table(torch.zeros)), ["multiplies the table by sqrt(d_model)"]),
    "scaled by sqrt(d_model)": (lpe(lambda s, x: s.dropout(x * math.sqrt(x.size(-1)) + s.pe[: x.size(1)])), ["sqrt(d_model)"]),
    "detached in forward": (lpe(lambda s, x: s.dropout(x + s.pe[: x.size(1)].detach())), ["gradient with respect to pe", "detach()"]),
    "no dropout": (lpe(lambda s, x: x + s.pe[: x.size(1)]), ["applies no dropout on x + pe[:L]"]),
    "dropout before adding the table": (lpe(lambda s, x: s.dropout(x) + s.pe[: x.size(1)]), ["to x before adding the table"]),
    "dropout in eval mode too": (lpe(lambda s, x: F.dropout(x + s.pe[: x.size(1)], s.dropout.p)), ["in eval mode"]),
    "dropout rate hard-coded": (lpe(init=lambda s, **_: setattr(s, "dropout", nn.Dropout(0.1))),
                                ["is nn.Dropout(p=0.1), where it was built with dropout=0.0"]),
    "F.dropout, no dropout submodule": (lpe(lambda s, x: F.dropout(x + s.pe[: x.size(1)], s.p, training=s.training),
                                            lambda s, dropout, **_: (delattr(s, "dropout"), setattr(s, "p", dropout))),
                                        ["no submodule `dropout`"]),
    "other defaults": (type("NoDefaults", (LearnedPositionalEncoding,), {"__init__": lambda s, d_model, dropout=0.0,
                            max_len=512: LearnedPositionalEncoding.__init__(s, d_model, dropout, max_len)}),
                       ["defaults", "dropout=0.1", "max_len=5000"]),
}


@pytest.mark.parametrize("name", WRONG_LEARNED_POSITIONS)
def test_learned_positional_encoding_diagnoses(name):
    impl, phrases = WRONG_LEARNED_POSITIONS[name]
    expect(check_learned_positional_encoding(impl), "failed", *phrases)


def test_learned_positional_encoding_leaves_its_argument_alone():
    before = dict(vars(LearnedPositionalEncoding))
    check_learned_positional_encoding(LearnedPositionalEncoding)
    assert dict(vars(LearnedPositionalEncoding)) == before


# --------------------------------------------------------------------------
# PreLNEncoderLayer


class PreLNEncoderLayer(nn.Module):
    """x + dropout(sublayer(LayerNorm(x))), twice; the attention drops its weights too. ``steps`` is its forward,
    or the forward with one thing changed."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        return self.steps(x, mask)

    def steps(self, x, mask, drop="output", n1=None, n2=None):
        """The forward with its dropout elsewhere (``drop``) or its LayerNorms swapped (the slips of the wiring itself
        are written out below, as a learner would)."""
        sa, n1, n2, d = self.self_attn, n1 or self.norm1, n2 or self.norm2, {"none": nn.Identity()}.get(drop, self.dropout)
        ff, h = self.feed_forward, n1(x)
        if drop == "sum":
            return (lambda y: d(y + ff(n2(y))))(d(x + sa(h, h, h, mask)))
        if drop == "input":
            return (lambda y: y + ff(d(n2(y))))(x + sa(d(h), d(h), d(h), mask))
        y = x + d(sa(h, h, h, mask))
        return y + d(ff(n2(y)))


def _residual_normalised_encoder(s, x, m=None):
    h = s.norm1(x)
    y = h + s.dropout(s.self_attn(h, h, h, m))
    g = s.norm2(y)
    return g + s.dropout(s.feed_forward(g))


def _raw_keys_encoder(s, x, m=None):
    h = s.norm1(x)
    y = x + s.dropout(s.self_attn(h, x, x, m))
    return y + s.dropout(s.feed_forward(s.norm2(y)))


def _no_attention_residual_encoder(s, x, m=None):
    h = s.norm1(x)
    y = s.dropout(s.self_attn(h, h, h, m))
    return y + s.dropout(s.feed_forward(s.norm2(y)))


def _no_ffn_residual_encoder(s, x, m=None):
    h = s.norm1(x)
    y = x + s.dropout(s.self_attn(h, h, h, m))
    return s.dropout(s.feed_forward(s.norm2(y)))


def _norm_on_the_output_encoder(s, x, m=None):
    y = x + s.norm1(s.self_attn(x, x, x, m))
    return y + s.norm2(s.feed_forward(y))


def _ffn_first_encoder(s, x, m=None):
    y = x + s.dropout(s.feed_forward(s.norm1(x)))
    g = s.norm2(y)
    return y + s.dropout(s.self_attn(g, g, g, m))


def _gelu_encoder(s, x, m=None):
    h = s.norm1(x)
    y = x + s.dropout(s.self_attn(h, h, h, m))
    f = s.feed_forward
    return y + s.dropout(f.linear2(f.dropout(F.gelu(f.linear1(s.norm2(y))))))


def _fused_encoder(s, x, mask=None):  # keyword calls, the residual on the right
    h = s.norm1(x)
    x = s.dropout(s.self_attn(query=h, key=h, value=h, mask=mask)) + x
    return s.dropout(s.feed_forward(s.norm2(x))) + x


def _helper_encoder(s, x, mask=None):  # one helper for both sublayers
    return s.sublayer(s.sublayer(x, s.norm1, lambda h: s.self_attn(h, h, h, mask)), s.norm2, s.feed_forward)


CORRECT_ENCODER_LAYERS = [
    PreLNEncoderLayer, variant(PreLNEncoderLayer, "FusedPreLNEncoderLayer", parts(
        self_attn=FusedAttention), forward=_fused_encoder),
    variant(PreLNEncoderLayer, "OwnNormPreLNEncoderLayer", parts(norm1=OwnLayerNorm, norm2=OwnLayerNorm),
            forward=lambda s, x, mask=None: (lambda y: y + s.dropout(s.feed_forward(s.norm2(y))))(  # norm1 thrice
                x + s.dropout(s.self_attn(s.norm1(x), s.norm1(x), s.norm1(x), mask)))),
    variant(PreLNEncoderLayer, "HelperPreLNEncoderLayer", parts(  # norms registered first, in reverse order
        "norm1", "self_attn", "feed_forward", "dropout", self_attn=EinsumAttention), forward=_helper_encoder,
        sublayer=lambda s, x, norm, fn: x + s.dropout(fn(norm(x)))),
    variant(PreLNEncoderLayer, "FusedAttentionPreLNEncoderLayer", parts(self_attn=FusedAttention)),
]


@pytest.mark.parametrize("impl", CORRECT_ENCODER_LAYERS)
def test_pre_ln_encoder_layer_accepts_correct_variants(impl):
    result = check_pre_ln_encoder_layer(impl)  # compared with PyTorch's layer
    assert result.passed and "matches nn.TransformerEncoderLayer(..., norm_first=True) carrying your weights" in result.checked


def enc(init=None, forward=None, **change):
    """A PreLNEncoderLayer with parts changed (``init``), another forward, or its steps called with ``change``."""
    forward = forward or (lambda s, x, m=None: s.steps(x, m, **change)) if change or forward else None
    return variant(PreLNEncoderLayer, init=init, **({"forward": forward} if forward else {}))


WRONG_ENCODER_LAYERS = {
    "post-LN (lesson 05's layer)": (EncoderLayer, ["this is post-LN", "x + dropout(sublayer(LayerNorm(x)))"]),
    "the residual normalised too": (enc(forward=_residual_normalised_encoder), ["adds the normalised stream LayerNorm(x) instead of x itself"]),
    "keys and values not normalised": (enc(forward=_raw_keys_encoder), ["keys and values of the self-attention read x itself"]),
    "a LayerNorm on the output of every layer": (enc(parts(final_norm=nn.LayerNorm), _output_norm),
                                                 ["normalises its own output", "after its last layer"]),
    "no residual around self-attention": (enc(forward=_no_attention_residual_encoder), ["residual connection around self-attention is missing"]),
    "no residual around the feed-forward network": (enc(forward=_no_ffn_residual_encoder), ["around the feed-forward network is missing"]),
    "mask ignored": (enc(forward=lambda s, x, m=None: s.steps(x, None)), ["hidden by the mask"]),
    "norm on the sublayer's output": (enc(forward=_norm_on_the_output_encoder), ["normalises the sublayer's output"]),
    "no LayerNorm used": (enc(n1=nn.Identity(), n2=nn.Identity()), ["there is no LayerNorm"]),
    "feed-forward first": (enc(forward=_ffn_first_encoder), ["wrong order"]),
    "norm1 used twice": (enc(forward=lambda s, x, m=None: s.steps(x, m, n2=s.norm1)),
                         ["same LayerNorm for two sublayers", "copy-paste"]),
    "one LayerNorm module shared": (enc(lambda s, **_: (delattr(s, "norm2"), setattr(s, "norm2", s.norm1))),
                                    ["1 LayerNorm for its 2 sublayers", "shared between sublayers"]),
    "norms swapped": (enc(forward=lambda s, x, m=None: s.steps(x, m, n1=s.norm2, n2=s.norm1)),
                      ["opens its sublayers with `norm2`, `norm1`"]),
    "dropout on the residual sum": (enc(drop="sum"), ["wrong place", "drops the residual stream"]),
    "dropout on the sublayer's input": (enc(drop="input"), ["applies dropout to the input of self-attention"]),
    "dropout on the layer's output": (enc(forward=lambda s, x, m=None: s.dropout(s.steps(x, m))), ["wrong place"]),
    "F.dropout with a rate stored at construction": (enc(lambda s, dropout, **_: setattr(s, "p", dropout), forward=lambda s, x,
        m=None: (lambda y: y + F.dropout(s.feed_forward(s.norm2(y)), s.p, s.training))(
            x + F.dropout(s.self_attn(s.norm1(x), s.norm1(x), s.norm1(x), m), s.p, s.training))),
        ["stays deterministic", "lesson 08", "read its `.p`"]),
    "a second dropout for the feed-forward sublayer": (enc(parts(drop2=nn.Dropout), forward=lambda s, x, m=None: (
        lambda y: y + s.drop2(s.feed_forward(s.norm2(y))))(x + s.dropout(s.self_attn(s.norm1(x), s.norm1(x),
                                                                                      s.norm1(x), m)))),
        ["the output of `feed_forward`", "`dropout`"]),
    "no dropout": (enc(lambda s, **a: PreLNEncoderLayer.__init__(s, **dict(a, dropout=0.0))), ["dropout is not applied"]),
    "dropout only inside the sublayers": (enc(drop="none"), ["applies no dropout on the output of self-attention"]),
    "a causal mask in the encoder": (enc(forward=lambda s, x, m=None: s.steps(x, torch.ones(
        x.size(1), x.size(1), dtype=torch.bool).tril() & (True if m is None else m))), ["causal mask"]),
    "mask on the query axis": (enc(forward=lambda s, x, m=None: s.steps(x, None if m is None else m.mT)),
                               ["NaN", "hides queries instead"]),
    "mask polarity inverted": (enc(parts(self_attn=InvertedMaskAttention)), ["InvertedMaskAttention", "fix that first"]),
    "GELU": (enc(forward=_gelu_encoder), ["GELU"]),
    "LayerNorm without gain and bias": (enc(parts(norm1=NoAffineNorm, norm2=NoAffineNorm)), ["no learned gain and bias"]),
    "RMSNorm": (enc(parts(norm1=RMSNorm, norm2=RMSNorm)), ["`norm1`", "does not subtract the mean", "RMSNorm"]),
    "the Annotated Transformer's norm": (enc(parts(norm1=AnnotatedNorm, norm2=AnnotatedNorm)),
                                         ["`norm1`", "d_model - 1", "Bessel"]),
    "norm over the positions": (enc(parts(norm1=PositionNorm, norm2=PositionNorm)), ["normalises over the positions"]),
    "norms under other names": (enc(lambda s, **_: [s.add_module(new, s._modules.pop(old)) for old, new in (
        ("norm1", "ln_attn"), ("norm2", "ln_ffn"))], lambda s, x, m=None: s.steps(x, m, n1=s.ln_attn, n2=s.ln_ffn)),
        ["no submodules `norm1`, `norm2`"]),
    "an unused module": (enc(lambda s, d_model, **_: setattr(s, "extra", nn.Linear(d_model, d_model))),
                         ["receive no gradient", "`extra.weight`"]),
    # a fifth hidden set: one sublayer wired as in lesson 05
    "the feed-forward sublayer post-LN": (enc(forward=lambda s, x, m=None: (lambda y: s.norm2(
        y + s.dropout(s.feed_forward(y))))(x + s.dropout(s.self_attn(s.norm1(x), s.norm1(x), s.norm1(x), m)))),
        ["the feed_forward sublayer is post-LN", "y + dropout(feed_forward(norm2(y)))"]),
    "the self-attention sublayer post-LN": (enc(forward=lambda s, x, m=None: (lambda y: y + s.dropout(
        s.feed_forward(s.norm2(y))))(s.norm1(x + s.dropout(s.self_attn(x, x, x, m))))),
        ["the self_attn sublayer is post-LN"]),
    # a sixth hidden set
    "the feed-forward network reads norm2 of the first sublayer's input": (enc(forward=lambda s, x, m=None: (
        lambda h: (x + s.dropout(s.self_attn(h, h, h, m))) + s.dropout(s.feed_forward(s.norm2(h))))(s.norm1(x))),
        ["reads feed_forward(norm2(h))"]),
    "the feed-forward network reads norm2 of the layer's input": (enc(forward=lambda s, x, m=None: (
        x + s.dropout(s.self_attn(s.norm1(x), s.norm1(x), s.norm1(x), m))) + s.dropout(s.feed_forward(s.norm2(x)))),
        ["reads feed_forward(norm2(x))", "y + dropout(feed_forward(norm2(y)))"]),
}


@pytest.mark.parametrize("name", WRONG_ENCODER_LAYERS)
def test_pre_ln_encoder_layer_diagnoses(name):
    impl, phrases = WRONG_ENCODER_LAYERS[name]
    expect(check_pre_ln_encoder_layer(impl), "failed", *phrases)


# --------------------------------------------------------------------------
# PreLNDecoderLayer


class PreLNDecoderLayer(nn.Module):
    """Pre-LN masked self-attention, cross-attention (memory as it is) and feed-forward. ``steps`` is its forward,
    or the forward with one thing changed."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return self.steps(x, memory, src_mask, tgt_mask)

    def steps(self, x, memory, src_mask, tgt_mask, drop_memory=False, norms=(0, 1, 2), drop=True):
        """The forward with its LayerNorms in another order, memory dropped, or no dropout on the sublayers' outputs
        (the slips of the wiring itself are written out below, as a learner would)."""
        d = self.dropout if drop else nn.Identity()
        n1, n2, n3 = ((self.norm1, self.norm2, self.norm3)[i] for i in norms)
        h = n1(x)
        y = x + d(self.self_attn(h, h, h, tgt_mask))
        source = self.dropout(memory) if drop_memory else memory
        y = y + d(self.cross_attn(n2(y), source, source, src_mask))
        return y + d(self.feed_forward(n3(y)))


def _residuals_normalised_decoder(s, x, memory, src_mask=None, tgt_mask=None):
    h = s.norm1(x)
    y = h + s.dropout(s.self_attn(h, h, h, tgt_mask))
    q = s.norm2(y)
    y = q + s.dropout(s.cross_attn(q, memory, memory, src_mask))
    g = s.norm3(y)
    return g + s.dropout(s.feed_forward(g))


def _memory_normalised_decoder(s, x, memory, src_mask=None, tgt_mask=None):
    h = s.norm1(x)
    y = x + s.dropout(s.self_attn(h, h, h, tgt_mask))
    kv = s.norm2(memory)
    y = y + s.dropout(s.cross_attn(s.norm2(y), kv, kv, src_mask))
    return y + s.dropout(s.feed_forward(s.norm3(y)))


def _raw_query_decoder(s, x, memory, src_mask=None, tgt_mask=None):
    h = s.norm1(x)
    y = x + s.dropout(s.self_attn(h, h, h, tgt_mask))
    y = y + s.dropout(s.cross_attn(y, memory, memory, src_mask))
    return y + s.dropout(s.feed_forward(s.norm3(y)))


def _raw_self_keys_decoder(s, x, memory, src_mask=None, tgt_mask=None):
    h = s.norm1(x)
    y = x + s.dropout(s.self_attn(h, x, x, tgt_mask))
    y = y + s.dropout(s.cross_attn(s.norm2(y), memory, memory, src_mask))
    return y + s.dropout(s.feed_forward(s.norm3(y)))


def _cross_over_its_own_stream_decoder(s, x, memory, src_mask=None, tgt_mask=None):
    h = s.norm1(x)
    y = x + s.dropout(s.self_attn(h, h, h, tgt_mask))
    q = s.norm2(y)
    y = y + s.dropout(s.cross_attn(q, q, q, tgt_mask))  # memory is never read
    return y + s.dropout(s.feed_forward(s.norm3(y)))


def _no_cross_residual_decoder(s, x, memory, src_mask=None, tgt_mask=None):
    h = s.norm1(x)
    y = x + s.dropout(s.self_attn(h, h, h, tgt_mask))
    y = s.dropout(s.cross_attn(s.norm2(y), memory, memory, src_mask))
    return y + s.dropout(s.feed_forward(s.norm3(y)))


def _no_self_residual_decoder(s, x, memory, src_mask=None, tgt_mask=None):
    h = s.norm1(x)
    y = s.dropout(s.self_attn(h, h, h, tgt_mask))
    y = y + s.dropout(s.cross_attn(s.norm2(y), memory, memory, src_mask))
    return y + s.dropout(s.feed_forward(s.norm3(y)))


def _fused_decoder(s, x, memory, src_mask=None, tgt_mask=None):  # keyword calls
    h = s.norm1(x)
    x = x + s.dropout(s.self_attn(query=h, key=h, value=h, mask=tgt_mask))
    x = x + s.dropout(s.cross_attn(query=s.norm2(x), key=memory, value=memory, mask=src_mask))
    return x + s.dropout(s.feed_forward(s.norm3(x)))


def _loop_decoder(s, x, memory, src_mask=None, tgt_mask=None):  # a loop over the sublayers
    for norm, sublayer in [(s.norm1, lambda h: s.self_attn(h, h, h, tgt_mask)),
                           (s.norm2, lambda h: s.cross_attn(h, memory, memory, src_mask)), (s.norm3, s.feed_forward)]:
        x = x + s.dropout(sublayer(norm(x)))
    return x


def _einsum_decoder(s, x, memory, src_mask=None, tgt_mask=None):  # norm1 thrice; the residual on the right
    x = s.dropout(s.self_attn(s.norm1(x), s.norm1(x), s.norm1(x), tgt_mask)) + x
    x = s.dropout(s.cross_attn(s.norm2(x), memory, memory, src_mask)) + x
    return s.dropout(s.feed_forward(s.norm3(x))) + x


def _helper_decoder(s, x, memory, src_mask=None, tgt_mask=None):  # one helper; torch.add for the residual
    x = s.sublayer(x, s.norm1, lambda h: s.self_attn(h, h, h, mask=tgt_mask))
    x = s.sublayer(x, s.norm2, lambda h: s.cross_attn(h, memory, memory, mask=src_mask))
    return s.sublayer(x, s.norm3, s.feed_forward)


CORRECT_DECODER_LAYERS = [
    PreLNDecoderLayer, variant(PreLNDecoderLayer, "FusedPreLNDecoderLayer", parts(
        self_attn=FusedAttention, cross_attn=FusedAttention), forward=_fused_decoder),
    variant(PreLNDecoderLayer, "OwnNormPreLNDecoderLayer", parts(norm1=CentredNorm, norm2=CentredNorm,
                                                                 norm3=CentredNorm), forward=_loop_decoder),
    variant(PreLNDecoderLayer, "EinsumPreLNDecoderLayer", parts(self_attn=EinsumAttention, cross_attn=EinsumAttention),
            forward=_einsum_decoder),
    variant(PreLNDecoderLayer, "HelperPreLNDecoderLayer", parts(  # norms registered first, in reverse order
        "norm3", "norm2", "norm1", "feed_forward", "cross_attn", "self_attn", "dropout"),
        forward=_helper_decoder, sublayer=lambda s, x, norm, fn: torch.add(x, s.dropout(fn(norm(x))))),
]


@pytest.mark.parametrize("impl", CORRECT_DECODER_LAYERS)
def test_pre_ln_decoder_layer_accepts_correct_variants(impl):
    result = check_pre_ln_decoder_layer(impl)  # compared with PyTorch's layer
    assert result.passed and "matches nn.TransformerDecoderLayer(..., norm_first=True) carrying your weights" in result.checked


def dec(init=None, forward=None, **change):
    """A PreLNDecoderLayer with parts changed (``init``), another forward, or its steps called with ``change``."""
    forward = forward or (lambda s, x, m, sm=None, tgt_mask=None: s.steps(x, m, sm, tgt_mask, **change)) if change or forward else None
    return variant(PreLNDecoderLayer, init=init, **({"forward": forward} if forward else {}))


WRONG_DECODER_LAYERS = {
    "post-LN (lesson 05's layer)": (DecoderLayer, ["this is post-LN"]),
    "the residuals normalised too": (dec(forward=_residuals_normalised_decoder), ["add the normalised stream instead of the stream itself"]),
    "memory normalised by norm2": (dec(forward=_memory_normalised_decoder), ["memory is normalised by norm2", "final LayerNorm"]),
    "cross-attention query not normalised": (dec(forward=_raw_query_decoder), ["query of the cross-attention is not normalised"]),
    "self-attention keys and values not normalised": (dec(forward=_raw_self_keys_decoder), ["values of the masked self-attention read x itself"]),
    "a LayerNorm on the output of every layer": (dec(parts(final_norm=nn.LayerNorm), _output_norm), ["normalises its own output"]),
    "target mask ignored": (dec(forward=lambda s, x, m, sm=None, tgt_mask=None: s.steps(x, m, sm, None)), ["can see the future"]),
    "source mask ignored": (dec(forward=lambda s, x, m, sm=None, tgt_mask=None: s.steps(x, m, None, tgt_mask)), ["hidden by src_mask"]),
    "masks swapped": (dec(forward=lambda s, x, m, sm=None, tgt_mask=None: s.steps(x, m, tgt_mask, sm)), ["wrong way round"]),
    "own causal mask instead of tgt_mask": (dec(forward=lambda s, x, m, sm=None, tgt_mask=None: s.steps(
        x, m, sm, torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril())), ["causal mask of its own"]),
    "cross-attention over its own stream": (dec(forward=_cross_over_its_own_stream_decoder), ["does not use it"]),
    "no residual around the cross-attention": (dec(forward=_no_cross_residual_decoder), ["residual connection around the cross-attention is missing"]),
    "no residual around the masked self-attention": (
        dec(forward=_no_self_residual_decoder), ["residual connection around the masked self-attention is missing"]),
    "cross-attention first": (dec(forward=lambda s, x, m, sm=None, tgt_mask=None: (lambda y2: y2 + s.feed_forward(s.norm3(y2)))(
        (lambda y1: y1 + s.self_attn(s.norm2(y1), s.norm2(y1), s.norm2(y1), tgt_mask))(x + s.cross_attn(s.norm1(x), m, m, sm)))),
        ["wrong order"]),
    "norms in another order": (dec(norms=(0, 2, 1)), ["opens its sublayers with `norm1`, `norm3`, `norm2`"]),
    "dropout on memory": (dec(drop_memory=True), ["before the cross-attention reads memory"]),
    "dropout only inside the sublayers": (dec(drop=False), ["applies no dropout on the output of the masked self-attention"]),
    "dropout on the layer's output": (dec(forward=lambda s, *args: s.dropout(s.steps(*args))), ["wrong place"]),
    "LayerNorm without gain and bias": (dec(parts(norm1=NoAffineNorm, norm2=NoAffineNorm, norm3=NoAffineNorm)),
                                        ["no learned gain and bias"]),
    # a fifth hidden set
    "cross-attention query from the layer's normalised input": (dec(forward=lambda s, x, m, sm=None, tgt_mask=None: (
        lambda h: (lambda y: y + s.dropout(s.feed_forward(s.norm3(y))))(
            (lambda y1: y1 + s.dropout(s.cross_attn(h, m, m, sm)))(x + s.dropout(s.self_attn(h, h, h, tgt_mask)))))(
        s.norm1(x))), ["the query of the cross-attention is h = norm1(x)", "cross_attn(norm2(y)"]),
    "the cross-attention sublayer post-LN": (dec(forward=lambda s, x, m, sm=None, tgt_mask=None: (
        lambda y: y + s.dropout(s.feed_forward(s.norm3(y))))(
        (lambda y1: s.norm2(y1 + s.dropout(s.cross_attn(y1, m, m, sm))))(
            x + s.dropout(s.self_attn(s.norm1(x), s.norm1(x), s.norm1(x), tgt_mask))))),
        ["the cross_attn sublayer is post-LN", "y + dropout(cross_attn(norm2(y)))"]),
    # a sixth hidden set
    "the feed-forward network reads norm3 of the layer's input": (dec(forward=lambda s, x, m, sm=None, tgt_mask=None: (
        lambda y1: (y1 + s.dropout(s.cross_attn(s.norm2(y1), m, m, sm))) + s.dropout(s.feed_forward(s.norm3(x))))(
        x + s.dropout(s.self_attn(s.norm1(x), s.norm1(x), s.norm1(x), tgt_mask)))), ["reads feed_forward(norm3(x))"]),
    "the feed-forward network reads the stream before the cross-attention": (
        dec(forward=lambda s, x, m, sm=None, tgt_mask=None: (
            lambda y1: (y1 + s.dropout(s.cross_attn(s.norm2(y1), m, m, sm))) + s.dropout(s.feed_forward(s.norm3(y1))))(
            x + s.dropout(s.self_attn(s.norm1(x), s.norm1(x), s.norm1(x), tgt_mask)))), ["taken before the cross-attention"]),
}


@pytest.mark.parametrize("name", WRONG_DECODER_LAYERS)
def test_pre_ln_decoder_layer_diagnoses(name):
    impl, phrases = WRONG_DECODER_LAYERS[name]
    expect(check_pre_ln_decoder_layer(impl), "failed", *phrases)


# --------------------------------------------------------------------------
# Outcomes shared by the three checkers: the stub (in __init__, in forward), a crash, an input changed in place,
# an instance where the class was asked for, and no trace left.

CHECKERS = [
    (check_learned_positional_encoding, LearnedPositionalEncoding, (16,)),
    (check_pre_ln_encoder_layer, PreLNEncoderLayer, (16, 4, 24)),
    (check_pre_ln_decoder_layer, PreLNDecoderLayer, (16, 4, 24)),
]


def _stub(*args, **kwargs):
    raise NotImplementedError()


@pytest.mark.parametrize("checker, good, args", CHECKERS)
def test_outcomes_shared_by_the_checkers(checker, good, args):
    expect(checker(type("Stub", (nn.Module,), {"__init__": _stub})), "not attempted", "NotImplementedError")
    expect(checker(variant(good, forward=_stub)), "not attempted", "NotImplementedError")
    expect(checker(variant(good, forward=lambda s, x, *args, **kwargs: x @ torch.ones(3, 3))), "error", "RuntimeError")
    expect(checker(variant(good, forward=lambda s, x, *args: good.forward(s, x.mul_(2.0), *args))), "failed", "in place")
    expect(checker(good(*args)), "failed", "expected a class")
    torch.manual_seed(3)
    state = torch.get_rng_state()
    assert checker(good).passed
    assert torch.equal(state, torch.get_rng_state())


# --------------------------------------------------------------------------
# Found by a fresh hidden set of mistakes (issue 30): keyword names inherited from lesson 05's layers.


class RenamedMaskPreLNDecoderLayer(PreLNDecoderLayer):
    """tgt_mask renamed: lesson 05's DecoderLayer may not rename it (a Transformer may pass it by keyword)."""

    def forward(self, x, memory, src_mask=None, causal_mask=None):
        return self.steps(x, memory, src_mask, causal_mask)


def test_pre_ln_decoder_layer_keeps_the_keyword_names_of_lesson_05s_layer():
    expect(check_pre_ln_decoder_layer(RenamedMaskPreLNDecoderLayer), "failed", "no parameter `tgt_mask`",
           "lesson 09 puts this layer in a DecoderLayer's place")
