"""Checkers for lesson 05 (layers): FeedForward, EncoderLayer, DecoderLayer.

The correct and wrong implementations below exist only to test the checkers; the
reference modules shared with tests/test_checks_model.py live in tests/reference_modules.py.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import expect
from test_checks_norm import _annotated, variant as norm_variant
from course_utils.checks.layers import check_decoder_layer, check_encoder_layer, check_feed_forward
from reference_modules import (
    BlockDecoderLayer,
    BlockEncoderLayer,
    DecoderLayer,
    EinsumAttention,
    EncoderLayer,
    FeedForward,
    FusedAttention,
    MultiHeadAttention,
    OwnLayerNorm,
    OwnNormDecoderLayer,
    OwnNormEncoderLayer,
    SequentialFeedForward,
    TorchAttention,
    TorchAttentionDecoderLayer,
    TorchAttentionEncoderLayer,
)

# --------------------------------------------------------------------------
# FeedForward


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


class NoSecondBiasFeedForward(FeedForward):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.linear2 = nn.Linear(d_ff, d_model, bias=False)


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


class ConvFeedForward(nn.Module):
    """The paper's "two convolutions with kernel size 1", as nn.Conv1d."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.conv1 = nn.Conv1d(d_model, d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(d_ff, d_model, kernel_size=1)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = self.drop(torch.relu(self.conv1(x.transpose(1, 2))))  # (B, d_ff, L)
        return self.conv2(h).transpose(1, 2)  # (B, L, d_model)


class DropBeforeReluFeedForward(FeedForward):
    """relu(dropout(h)) == dropout(relu(h)): the same function."""

    def forward(self, x):
        return self.linear2(torch.relu(self.dropout(self.linear1(x))))


class Float64FeedForward(FeedForward):
    """Computes in float64, returns float32."""

    def forward(self, x):
        h = F.linear(x.double(), self.linear1.weight.double(), self.linear1.bias.double())
        h = self.dropout(torch.relu(h))
        return F.linear(h, self.linear2.weight.double(), self.linear2.bias.double()).float()


class FixedRateFeedForward(FeedForward):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(0.1)


class NormInsideFeedForward(FeedForward):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x):
        return self.norm(x + FeedForward.forward(self, x))


WRONG_FEED_FORWARDS = {
    "no relu": (_ffn(lambda self, x: self.linear2(self.dropout(self.linear1(x)))), ["no ReLU"]),
    "gelu": (_ffn(lambda self, x: self.linear2(self.dropout(F.gelu(self.linear1(x))))), ["GELU"]),
    "leaky relu": (_ffn(lambda self, x: self.linear2(self.dropout(F.leaky_relu(self.linear1(x))))), ["LeakyReLU"]),
    "silu": (_ffn(lambda self, x: self.linear2(self.dropout(F.silu(self.linear1(x))))), ["SiLU"]),
    "relu on the input too": (_ffn(lambda self, x: self.linear2(self.dropout(F.relu(self.linear1(F.relu(x)))))),
                              ["applied to the input too", "before the first linear layer"]),
    "relu after both": (_ffn(lambda self, x: torch.relu(self.linear2(self.dropout(torch.relu(self.linear1(x)))))), ["after the second linear layer too"]),
    "residual inside": (_ffn(lambda self, x: x + self.linear2(self.dropout(torch.relu(self.linear1(x))))), ["residual"]),
    "ignores d_ff": (_ffn(FeedForward.forward, hidden=lambda d, f: 4 * d), ["nn.Linear(d_model, d_ff) = nn.Linear(16, 24)"]),
    "second linear missing": (OneLinearFeedForward, ["no submodule `linear2`"]),
    "no bias": (NoBiasFeedForward, ["relu(x W1) W2: without b1 and b2"]),
    "no second bias": (NoSecondBiasFeedForward, ["relu(x W1 + b1) W2: without b2"]),
    "b1 left out of a hand-written product": (
        _ffn(lambda self, x: self.linear2(self.dropout(torch.relu(x @ self.linear1.weight.T)))), ["b1 is never added"]),
    "b2 left out of a hand-written product": (
        _ffn(lambda self, x: self.dropout(torch.relu(self.linear1(x))) @ self.linear2.weight.T), ["b2 is never added"]),
    "hidden layer detached": (
        _ffn(lambda self, x: self.linear2(self.dropout(torch.relu(self.linear1(x)).detach()))),
        ["receive no gradient", "`linear1.weight`", ".detach()"]),
    "mixes positions": (_ffn(lambda self, x: FeedForward.forward(self, x - x.mean(dim=1, keepdim=True))), ["mixes positions"]),
    "dropout in eval": (_ffn(lambda self, x: self.linear2(F.dropout(torch.relu(self.linear1(x)), self.p))), ["eval mode"]),
    "no dropout": (NoDropoutFeedForward, ["dropout is not applied"]),
    "dropout on output": (_ffn(lambda self, x: self.dropout(FeedForward.forward(self, x))), ["after the second linear layer"]),
    "dropout on input": (_ffn(lambda self, x: FeedForward.forward(self, self.dropout(x))), ["wrong place"]),
    "unscaled dropout": (MaskDropoutFeedForward, ["1 / (1 - p)"]),
    "no return": (_ffn(lambda self, x: None), ["forget a `return`"]),
    "relu6": (_ffn(lambda self, x: self.linear2(self.dropout(F.relu6(self.linear1(x))))), ["not exactly ReLU"]),
    "dropout rate hard-coded": (FixedRateFeedForward, ["1 / (1 - 0.10)", "not the `dropout` argument"]),
    "residual and LayerNorm inside": (NormInsideFeedForward, ["LayerNorm(x + ffn(x))"]),
}


@pytest.mark.parametrize("impl", [FeedForward, DropBeforeReluFeedForward, Float64FeedForward])
def test_feed_forward_accepts_correct_variants(impl):
    expect(check_feed_forward(impl), "passed")


# Right values, other names: the names are part of the exercise now (lesson 07 copies linear1 and linear2).
RENAMED_FEED_FORWARDS = [SequentialFeedForward, ParameterFeedForward, ReversedFeedForward, ConvFeedForward]


