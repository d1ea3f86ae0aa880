"""Checkers for lesson 05 (layers): FeedForward, EncoderLayer, DecoderLayer.

The correct and wrong implementations below exist only to test the checkers.
"""

from __future__ import annotations

import math
import random
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import expect
from course_utils.checks.layers import check_decoder_layer, check_encoder_layer, check_feed_forward


# --------------------------------------------------------------------------
# Multi-head attention (the lesson 04 contract), in three styles.


class MultiHeadAttention(nn.Module):
    """Plain multi-head attention with W_q, W_k, W_v, W_o."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        if d_model % num_heads:
            raise ValueError("d_model must be divisible by num_heads")
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def split(self, t):
        B, L, _ = t.shape
        return t.view(B, L, self.num_heads, self.d_k).transpose(1, 2)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.split(self.W_q(query)), self.split(self.W_k(key)), self.split(self.W_v(value))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = self.dropout(scores.softmax(dim=-1))
        out = (weights @ v).transpose(1, 2).reshape(query.shape[0], query.shape[1], -1)
        return self.W_o(out)


class EinsumAttention(MultiHeadAttention):
    """Einsum, -1e9 instead of -inf, projections registered in another order."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        nn.Module.__init__(self)
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_o = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_q = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.split(self.W_q(query)), self.split(self.W_k(key)), self.split(self.W_v(value))
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / self.d_k**0.5
        if mask is not None:
            scores = torch.where(mask, scores, torch.full_like(scores, -1e9))
        weights = self.drop(torch.softmax(scores, -1))
        out = torch.einsum("bhqk,bhkd->bqhd", weights, v).flatten(2)
        return self.W_o(out)


class FusedAttention(MultiHeadAttention):
    """F.scaled_dot_product_attention inside."""

    def forward(self, query, key, value, mask=None):
        q, k, v = self.split(self.W_q(query)), self.split(self.W_k(key)), self.split(self.W_v(value))
        p = self.dropout.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.W_o(out.transpose(1, 2).flatten(2))


class TorchAttention(nn.Module):
    """Wraps nn.MultiheadAttention: not the contract's layout (no W_q...), still correct."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        self.inner = nn.MultiheadAttention(d_model, num_heads, dropout=dropout, batch_first=True)
        self.num_heads = num_heads

    def forward(self, query, key, value, mask=None):
        attn_mask = None
        if mask is not None:
            B, Lq, Lk = query.shape[0], query.shape[1], key.shape[1]
            attn_mask = ~mask.expand(B, self.num_heads, Lq, Lk).reshape(B * self.num_heads, Lq, Lk)
        return self.inner(query, key, value, attn_mask=attn_mask, need_weights=False)[0]


# --------------------------------------------------------------------------
# FeedForward


class FeedForward(nn.Module):
    """linear2(dropout(relu(linear1(x))))."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


class SequentialFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))

    def forward(self, x):
        return self.net(x)


class ParameterFeedForward(nn.Module):
    """Raw parameters stored (in, out), einsum, F.dropout with training=."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_in = nn.Parameter(torch.randn(d_model, d_ff) / d_model**0.5)
        self.b_in = nn.Parameter(torch.randn(d_ff) * 0.1)
        self.w_out = nn.Parameter(torch.randn(d_ff, d_model) / d_ff**0.5)
        self.b_out = nn.Parameter(torch.randn(d_model) * 0.1)
        self.p = dropout

    def forward(self, x):
        h = F.relu(torch.einsum("bld,df->blf", x, self.w_in) + self.b_in)
        h = F.dropout(h, self.p, training=self.training)
        return h @ self.w_out + self.b_out


class ReversedFeedForward(nn.Module):
    """Second layer registered first, clamp as ReLU."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.down = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)
        self.up = nn.Linear(d_model, d_ff)

    def forward(self, x):
        return F.linear(self.drop(self.up(x).clamp(min=0)), self.down.weight, self.down.bias)


def _ffn(forward, hidden=None):
    """A FeedForward with a custom forward (and optionally a hidden size that ignores d_ff)."""

    class Variant(FeedForward):
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__(d_model, hidden(d_model, d_ff) if hidden else d_ff, dropout)
            self.p = dropout

    Variant.forward = forward
    return Variant


class NoBiasFeedForward(FeedForward):
    def __init__(self, d_model, d_ff, dropout=0.0):
        nn.Module.__init__(self)
        self.linear1 = nn.Linear(d_model, d_ff, bias=False)
        self.linear2 = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)


class OneLinearFeedForward(FeedForward):
    def __init__(self, d_model, d_ff, dropout=0.0):
        nn.Module.__init__(self)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(torch.relu(self.linear1(x)))


class NoDropoutFeedForward(FeedForward):
    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class MaskDropoutFeedForward(FeedForward):
    """Bernoulli mask without the 1/(1-p) scaling."""

    def forward(self, x):
        h = torch.relu(self.linear1(x))
        if self.training:
            h = h * (torch.rand_like(h) >= self.dropout.p)
        return self.linear2(h)


WRONG_FEED_FORWARDS = {
    "no relu": (_ffn(lambda self, x: self.linear2(self.dropout(self.linear1(x)))), ["no ReLU"]),
    "gelu": (_ffn(lambda self, x: self.linear2(self.dropout(F.gelu(self.linear1(x))))), ["GELU"]),
    "relu after both": (_ffn(lambda self, x: torch.relu(self.linear2(self.dropout(torch.relu(self.linear1(x)))))), ["after the second linear layer too"]),
    "residual inside": (_ffn(lambda self, x: x + self.linear2(self.dropout(torch.relu(self.linear1(x))))), ["residual"]),
    "ignores d_ff": (_ffn(FeedForward.forward, hidden=lambda d, f: 4 * d), ["is the hidden size d_ff"]),
    "second linear missing": (OneLinearFeedForward, ["second linear layer", "missing"]),
    "no bias": (NoBiasFeedForward, ["without biases"]),
    "mixes positions": (_ffn(lambda self, x: FeedForward.forward(self, x - x.mean(dim=1, keepdim=True))), ["mixes positions"]),
    "dropout in eval": (_ffn(lambda self, x: self.linear2(F.dropout(torch.relu(self.linear1(x)), self.p))), ["eval mode"]),
    "no dropout": (NoDropoutFeedForward, ["dropout is not applied"]),
    "dropout on output": (_ffn(lambda self, x: self.dropout(FeedForward.forward(self, x))), ["after the second linear layer"]),
    "dropout on input": (_ffn(lambda self, x: FeedForward.forward(self, self.dropout(x))), ["wrong place"]),
    "unscaled dropout": (MaskDropoutFeedForward, ["1 / (1 - p)"]),
    "no return": (_ffn(lambda self, x: None), ["forget a `return`"]),
}


@pytest.mark.parametrize("impl", [FeedForward, SequentialFeedForward, ParameterFeedForward, ReversedFeedForward])
def test_feed_forward_accepts_correct_variants(impl):
    expect(check_feed_forward(impl), "passed")


@pytest.mark.parametrize("name", WRONG_FEED_FORWARDS)
def test_feed_forward_diagnoses(name):
    impl, phrases = WRONG_FEED_FORWARDS[name]
    expect(check_feed_forward(impl), "failed", *phrases)


# --------------------------------------------------------------------------
# EncoderLayer


class EncoderLayer(nn.Module):
    """Post-LN: LayerNorm(x + dropout(sublayer(x)))."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class SublayerConnection(nn.Module):
    """LayerNorm(x + dropout(sublayer(x))) as a reusable block."""

    def __init__(self, d_model, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=1e-6)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return self.norm(x + self.drop(sublayer(x)))


class BlockEncoderLayer(nn.Module):
    """Norms registered first, in a ModuleList of connection blocks; einsum attention; Sequential FFN."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.connections = nn.ModuleList([SublayerConnection(d_model, dropout) for _ in range(2)])
        self.feed = SequentialFeedForward(d_model, d_ff, dropout)
        self.attention = EinsumAttention(d_model, num_heads, dropout)

    def forward(self, x, mask=None):
        x = self.connections[0](x, lambda y: self.attention(y, y, y, mask=mask))
        return self.connections[1](x, self.feed)