@pytest.mark.parametrize("impl", RENAMED_FEED_FORWARDS)
def test_feed_forward_names_are_part_of_the_contract(impl):
    expect(check_feed_forward(impl), "failed", "no submodules `linear1`, `linear2`", "names are part of the exercise")


@pytest.mark.parametrize("name", WRONG_FEED_FORWARDS)
def test_feed_forward_diagnoses(name):
    impl, phrases = WRONG_FEED_FORWARDS[name]
    expect(check_feed_forward(impl), "failed", *phrases)


# --------------------------------------------------------------------------
# EncoderLayer


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
        return x + self.dropout(self.feed_forward(x))


class NoNormModuleEncoderLayer(NoNormEncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        del self.norm1, self.norm2


class NoDropoutEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, 0.0)


class InlineNormEncoderLayer(EncoderLayer):
    """F.layer_norm with gains and biases stored on the layer: no norm module to find, properties only."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        del self.norm1, self.norm2
        self.gains = nn.ParameterList([nn.Parameter(torch.ones(d_model)) for _ in range(2)])
        self.biases = nn.ParameterList([nn.Parameter(torch.zeros(d_model)) for _ in range(2)])

    def forward(self, x, mask=None):
        shape = x.shape[-1:]
        x = F.layer_norm(x + self.dropout(self.self_attn(x, x, x, mask)), shape, self.gains[0], self.biases[0])
        return F.layer_norm(x + self.dropout(self.feed_forward(x)), shape, self.gains[1], self.biases[1])


class TorchEncoderLayer(nn.TransformerEncoderLayer):
    """PyTorch's own layer behind the course's signature."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout, batch_first=True)

    def forward(self, x, mask=None):
        padding = None if mask is None else ~mask[:, 0, 0, :]
        return super().forward(x, src_key_padding_mask=padding)


class InvertedMaskAttention(MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        return super().forward(query, key, value, None if mask is None else ~mask)


class TorchMaskAsIsAttention(TorchAttention):
    """Hands our mask to nn.MultiheadAttention without inverting it."""

    def forward(self, query, key, value, mask=None):
        padding = None if mask is None else mask[:, 0, 0, :]
        return self.inner(query, key, value, key_padding_mask=padding, need_weights=False)[0]


def _with_attention(layer_cls, attention_cls):
    class Variant(layer_cls):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
            super().__init__(d_model, num_heads, d_ff, dropout)
            for name in ("self_attn", "cross_attn"):
                if hasattr(self, name):
                    setattr(self, name, attention_cls(d_model, num_heads, dropout))

    return Variant


class AttentionDropoutOnlyEncoderLayer(EncoderLayer):
    """Dropout inside the attention (on its weights) and inside FeedForward, none on the sublayer outputs."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, mask))
        return self.norm2(x + self.feed_forward(x))


class NoAffineEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model, elementwise_affine=False)
        self.norm2 = nn.LayerNorm(d_model, elementwise_affine=False)


class InlineBareNormEncoderLayer(EncoderLayer):
    """F.layer_norm without gain or bias, no module: only the parameter count shows it."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        del self.norm1, self.norm2

    def forward(self, x, mask=None):
        x = F.layer_norm(x + self.dropout(self.self_attn(x, x, x, mask)), x.shape[-1:])
        return F.layer_norm(x + self.dropout(self.feed_forward(x)), x.shape[-1:])


class UnusedModuleEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.extra = nn.Linear(d_model, d_model)


class RMSNorm(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d_model))
        self.shift = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        return self.gain * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) + self.shift


class RMSNormEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.norm1, self.norm2 = RMSNorm(d_model), RMSNorm(d_model)


def _memory_detached():
    class MemoryDetachedDecoderLayer(DecoderLayer):
        def forward(self, x, memory, src_mask=None, tgt_mask=None):
            return DecoderLayer.forward(self, x, memory.detach(), src_mask, tgt_mask)

    return MemoryDetachedDecoderLayer