class ReversedNormsEncoderLayer(EncoderLayer):
    """Fused attention; the norm registered second is used first; one dropout module per sublayer."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        nn.Module.__init__(self)
        self.ln_ffn = nn.LayerNorm(d_model)
        self.ln_attn = nn.LayerNorm(d_model)
        self.mha = FusedAttention(d_model, num_heads, dropout)
        self.ff = ReversedFeedForward(d_model, d_ff, dropout)
        self.drop_attn = nn.Dropout(dropout)
        self.drop_ffn = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        attended = self.drop_attn(self.mha(x, x, x, mask))
        x = self.ln_attn(attended + x)
        return self.ln_ffn(self.drop_ffn(self.ff(x)) + x)


class TorchAttentionEncoderLayer(EncoderLayer):
    """nn.MultiheadAttention inside: the layout cannot be matched, the properties still hold."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = TorchAttention(d_model, num_heads)


def _enc(forward):
    class Variant(EncoderLayer):
        pass

    Variant.forward = forward
    return Variant


class SharedNormEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        del self.norm2
        self.norm2 = self.norm1


class NoFeedForwardEncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        return self.norm(x + self.dropout(self.self_attn(x, x, x, mask)))


class NoNormEncoderLayer(EncoderLayer):
    def forward(self, x, mask=None):
        x = x + self.dropout(self.self_attn(x, x, x, mask))
        return x + self.dropout(self.ffn(x))


class NoNormModuleEncoderLayer(NoNormEncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        del self.norm1, self.norm2


class NoDropoutEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, 0.0)


WRONG_ENCODER_LAYERS = {
    "no residual around attention": (
        _enc(lambda self, x, mask=None: self.norm2(
            self.norm1(self.dropout(self.self_attn(x, x, x, mask)))
            + self.dropout(self.ffn(self.norm1(self.dropout(self.self_attn(x, x, x, mask))))))),
        ["residual connection around self-attention"],
    ),
    "pre-LN": (
        _enc(lambda self, x, mask=None: (lambda y: y + self.dropout(self.ffn(self.norm2(y))))(
            x + self.dropout(self.self_attn(self.norm1(x), self.norm1(x), self.norm1(x), mask)))),
        ["pre-LN"],
    ),
    "no LayerNorm": (NoNormEncoderLayer, ["there is no LayerNorm"]),
    "no LayerNorm module": (NoNormModuleEncoderLayer, ["not layer-normalised"]),
    "mask ignored": (_enc(lambda self, x, mask=None: EncoderLayer.forward(self, x, None)), ["hidden by the mask"]),
    "feed-forward missing": (NoFeedForwardEncoderLayer, ["feed-forward sublayer is missing"]),
    "shared LayerNorm": (SharedNormEncoderLayer, ["shared"]),
    "norm1 used twice": (
        _enc(lambda self, x, mask=None: (lambda y: self.norm1(y + self.dropout(self.ffn(y))))(
            self.norm1(x + self.dropout(self.self_attn(x, x, x, mask))))),
        ["same LayerNorm for two sublayers"],
    ),
    "dropout on the residual sum": (
        _enc(lambda self, x, mask=None: (lambda y: self.norm2(self.dropout(y + self.ffn(y))))(
            self.norm1(self.dropout(x + self.self_attn(x, x, x, mask))))),
        ["drops the residual"],
    ),
    "dropout after the norm": (
        _enc(lambda self, x, mask=None: (lambda y: self.dropout(self.norm2(y + self.ffn(y))))(
            self.dropout(self.norm1(x + self.self_attn(x, x, x, mask))))),
        ["exactly 0"],
    ),
    "no dropout": (NoDropoutEncoderLayer, ["dropout is not applied"]),
    "norm before the residual": (
        _enc(lambda self, x, mask=None: (lambda y: y + self.norm2(self.ffn(y)))(
            x + self.norm1(self.self_attn(x, x, x, mask)))),
        ["before the residual addition"],
    ),
    "feed-forward first": (
        _enc(lambda self, x, mask=None: (lambda y: self.norm2(y + self.self_attn(y, y, y, mask)))(
            self.norm1(x + self.ffn(x)))),
        ["wrong order"],
    ),
    "no attention mixing": (
        _enc(lambda self, x, mask=None: (lambda y: self.norm2(y + self.ffn(y)))(self.norm1(x + self.self_attn.W_o(self.self_attn.W_v(x))))),
        ["does not mix information between positions"],
    ),
}