class BesselNormDecoderLayer(DecoderLayer):
    """The Annotated Transformer's LayerNorm (unbiased std, eps outside the root) in every sublayer."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        annotated = norm_variant(_annotated)
        self.norm1, self.norm2, self.norm3 = (annotated(d_model) for _ in range(3))


def _own_enc(forward):
    class Variant(OwnNormEncoderLayer):
        pass

    Variant.forward = forward
    return Variant


def _gelu_ffn(ffn, x):
    return ffn.linear2(ffn.dropout(F.gelu(ffn.linear1(x))))


WRONG_ENCODER_LAYERS = {
    "no residual around attention": (
        _enc(lambda self, x, mask=None: self.norm2(
            self.norm1(self.dropout(self.self_attn(x, x, x, mask)))
            + self.dropout(self.feed_forward(self.norm1(self.dropout(self.self_attn(x, x, x, mask))))))),
        ["residual connection around self-attention"],
    ),
    "pre-LN": (
        _enc(lambda self, x, mask=None: (lambda y: y + self.dropout(self.feed_forward(self.norm2(y))))(
            x + self.dropout(self.self_attn(self.norm1(x), self.norm1(x), self.norm1(x), mask)))),
        ["pre-LN"],
    ),
    "no LayerNorm": (NoNormEncoderLayer, ["there is no LayerNorm"]),
    "no LayerNorm module": (NoNormModuleEncoderLayer, ["no submodules `norm1`, `norm2`"]),
    "mask ignored": (_enc(lambda self, x, mask=None: EncoderLayer.forward(self, x, None)), ["hidden by the mask"]),
    "feed-forward missing": (NoFeedForwardEncoderLayer, ["no submodules `feed_forward`, `norm1`, `norm2`"]),
    "shared LayerNorm": (SharedNormEncoderLayer, ["shared"]),
    "norm1 used twice": (
        _enc(lambda self, x, mask=None: (lambda y: self.norm1(y + self.dropout(self.feed_forward(y))))(
            self.norm1(x + self.dropout(self.self_attn(x, x, x, mask))))),
        ["same LayerNorm for two sublayers"],
    ),
    "dropout on the residual sum": (
        _enc(lambda self, x, mask=None: (lambda y: self.norm2(self.dropout(y + self.feed_forward(y))))(
            self.norm1(self.dropout(x + self.self_attn(x, x, x, mask))))),
        ["drops the residual"],
    ),
    "dropout after the norm": (
        _enc(lambda self, x, mask=None: (lambda y: self.dropout(self.norm2(y + self.feed_forward(y))))(
            self.dropout(self.norm1(x + self.self_attn(x, x, x, mask))))),
        ["exactly 0"],
    ),
    "no dropout": (NoDropoutEncoderLayer, ["dropout is not applied"]),
    "norm before the residual": (
        _enc(lambda self, x, mask=None: (lambda y: y + self.norm2(self.feed_forward(y)))(
            x + self.norm1(self.self_attn(x, x, x, mask)))),
        ["before the residual addition"],
    ),
    "feed-forward first": (
        _enc(lambda self, x, mask=None: (lambda y: self.norm2(y + self.self_attn(y, y, y, mask)))(
            self.norm1(x + self.feed_forward(x)))),
        ["wrong order"],
    ),
    "mask polarity inverted (-inf)": (
        _with_attention(EncoderLayer, InvertedMaskAttention),
        ["`self_attn` = InvertedMaskAttention", "does not pass check_multi_head_attention", "fix that first"]),
    "nn.MultiheadAttention given the mask as is": (
        _with_attention(EncoderLayer, TorchMaskAsIsAttention), ["TorchMaskAsIsAttention", "fix that first", "W_q"]),
    "mask on the query axis": (
        _enc(lambda self, x, mask=None: EncoderLayer.forward(self, x, None if mask is None else mask.transpose(-1, -2))),
        ["NaN", "hides queries instead of keys"],
    ),
    "dropout only on the attention weights": (
        AttentionDropoutOnlyEncoderLayer, ["applies no dropout on the output of self-attention", "before the residual addition"]),
    "dropout on the input x": (
        _enc(lambda self, x, mask=None: (lambda y: self.norm2(y + self.feed_forward(y)))(
            (lambda z: self.norm1(z + self.self_attn(z, z, z, mask)))(self.dropout(x)))),
        ["applies dropout to the input of self-attention"],
    ),
    "LayerNorm without gain and bias": (NoAffineEncoderLayer, ["no learned gain and bias"]),
    "F.layer_norm without gain and bias": (InlineBareNormEncoderLayer, ["no submodules `norm1`, `norm2`"]),
    "unused module": (UnusedModuleEncoderLayer, ["receive no gradient", "`extra.weight`"]),
    "GELU": (
        _enc(lambda self, x, mask=None: (lambda y: self.norm2(y + self.dropout(_gelu_ffn(self.feed_forward, y))))(
            self.norm1(x + self.dropout(self.self_attn(x, x, x, mask))))),
        ["GELU"],
    ),
    "RMSNorm": (RMSNormEncoderLayer, ["does not subtract the mean", "RMSNorm"]),
    "own LayerNorm, used twice": (
        _own_enc(lambda self, x, mask=None: (lambda y: self.norm1(y + self.dropout(self.feed_forward(y))))(
            self.norm1(x + self.dropout(self.self_attn(x, x, x, mask))))),
        ["same LayerNorm for two sublayers"],
    ),
    "own LayerNorm, no residual around the feed-forward network": (
        _own_enc(lambda self, x, mask=None: (lambda y: self.norm2(self.dropout(self.feed_forward(y))))(
            self.norm1(x + self.dropout(self.self_attn(x, x, x, mask))))),
        ["residual connection around the feed-forward network"],
    ),
    "own LayerNorm, pre-LN": (
        _own_enc(lambda self, x, mask=None: (lambda y: y + self.dropout(self.feed_forward(self.norm2(y))))(
            x + self.dropout(self.self_attn(self.norm1(x), self.norm1(x), self.norm1(x), mask)))),
        ["pre-LN"],
    ),
    "no attention mixing": (
        _enc(lambda self, x, mask=None: (lambda y: self.norm2(y + self.feed_forward(y)))(self.norm1(x + self.self_attn.W_o(self.self_attn.W_v(x))))),
        ["does not mix information between positions"],
    ),
    "feed-forward called through .forward": (
        _enc(lambda self, x, mask=None: (lambda y: self.norm2(y + self.dropout(self.feed_forward.forward(y))))(
            self.norm1(x + self.dropout(self.self_attn(x, x, x, mask))))),
        ["calls `self.feed_forward.forward(...)` directly"],
    ),
}


class FusedEncoderLayer(EncoderLayer):
    """F.scaled_dot_product_attention inside self_attn; keyword calls; the residual added on the other side.

    (It had one dropout module per sublayer once: lesson 08 sets the rate of the contract's `dropout`, so a
    layer that applies others is now on the wrong side, as UnusedDropoutEncoderLayer.)
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = FusedAttention(d_model, num_heads, dropout)

    def forward(self, x, mask=None):
        x = self.norm1(self.dropout(self.self_attn(query=x, key=x, value=x, mask=mask)) + x)
        return self.norm2(self.dropout(self.feed_forward(x)) + x)


class EinsumEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = EinsumAttention(d_model, num_heads, dropout)


@pytest.mark.parametrize("impl", [EncoderLayer, FusedEncoderLayer, EinsumEncoderLayer, OwnNormEncoderLayer])
def test_encoder_layer_accepts_correct_variants(impl):
    expect(check_encoder_layer(impl), "passed")


def test_encoder_layer_says_it_compared_with_pytorch():
    assert any("nn.TransformerEncoderLayer" in item for item in check_encoder_layer(EncoderLayer).checked)




@pytest.mark.parametrize("name", WRONG_ENCODER_LAYERS)
def test_encoder_layer_diagnoses(name):
    impl, phrases = WRONG_ENCODER_LAYERS[name]
    expect(check_encoder_layer(impl), "failed", *phrases)


# --------------------------------------------------------------------------
# DecoderLayer


class ShuffledNormsDecoderLayer(DecoderLayer):
    """Norms used in the order 3, 1, 2 of registration; keyword calls."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm3(x + self.dropout(self.self_attn(query=x, key=x, value=x, mask=tgt_mask)))
        x = self.norm1(x + self.dropout(self.cross_attn(query=x, key=memory, value=memory, mask=src_mask)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


def _dec(forward):
    """A DecoderLayer whose forward, under the exercise's parameter names (lesson 05 passes tgt_mask by name), runs
    ``forward(self, x, memory, src_mask, tgt_mask)``."""
    class Variant(DecoderLayer):
        def forward(self, x, memory, src_mask=None, tgt_mask=None):
            return forward(self, x, memory, src_mask, tgt_mask)

    return Variant


def _cross_attention_over_its_own_states(self, x, memory, src_mask=None, tgt_mask=None):
    x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
    x = self.norm2(x + self.dropout(self.cross_attn(x, x, x, tgt_mask)))  # memory is never read
    return self.norm3(x + self.dropout(self.feed_forward(x)))


def _cross_query_from_the_input(self, x, memory, src_mask=None, tgt_mask=None):
    y = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
    y = self.norm2(y + self.dropout(self.cross_attn(x, memory, memory, src_mask)))
    return self.norm3(y + self.dropout(self.feed_forward(y)))


def _no_residual_around_cross_attention(self, x, memory, src_mask=None, tgt_mask=None):
    x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
    x = self.norm2(self.dropout(self.cross_attn(x, memory, memory, src_mask)))
    return self.norm3(x + self.dropout(self.feed_forward(x)))


def _no_residual_around_self_attention(self, x, memory, src_mask=None, tgt_mask=None):
    x = self.norm1(self.dropout(self.self_attn(x, x, x, tgt_mask)))
    x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, src_mask)))
    return self.norm3(x + self.dropout(self.feed_forward(x)))


def _pre_ln_decoder(self, x, memory, src_mask=None, tgt_mask=None):
    h = self.norm1(x)
    x = x + self.dropout(self.self_attn(h, h, h, tgt_mask))
    x = x + self.dropout(self.cross_attn(self.norm2(x), memory, memory, src_mask))
    return x + self.dropout(self.feed_forward(self.norm3(x)))


class SharedNormDecoderLayer(DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        del self.norm2, self.norm3
        self.norm2 = self.norm3 = self.norm1


class NoFeedForwardDecoderLayer(DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        del self.feed_forward

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        return self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, src_mask)))


class TorchDecoderLayer(nn.TransformerDecoderLayer):
    """PyTorch's own layer behind the course's signature (its masks are True where blocked)."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout, batch_first=True)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        B, T, S, H = x.shape[0], x.shape[1], memory.shape[1], self.self_attn.num_heads
        tm = None if tgt_mask is None else ~tgt_mask.expand(B, H, T, T).reshape(B * H, T, T)
        sm = None if src_mask is None else ~src_mask.expand(B, H, T, S).reshape(B * H, T, S)
        return super().forward(x, memory, tgt_mask=tm, memory_mask=sm)


class Float64AttentionDecoderLayer(DecoderLayer):
    """Attention computed in float64 inside, and returned to float32 whatever the model's dtype."""

    class Attention(MultiHeadAttention):
        def forward(self, query, key, value, mask=None):
            q, k, v = (self.split(w(t)).double() for w, t in ((self.W_q, query), (self.W_k, key), (self.W_v, value)))
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
            self.attention_weights = (scores if mask is None else scores.masked_fill(~mask, -math.inf)).softmax(-1)
            out = self.dropout(self.attention_weights) @ v  # (B, H, L_q, d_k)
            return self.W_o(out.transpose(1, 2).flatten(2).float())

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = self.Attention(d_model, num_heads, dropout)
        self.cross_attn = self.Attention(d_model, num_heads, dropout)


class AttentionDropoutOnlyDecoderLayer(DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, tgt_mask))
        x = self.norm2(x + self.cross_attn(x, memory, memory, src_mask))
        return self.norm3(x + self.feed_forward(x))


class NoAffineDecoderLayer(DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model, elementwise_affine=False) for _ in range(3))