@pytest.mark.parametrize("impl", [EncoderLayer, BlockEncoderLayer, ReversedNormsEncoderLayer, TorchAttentionEncoderLayer])
def test_encoder_layer_accepts_correct_variants(impl):
    expect(check_encoder_layer(impl), "passed")


def test_encoder_layer_says_when_only_properties_were_checked():
    result = check_encoder_layer(TorchAttentionEncoderLayer)
    assert any("could not be matched" in item for item in result.checked)
    assert any("nn.TransformerEncoderLayer" in item for item in check_encoder_layer(EncoderLayer).checked)


@pytest.mark.parametrize("name", WRONG_ENCODER_LAYERS)
def test_encoder_layer_diagnoses(name):
    impl, phrases = WRONG_ENCODER_LAYERS[name]
    expect(check_encoder_layer(impl), "failed", *phrases)


# --------------------------------------------------------------------------
# DecoderLayer


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention, feed-forward; post-LN."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, src_mask)))
        return self.norm3(x + self.dropout(self.ffn(x)))


class BlockDecoderLayer(nn.Module):
    """Cross-attention registered before self-attention; connection blocks in a ModuleList."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.src_attention = FusedAttention(d_model, num_heads, dropout)
        self.connections = nn.ModuleList(SublayerConnection(d_model, dropout) for _ in range(3))
        self.own_attention = EinsumAttention(d_model, num_heads, dropout)
        self.feed = ParameterFeedForwardLinear(d_model, d_ff, dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.connections[0](x, lambda y: self.own_attention(y, y, y, tgt_mask))
        x = self.connections[1](x, lambda y: self.src_attention(y, memory, memory, src_mask))
        return self.connections[2](x, self.feed)


class ParameterFeedForwardLinear(SequentialFeedForward):
    pass


class ShuffledNormsDecoderLayer(DecoderLayer):
    """Norms used in the order 3, 1, 2 of registration; keyword calls."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm3(x + self.dropout(self.self_attn(query=x, key=x, value=x, mask=tgt_mask)))
        x = self.norm1(x + self.dropout(self.cross_attn(query=x, key=memory, value=memory, mask=src_mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class TorchAttentionDecoderLayer(DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = TorchAttention(d_model, num_heads)
        self.cross_attn = TorchAttention(d_model, num_heads)


def _dec(forward):
    class Variant(DecoderLayer):
        pass

    Variant.forward = forward
    return Variant


def _dec_steps(self, x, memory, src_mask, tgt_mask, sa_mask="tgt", kv="memory", query="y", res=(1, 1, 1), pre=False):
    """A decoder forward with one thing changed."""
    n1, n2, n3, d = self.norm1, self.norm2, self.norm3, self.dropout
    tm = tgt_mask if sa_mask == "tgt" else None
    if pre:
        y = x + d(self.self_attn(n1(x), n1(x), n1(x), tm))
        y = y + d(self.cross_attn(n2(y), memory, memory, src_mask))
        return y + d(self.ffn(n3(y)))
    y = n1(x * res[0] + d(self.self_attn(x, x, x, tm)))
    source = memory if kv == "memory" else y
    mask = src_mask if kv == "memory" else tgt_mask
    z = n2(y * res[1] + d(self.cross_attn(y if query == "y" else x, source, source, mask)))
    return n3(z * res[2] + d(self.ffn(z)))


class SharedNormDecoderLayer(DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        del self.norm2, self.norm3
        self.norm2 = self.norm3 = self.norm1


class NoFeedForwardDecoderLayer(DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        del self.ffn

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        return self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, src_mask)))


WRONG_DECODER_LAYERS = {
    "target mask ignored": (_dec(lambda s, x, m, sm=None, tm=None: _dec_steps(s, x, m, sm, tm, sa_mask=None)), ["can see the future"]),
    "source mask ignored": (_dec(lambda s, x, m, sm=None, tm=None: _dec_steps(s, x, m, None, tm)), ["hidden by src_mask"]),
    "cross-attention over x": (_dec(lambda s, x, m, sm=None, tm=None: _dec_steps(s, x, m, sm, tm, kv="x")), ["does not use it", "memory"]),
    "memory as query": (
        _dec(lambda s, x, m, sm=None, tm=None: s.norm2(s.cross_attn(m, x, x, None))),
        ["one row per memory position"],
    ),
    "cross query from input": (_dec(lambda s, x, m, sm=None, tm=None: _dec_steps(s, x, m, sm, tm, query="x")), ["query is the layer's input"]),
    "no residual around cross-attention": (
        _dec(lambda s, x, m, sm=None, tm=None: _dec_steps(s, x, m, sm, tm, res=(1, 0, 1))),
        ["residual connection around the cross-attention"],
    ),
    "no residual around self-attention": (
        _dec(lambda s, x, m, sm=None, tm=None: _dec_steps(s, x, m, sm, tm, res=(0, 1, 1))),
        ["residual connection around the masked self-attention"],
    ),
    "pre-LN": (_dec(lambda s, x, m, sm=None, tm=None: _dec_steps(s, x, m, sm, tm, pre=True)), ["pre-LN"]),
    "feed-forward missing": (NoFeedForwardDecoderLayer, ["feed-forward sublayer is missing"]),
    "shared LayerNorm": (SharedNormDecoderLayer, ["shared"]),
    "cross-attention first": (
        _dec(lambda s, x, m, sm=None, tm=None: (lambda y: (lambda z: s.norm3(z + s.ffn(z)))(s.norm2(y + s.self_attn(y, y, y, tm))))(
            s.norm1(x + s.cross_attn(x, m, m, sm)))),
        ["wrong order"],
    ),
    "dropout on the output": (
        _dec(lambda s, x, m, sm=None, tm=None: s.dropout(_dec_steps(s, x, m, sm, tm))),
        ["exactly 0"],
    ),
}


@pytest.mark.parametrize("impl", [DecoderLayer, BlockDecoderLayer, ShuffledNormsDecoderLayer, TorchAttentionDecoderLayer])
def test_decoder_layer_accepts_correct_variants(impl):
    expect(check_decoder_layer(impl), "passed")


@pytest.mark.parametrize("name", WRONG_DECODER_LAYERS)
def test_decoder_layer_diagnoses(name):
    impl, phrases = WRONG_DECODER_LAYERS[name]
    expect(check_decoder_layer(impl), "failed", *phrases)


# --------------------------------------------------------------------------
# Outcomes shared by the three checkers.

CHECKERS = [
    (check_feed_forward, FeedForward),
    (check_encoder_layer, EncoderLayer),
    (check_decoder_layer, DecoderLayer),
]


@pytest.mark.parametrize("checker, good", CHECKERS)
def test_stub_is_not_attempted(checker, good):
    class Stub(nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__()
            # YOUR CODE HERE
            raise NotImplementedError()

    class StubForward(good):
        def forward(self, *args, **kwargs):
            raise NotImplementedError()

    expect(checker(Stub), "not attempted", "NotImplementedError")
    expect(checker(StubForward), "not attempted", "NotImplementedError")


@pytest.mark.parametrize("checker, good", CHECKERS)
def test_crash_is_an_error(checker, good):
    class Crash(good):
        def forward(self, x, *args, **kwargs):
            return x @ torch.ones(3, 3)

    expect(checker(Crash), "error", "RuntimeError")


@pytest.mark.parametrize("checker, good", CHECKERS)
def test_in_place_change_of_the_input_is_reported(checker, good):
    class Mutating(good):
        def forward(self, x, *args, **kwargs):
            x.mul_(2.0)
            return super().forward(x, *args, **kwargs)

    expect(checker(Mutating), "failed", "in place")


@pytest.mark.parametrize("checker, good", CHECKERS)
def test_not_a_class(checker, good):
    expect(checker(good(16, 24) if good is FeedForward else good(16, 4, 24)), "failed", "expected a class")


@pytest.mark.parametrize("checker, good", CHECKERS)
def test_rng_state_untouched_and_fast(checker, good):
    torch.manual_seed(7)
    random.seed(7)
    before = torch.get_rng_state()
    py_before = random.getstate()
    start = time.perf_counter()
    result = checker(good)
    elapsed = time.perf_counter() - start
    print(f"{checker.__name__}: {elapsed:.3f} s")
    assert result.passed, str(result)
    assert torch.equal(torch.get_rng_state(), before)
    assert random.getstate() == py_before