class InvertedMaskTorchDecoderLayer(TorchDecoderLayer):
    """Hands our masks to PyTorch as they are (True = blocked there): every mask inverted."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return TorchDecoderLayer.forward(self, x, memory, None if src_mask is None else ~src_mask,
                                         None if tgt_mask is None else ~tgt_mask)


def _own_dec(forward):
    class Variant(OwnNormDecoderLayer):
        def forward(self, x, memory, src_mask=None, tgt_mask=None):
            return forward(self, x, memory, src_mask, tgt_mask)

    return Variant


WRONG_DECODER_LAYERS = {
    "target mask ignored": (_dec(lambda s, x, m, sm=None, tm=None: DecoderLayer.forward(s, x, m, sm, None)), ["can see the future"]),
    "source mask ignored": (_dec(lambda s, x, m, sm=None, tm=None: DecoderLayer.forward(s, x, m, None, tm)), ["hidden by src_mask"]),
    "cross-attention over x": (_dec(_cross_attention_over_its_own_states), ["does not use it", "memory"]),
    "memory as query": (
        _dec(lambda s, x, m, sm=None, tm=None: s.norm2(s.cross_attn(m, x, x, None))),
        ["one row per memory position"],
    ),
    "cross query from input": (_dec(_cross_query_from_the_input), ["query is the layer's input"]),
    "no residual around cross-attention": (
        _dec(_no_residual_around_cross_attention),
        ["residual connection around the cross-attention"],
    ),
    "no residual around self-attention": (
        _dec(_no_residual_around_self_attention),
        ["residual connection around the masked self-attention"],
    ),
    "pre-LN": (_dec(_pre_ln_decoder), ["pre-LN"]),
    "feed-forward missing": (NoFeedForwardDecoderLayer, ["no submodule `feed_forward`"]),
    "shared LayerNorm": (SharedNormDecoderLayer, ["shared"]),
    "cross-attention first": (
        _dec(lambda s, x, m, sm=None, tm=None: (lambda y: (lambda z: s.norm3(z + s.feed_forward(z)))(s.norm2(y + s.self_attn(y, y, y, tm))))(
            s.norm1(x + s.cross_attn(x, m, m, sm)))),
        ["wrong order"],
    ),
    "masks swapped": (_dec(lambda s, x, m, sm=None, tm=None: DecoderLayer.forward(s, x, m, tm, sm)), ["wrong way round"]),
    "norms in another order": (ShuffledNormsDecoderLayer, ["`norm3`, `norm1`, `norm2`", "norm1 belongs to the first"]),
    "own causal mask instead of tgt_mask": (
        _dec(lambda s, x, m, sm=None, tm=None: DecoderLayer.forward(
            s, x, m, sm, torch.tril(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool)))),
        ["causal mask of its own"],
    ),
    "self-attention module used for cross-attention too": (
        _dec(lambda s, x, m, sm=None, tm=None: (lambda y: s.norm3(y + s.feed_forward(y)))(
            (lambda z: s.norm2(z + s.self_attn(z, m, m, sm)))(s.norm1(x + s.self_attn(x, x, x, tm))))),
        ["receive no gradient", "cross_attn"],
    ),
    "masks inverted (nn.MultiheadAttention convention)": (InvertedMaskTorchDecoderLayer, ["no submodules `cross_attn`"]),
    "dropout only on the attention weights": (
        AttentionDropoutOnlyDecoderLayer, ["no dropout on the output of the masked self-attention"]),
    "LayerNorm without gain and bias": (NoAffineDecoderLayer, ["no learned gain and bias"]),
    "GELU": (
        _dec(lambda s, x, m, sm=None, tm=None: (lambda y: s.norm3(y + _gelu_ffn(s.feed_forward, y)))(
            (lambda z: s.norm2(z + s.cross_attn(z, m, m, sm)))(s.norm1(x + s.self_attn(x, x, x, tm))))),
        ["GELU"],
    ),
    "the Annotated Transformer's LayerNorm": (BesselNormDecoderLayer, ["`norm1`", "d_model - 1", "lesson 07"]),
    "memory detached": (_memory_detached(), ["no gradient reaches `memory`", "detach"]),
    "own LayerNorm, no residual around cross-attention": (
        _own_dec(_no_residual_around_cross_attention),
        ["residual connection around the cross-attention"],
    ),
    "dropout on the output": (
        _dec(lambda s, x, m, sm=None, tm=None: s.dropout(DecoderLayer.forward(s, x, m, sm, tm))),
        ["exactly 0"],
    ),
    # a learner walkthrough: lesson 06's plot hooks cross_attn, and .forward(...) skips hooks
    "cross-attention called through .forward": (
        _dec(lambda s, x, m, sm=None, tm=None: s.norm3((lambda y: y + s.dropout(s.feed_forward(y)))(s.norm2(
            (lambda y: y + s.dropout(s.cross_attn.forward(y, m, m, sm)))(
                s.norm1(x + s.dropout(s.self_attn(x, x, x, tm)))))))),
        ["calls `self.cross_attn.forward(...)` directly", "`self.cross_attn(...)`", "lesson 06"],
    ),
}


@pytest.mark.parametrize("impl", [DecoderLayer, OwnNormDecoderLayer])
def test_decoder_layer_accepts_correct_variants(impl):
    expect(check_decoder_layer(impl), "passed")


def test_an_attention_that_returns_to_float32_on_its_own_is_blamed_before_the_layer():
    """Lesson 05's check_transformer runs the model after .double(): an attention with a `.float()` inside stops there."""
    expect(check_decoder_layer(Float64AttentionDecoderLayer), "failed", "fails its own checker",
           "no longer computes in float64")


@pytest.mark.parametrize("name", WRONG_DECODER_LAYERS)
def test_decoder_layer_diagnoses(name):
    impl, phrases = WRONG_DECODER_LAYERS[name]
    expect(check_decoder_layer(impl), "failed", *phrases)


# Right values, but not the contract's layout: later lessons read self_attn.W_q, feed_forward, norm1 ...
NOT_THE_CONTRACT_LAYOUT = [
    (check_encoder_layer, BlockEncoderLayer, ["no submodules `self_attn`, `feed_forward`, `norm1`, `norm2`"]),
    (check_encoder_layer, ReversedNormsEncoderLayer, ["no submodules `self_attn`, `feed_forward`, `norm1`, `norm2`"]),
    (check_encoder_layer, TorchAttentionEncoderLayer, ["`self_attn` = TorchAttention", "fix that first", "W_q"]),
    (check_encoder_layer, InlineNormEncoderLayer, ["no submodules `norm1`, `norm2`"]),
    (check_encoder_layer, TorchEncoderLayer, ["no submodule `feed_forward`"]),
    (check_decoder_layer, BlockDecoderLayer, ["no submodules `self_attn`, `cross_attn`, `feed_forward`"]),
    (check_decoder_layer, TorchAttentionDecoderLayer, ["`self_attn` = TorchAttention", "fix that first"]),
    (check_decoder_layer, TorchDecoderLayer, ["no submodules `cross_attn`, `feed_forward`"]),
]


@pytest.mark.parametrize("checker, impl, phrases", NOT_THE_CONTRACT_LAYOUT,
                         ids=[impl.__name__ for _, impl, _ in NOT_THE_CONTRACT_LAYOUT])
def test_layers_not_in_the_contract_layout_fail(checker, impl, phrases):
    expect(checker(impl), "failed", *phrases)


def test_layers_with_own_layer_norms_are_compared_by_value():
    """A hand-written LayerNorm is found by what it does, so the values are still compared."""
    for checker, impl, twin in ((check_encoder_layer, OwnNormEncoderLayer, "nn.TransformerEncoderLayer"),
                                (check_decoder_layer, OwnNormDecoderLayer, "nn.TransformerDecoderLayer")):
        result = checker(impl)
        assert result.passed, str(result)
        assert any(twin in item for item in result.checked), str(result)


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


def test_layers_blame_bias_free_attention_projections_on_the_attention():
    from reference_modules import BiasFreeDecoderLayer, BiasFreeEncoderLayer

    expect(check_encoder_layer(BiasFreeEncoderLayer), "failed", "MultiHeadAttention", "without a bias")
    expect(check_decoder_layer(BiasFreeDecoderLayer), "failed", "MultiHeadAttention", "without a bias")


# --------------------------------------------------------------------------
# Issue 9: wiring, norms, masks and dropout measured; components first.


class PositionNorm(OwnLayerNorm):
    """Normalises over the positions (dim 1) instead of the features."""

    def forward(self, x):
        mean = x.mean(1, keepdim=True)
        var = ((x - mean) ** 2).mean(1, keepdim=True)
        return self.gain * (x - mean) / torch.sqrt(var + self.eps) + self.shift


class PositionNormEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.norm1, self.norm2 = PositionNorm(d_model), PositionNorm(d_model)


class GeluFeedForward(FeedForward):
    def forward(self, x):
        return self.linear2(self.dropout(F.gelu(self.linear1(x))))


class GeluFeedForwardEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.feed_forward = GeluFeedForward(d_model, d_ff, dropout)


class GeluTorchAttentionEncoderLayer(TorchAttentionEncoderLayer):
    """The gap of the old checker: nn.MultiheadAttention inside, and GELU; judged on properties only, it passed."""

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)))
        return self.norm2(x + self.dropout(_gelu_ffn(self.feed_forward, x)))


class FixedRateSublayerDropout(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.dropout = nn.Dropout(0.1)


class OneMaskTwoSublayers(EncoderLayer):
    def forward(self, x, mask=None):
        p = self.dropout.p
        keep = (torch.rand_like(x) >= p).to(x.dtype) / (1 - p) if self.training else torch.ones_like(x)
        x = self.norm1(x + keep * self.self_attn(x, x, x, mask))
        return self.norm2(x + keep * self.feed_forward(x))


class MaskPerSentence(EncoderLayer):
    """One dropout mask per sentence, broadcast over its positions."""

    def drop(self, t):
        if not self.training:
            return t
        p = self.dropout.p
        return t * (torch.rand(t.shape[0], 1, t.shape[2]) >= p).to(t.dtype) / (1 - p)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.drop(self.self_attn(x, x, x, mask)))
        return self.norm2(x + self.drop(self.feed_forward(x)))


class SeededEncoderLayer(EncoderLayer):
    def forward(self, x, mask=None):
        torch.manual_seed(0)
        return super().forward(x, mask)


WRONG_CONTRACT_LAYERS = {
    "encoder residual from the layer's input": (check_encoder_layer, _enc(
        lambda self, x, mask=None: (lambda y: self.norm2(x + self.dropout(self.feed_forward(y))))(
            self.norm1(x + self.dropout(self.self_attn(x, x, x, mask))))),
        ["residual connection around the feed-forward network", "adds x, the layer's input"]),
    "causal mask in the encoder": (check_encoder_layer, _enc(
        lambda self, x, mask=None: EncoderLayer.forward(
            self, x, torch.ones(x.shape[0], 1, x.shape[1], x.shape[1], dtype=torch.bool).tril()
            & (torch.ones(x.shape[0], 1, 1, x.shape[1], dtype=torch.bool) if mask is None else mask))),
        ["causal mask", "whole source sentence"]),
    "LayerNorm over the positions": (check_encoder_layer, PositionNormEncoderLayer, ["`norm1`", "over the positions"]),
    "sublayer dropout applied twice": (check_encoder_layer, _enc(
        lambda self, x, mask=None: (lambda y: self.norm2(y + self.dropout(self.dropout(self.feed_forward(y)))))(
            self.norm1(x + self.dropout(self.dropout(self.self_attn(x, x, x, mask)))))),
        ["twice", "before the residual addition"]),
    "fixed sublayer dropout rate": (check_encoder_layer, FixedRateSublayerDropout, ["is nn.Dropout(p=0.1), where it was built with dropout=0.0"]),
    "one mask for both sublayers": (check_encoder_layer, OneMaskTwoSublayers, ["same entries in two places", "self-attention", "feed-forward network"]),
    "one mask per sentence": (check_encoder_layer, MaskPerSentence, ["drops the same entries for every position"]),
    "seed reset in forward": (check_encoder_layer, SeededEncoderLayer, ["resets a global random seed"]),
    "GELU feed-forward class": (check_encoder_layer, GeluFeedForwardEncoderLayer,
                                ["`feed_forward` = GeluFeedForward", "check_feed_forward", "GELU"]),
    "GELU written with nn.MultiheadAttention": (check_encoder_layer, GeluTorchAttentionEncoderLayer,
                                                ["fix that first"]),
    "norms used in the other order": (check_encoder_layer, _enc(
        lambda self, x, mask=None: (lambda y: self.norm1(y + self.dropout(self.feed_forward(y))))(
            self.norm2(x + self.dropout(self.self_attn(x, x, x, mask))))),
        ["`norm2`, `norm1`", "norm1 belongs to the first"]),
    "decoder residual around cross-attention from x": (check_decoder_layer, _dec(
        lambda s, x, m, sm=None, tm=None: (lambda y: (lambda z: s.norm3(z + s.dropout(s.feed_forward(z))))(
            s.norm2(x + s.dropout(s.cross_attn(y, m, m, sm)))))(s.norm1(x + s.dropout(s.self_attn(x, x, x, tm))))),
        ["residual connection around the cross-attention", "adds x, the layer's input"]),
    "decoder cross-attention dropout twice": (check_decoder_layer, _dec(
        lambda s, x, m, sm=None, tm=None: (lambda y: (lambda z: s.norm3(z + s.dropout(s.feed_forward(z))))(
            s.norm2(y + s.dropout(s.dropout(s.cross_attn(y, m, m, sm))))))(
            s.norm1(x + s.dropout(s.self_attn(x, x, x, tm))))),
        ["twice", "the cross-attention"]),
    "feed-forward dropout twice": (check_feed_forward, _ffn(
        lambda self, x: self.linear2(self.dropout(self.dropout(torch.relu(self.linear1(x)))))), ["twice"]),
    "feed-forward mask shared over positions": (check_feed_forward, _ffn(
        lambda self, x: self.linear2(torch.relu(self.linear1(x)) * (
            (torch.rand(x.shape[0], 1, self.linear1.out_features) >= self.p).float() / (1 - self.p)
            if self.training else 1.0))),
        ["every position"]),
}


@pytest.mark.parametrize("name", WRONG_CONTRACT_LAYERS)
def test_layers_diagnose_contract_mistakes(name):
    checker, impl, phrases = WRONG_CONTRACT_LAYERS[name]
    expect(checker(impl), "failed", *phrases)


class CPUGateDecoderLayer(DecoderLayer):
    """Multiplies the memory by a gate of ones built without `device=` (a placeholder for later): on the CPU."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        gate = torch.ones(memory.shape[-1])
        return super().forward(x, memory * gate, src_mask, tgt_mask)


class FourHeadsEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = MultiHeadAttention(d_model, 4, dropout)


def test_layers_create_tensors_on_the_input_device_and_use_their_sizes():
    expect(check_decoder_layer(CPUGateDecoderLayer), "failed", "creates a tensor on the CPU",
           "torch.ones(memory.shape[-1])")
    expect(check_encoder_layer(FourHeadsEncoderLayer), "failed", "num_heads = 4", "num_heads=1")


# --------------------------------------------------------------------------
# Issue 17: mistakes that passed, or were told a wrong cause.


class NoAttentionDropoutEncoderLayer(EncoderLayer):
    """Builds its attention without the dropout rate: the attention weights are never dropped."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = MultiHeadAttention(d_model, num_heads)


class NoAttentionDropoutDecoderLayer(DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)


class MemoryDropoutDecoderLayer(DecoderLayer):
    """Drops entries of memory before the cross-attention reads it."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return super().forward(x, self.dropout(memory), src_mask, tgt_mask)


class ReturnsWeightsEncoderLayer(EncoderLayer):
    def forward(self, x, mask=None):
        return super().forward(x, mask), self.self_attn.attention_weights


class OwnCausalDecoderLayer(DecoderLayer):
    """ANDs a causal mask of its own into the tgt_mask it is given."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        L = x.shape[1]
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        if tgt_mask is not None:
            tgt_mask = tgt_mask & causal
        return super().forward(x, memory, src_mask, tgt_mask)


class TargetMaskInCrossAttentionDecoderLayer(DecoderLayer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, tgt_mask)))
        return self.norm3(x + self.dropout(self.feed_forward(x)))


class SwappedShapesFeedForward(FeedForward):
    """linear1 and linear2 built with each other's shapes; forward uses their matrices the other way round."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.linear1, self.linear2 = nn.Linear(d_ff, d_model), nn.Linear(d_model, d_ff)

    def forward(self, x):
        h = torch.relu(x @ self.linear1.weight + self.linear2.bias)  # (B, L, d_ff)
        return self.dropout(h) @ self.linear2.weight + self.linear1.bias  # (B, L, d_model)


class AliasedAttentionEncoderLayer(EncoderLayer):
    """Computes with self_attn under a second name: lesson 07's fused attention, assigned to self_attn, goes unused."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.attn = self.self_attn

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout(self.attn(x, x, x, mask)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


class AliasedCrossAttentionDecoderLayer(DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.sublayers = [self.self_attn, self.cross_attn]  # a plain list made in __init__

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        self_attn, cross_attn = self.sublayers
        x = self.norm1(x + self.dropout(self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.dropout(cross_attn(x, memory, memory, src_mask)))
        return self.norm3(x + self.dropout(self.feed_forward(x)))


class UnusedDropoutEncoderLayer(EncoderLayer):
    """Has the contract's `dropout`, but applies two others: lesson 08's rate, set on `dropout`, changes nothing."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask)))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))


class ReadsTheRateDecoderLayer(DecoderLayer):
    """Correct: F.dropout at the rate of `self.dropout`, read on every call (lesson 08's change reaches it)."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        drop = lambda t: F.dropout(t, self.dropout.p, self.training)  # noqa: E731
        x = self.norm1(x + drop(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + drop(self.cross_attn(x, memory, memory, src_mask)))
        return self.norm3(x + drop(self.feed_forward(x)))


class MasksInAnotherOrderDecoderLayer(DecoderLayer):
    def forward(self, x, memory, tgt_mask=None, src_mask=None):
        return super().forward(x, memory, src_mask, tgt_mask)


class SmallEpsEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model, eps=1e-6), nn.LayerNorm(d_model, eps=1e-6)


class MemoryNormalisedDecoderLayer(DecoderLayer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        m = self.norm2(memory)
        x = self.norm2(x + self.dropout(self.cross_attn(x, m, m, src_mask)))
        return self.norm3(x + self.dropout(self.feed_forward(x)))


class TorchAttentionEncoderLayer(EncoderLayer):
    """PyTorch's nn.MultiheadAttention as self_attn (returning its output only), not the learner's class."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = nn.MultiheadAttention(d_model, num_heads, dropout=dropout, batch_first=True)

    def forward(self, x, mask=None):
        hidden = None if mask is None else ~mask.reshape(mask.shape[0], -1)
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, key_padding_mask=hidden)[0]))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


class SecondDropoutEncoderLayer(EncoderLayer):
    """A second nn.Dropout for the feed-forward sublayer: lesson 08's `dropout.p` never reaches it."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))


class CrossDropoutDecoderLayer(DecoderLayer):
    """Its own nn.Dropout for the cross-attention sublayer."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.dropout_cross = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.dropout_cross(self.cross_attn(x, memory, memory, src_mask)))
        return self.norm3(x + self.dropout(self.feed_forward(x)))


class StoredRateEncoderLayer(EncoderLayer):
    """F.dropout with the rate stored at construction: a rate set later on `dropout.p` is ignored."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.p = dropout

    def forward(self, x, mask=None):
        x = self.norm1(x + F.dropout(self.self_attn(x, x, x, mask), self.p, self.training))
        return self.norm2(x + F.dropout(self.feed_forward(x), self.p, self.training))


def test_a_layer_that_reads_its_dropout_rate_on_every_call_passes():
    expect(check_decoder_layer(ReadsTheRateDecoderLayer), "passed")


ISSUE_17_LAYERS = {
    # a third hidden set: what lessons 07 and 08 do to the layers, and the order of the parameters
    "self_attn under a second name": (check_encoder_layer, AliasedAttentionEncoderLayer,
                                      ["never calls `self.self_attn`", "with_fused_attention"]),
    "cross_attn from a plain list": (check_decoder_layer, AliasedCrossAttentionDecoderLayer,
                                     ["never calls `self.self_attn`", "by assignment"]),
    "the contract's dropout unused": (check_encoder_layer, UnusedDropoutEncoderLayer,
                                      ["stays deterministic", "`dropout`", "lesson 08"]),
    "masks in another order": (check_decoder_layer, MasksInAnotherOrderDecoderLayer,
                               ["in the order (x, memory, tgt_mask, src_mask)", "by position"]),
    "nn.LayerNorm with eps 1e-6": (check_encoder_layer, SmallEpsEncoderLayer, ["eps=1e-06", "default"]),
    "memory normalised before the cross-attention": (check_decoder_layer, MemoryNormalisedDecoderLayer,
                                                      ["memory goes through norm2", "cross_attn(x, memory, memory"]),
    "nn.MultiheadAttention as self_attn": (check_encoder_layer, TorchAttentionEncoderLayer,
                                           ["torch.nn.MultiheadAttention", "not your MultiHeadAttention"]),
    "attention built without the dropout rate (encoder)": (check_encoder_layer, NoAttentionDropoutEncoderLayer,
                                                           ["self_attn", "dropout"]),
    "attention built without the dropout rate (decoder)": (check_decoder_layer, NoAttentionDropoutDecoderLayer,
                                                           ["cross_attn", "dropout"]),
    "dropout on memory": (check_decoder_layer, MemoryDropoutDecoderLayer, ["memory", "dropout"]),
    "returns (x, weights)": (check_encoder_layer, ReturnsWeightsEncoderLayer, ["one tensor", "(x, weights)"]),
    "own causal mask ANDed in": (check_decoder_layer, OwnCausalDecoderLayer, ["causal mask of its own", "tgt_mask"]),
    "tgt_mask given to the cross-attention": (check_decoder_layer, TargetMaskInCrossAttentionDecoderLayer,
                                              ["cross-attention", "src_mask"]),
    "linear1 and linear2 with each other's shapes": (check_feed_forward, SwappedShapesFeedForward,
                                                      ["`linear1`", "nn.Linear(24, 16)", "nn.Linear(d_model, d_ff)"]),
    # a fourth: what lesson 08's `layer.dropout.p = config.dropout` does not reach
    "a second dropout for the feed-forward sublayer": (check_encoder_layer, SecondDropoutEncoderLayer,
                                                       ["the output of `feed_forward`", "lesson 08", "`dropout`"]),
    "its own dropout for the cross-attention": (check_decoder_layer, CrossDropoutDecoderLayer,
                                                ["the output of `cross_attn`", "lesson 08"]),
    "F.dropout with a rate stored at construction": (check_encoder_layer, StoredRateEncoderLayer,
                                                     ["stays deterministic", "lesson 08", "read its `.p`"]),
}


@pytest.mark.parametrize("name", ISSUE_17_LAYERS)
def test_layers_name_what_passed_or_was_misnamed(name):
    checker, impl, phrases = ISSUE_17_LAYERS[name]
    expect(checker(impl), "failed", *phrases)


# --------------------------------------------------------------------------
# Defaults: the constructor's defaults are the exercise's (a seventh hidden set), read by position.


def test_the_defaults_of_the_layers_are_the_exercises():
    class FeedForwardTenth(FeedForward):
        def __init__(self, d_model, d_ff, dropout=0.1):
            super().__init__(d_model, d_ff, dropout)

    class EncoderLayerTenth(EncoderLayer):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.1):
            super().__init__(d_model, num_heads, d_ff, dropout)

    class EncoderLayerRenamedRate(EncoderLayer):  # the course passes the rate by position: any name will do
        def __init__(self, d_model, num_heads, d_ff, p_drop=0.0):
            super().__init__(d_model, num_heads, d_ff, p_drop)

    expect(check_feed_forward(FeedForwardTenth), "failed", "default of `dropout` (parameter 3)", "is 0.1",
           "dropout=0.0")
    expect(check_encoder_layer(EncoderLayerTenth), "failed", "default of `dropout` (parameter 4)", "is 0.1")
    expect(check_encoder_layer(EncoderLayerRenamedRate), "passed")


# --------------------------------------------------------------------------
# Found by a fresh hidden set of mistakes (issue 30): a message that only said "wrong values".


class ReluMovedAfterTheSecondLayer(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return torch.relu(self.linear2(self.dropout(self.linear1(x))))  # the ReLU after linear2, none between


def test_a_relu_moved_after_the_second_linear_layer_is_named():
    expect(check_feed_forward(ReluMovedAfterTheSecondLayer), "failed", "after the second linear layer instead of "
           "between the two")


class SelfAttentionPreLN(EncoderLayer):
    """The first sublayer pre-LN, the second post-LN."""

    def forward(self, x, mask=None):
        h = self.norm1(x)
        x = x + self.dropout(self.self_attn(h, h, h, mask))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


class CrossAttentionPreLN(DecoderLayer):
    """The cross-attention sublayer pre-LN, the others post-LN."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        h = self.norm2(x)
        x = x + self.dropout(self.cross_attn(h, memory, memory, src_mask))
        return self.norm3(x + self.dropout(self.feed_forward(x)))


def test_one_sublayer_in_pre_ln_order_is_named():
    expect(check_encoder_layer(SelfAttentionPreLN), "failed", "the self_attn sublayer is pre-LN", "post-LN")
    expect(check_decoder_layer(CrossAttentionPreLN), "failed", "the cross_attn sublayer is pre-LN", "post-LN")
