"""The tests' reference model: correct implementations of the lesson 04/05 modules, by the exercise text.

They exist only to test the checkers (tests/test_checks_layers.py, tests/test_checks_model.py,
tests/test_checks_multi_head.py); several styles of each, so that the checkers are seen to accept more
than one way of writing it. The package's own stand-in (course_utils/checks/stages/standins.py) is the
other model of the course's layout; nothing else defines one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "LessonMultiHeadAttention",
    "scaled_dot_product_attention",
    "BlockDecoderLayer",
    "BlockEncoderLayer",
    "DecoderLayer",
    "EinsumAttention",
    "EncoderLayer",
    "FeedForward",
    "FusedAttention",
    "MultiHeadAttention",
    "OwnLayerNorm",
    "OwnNormDecoderLayer",
    "OwnNormEncoderLayer",
    "SequentialFeedForward",
    "SublayerConnection",
    "TorchAttention",
    "TorchAttentionDecoderLayer",
    "TorchAttentionEncoderLayer",
]


# --------------------------------------------------------------------------
# Multi-head attention (the lesson 04 contract), in three styles, and one that is not the contract's layout.


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
        self.attention_weights = scores.softmax(dim=-1)  # (B, H, L_q, L_k)
        weights = self.dropout(self.attention_weights)
        out = (weights @ v).transpose(1, 2).reshape(query.shape[0], query.shape[1], -1)
        return self.W_o(out)


class EinsumAttention(MultiHeadAttention):
    """Einsum, -1e4 instead of -inf (it fits float16), projections registered in another order."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        nn.Module.__init__(self)
        if d_model % num_heads:
            raise ValueError("num_heads must divide d_model")
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
            scores = torch.where(mask, scores, torch.full_like(scores, -1e4))
        self.attention_weights = torch.softmax(scores, -1)  # (B, H, L_q, L_k)
        weights = self.drop(self.attention_weights)
        out = torch.einsum("bhqk,bhkd->bqhd", weights, v).flatten(2)
        return self.W_o(out)


class FusedAttention(MultiHeadAttention):
    """F.scaled_dot_product_attention inside."""

    def forward(self, query, key, value, mask=None):
        q, k, v = self.split(self.W_q(query)), self.split(self.W_k(key)), self.split(self.W_v(value))
        with torch.no_grad():  # the fused kernel does not return its weights: computed for the record
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
            scores = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
            self.attention_weights = scores.softmax(-1)  # (B, H, L_q, L_k)
        p = self.dropout.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.W_o(out.transpose(1, 2).flatten(2))


class TorchAttention(nn.Module):
    """Wraps nn.MultiheadAttention: computes the right values, but not the contract's layout (no W_q...).

    Lesson 06 reads `cross_attn.W_q` and `W_k`: layers built on it fail their checkers now."""

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




def scaled_dot_product_attention(query, key, value, mask=None):
    """A correct lesson-01 function, as the learner's classes call it from their notebook."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., L_q, L_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ value, weights  # (..., L_q, d_v), (..., L_q, L_k)



class LessonMultiHeadAttention(nn.Module):
    """The lesson's way: calls a lesson-01 scaled_dot_product_attention; test_checks_multi_head's mistakes override one step each."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def split(self, x):
        B, L, _ = x.shape
        return x.view(B, L, self.num_heads, self.d_k).transpose(1, 2)  # (B, H, L, d_k)

    def merge(self, x):
        B, _, L, _ = x.shape
        return x.transpose(1, 2).contiguous().view(B, L, self.num_heads * self.d_k)  # (B, L, d_model)

    def project(self, query, key, value):
        return self.W_q(query), self.W_k(key), self.W_v(value)

    def attend(self, q, k, v, mask):
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        self.attention_weights = weights.detach()  # (B, H, L_q, L_k)
        if self.training and self.dropout.p > 0:
            out = self.dropout(weights) @ v
        return out

    def forward(self, query, key, value, mask=None):
        q, k, v = self.project(query, key, value)
        out = self.attend(self.split(q), self.split(k), self.split(v), mask)  # (B, H, L_q, d_k)
        return self.W_o(self.merge(out))


# --------------------------------------------------------------------------
# Feed-forward networks.

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




# --------------------------------------------------------------------------
# Encoder and decoder layers.

class SublayerConnection(nn.Module):
    """LayerNorm(x + dropout(sublayer(x))) as a reusable block."""

    def __init__(self, d_model, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=1e-6)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return self.norm(x + self.drop(sublayer(x)))


class EncoderLayer(nn.Module):
    """Post-LN: LayerNorm(x + dropout(sublayer(x))); the attention drops its weights too, as the lesson says."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


class BlockEncoderLayer(nn.Module):
    """Norms registered first, in a ModuleList of connection blocks; einsum attention; Sequential FFN.

    Right values, but not the contract's names (self_attn, feed_forward, norm1, norm2): fails now."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.connections = nn.ModuleList([SublayerConnection(d_model, dropout) for _ in range(2)])
        self.feed = SequentialFeedForward(d_model, d_ff, dropout)
        self.attention = EinsumAttention(d_model, num_heads, dropout)

    def forward(self, x, mask=None):
        x = self.connections[0](x, lambda y: self.attention(y, y, y, mask=mask))
        return self.connections[1](x, self.feed)


class TorchAttentionEncoderLayer(EncoderLayer):
    """nn.MultiheadAttention inside: the layout cannot be matched, the properties still hold."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = TorchAttention(d_model, num_heads)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention, feed-forward; post-LN."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, src_mask)))
        return self.norm3(x + self.dropout(self.feed_forward(x)))


class ParameterFeedForwardLinear(SequentialFeedForward):
    pass


class BlockDecoderLayer(nn.Module):
    """Cross-attention registered before self-attention; connection blocks in a ModuleList (not the contract's names)."""

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


class TorchAttentionDecoderLayer(DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = TorchAttention(d_model, num_heads)
        self.cross_attn = TorchAttention(d_model, num_heads)


class OwnLayerNorm(nn.Module):
    """A LayerNorm written by hand (not an nn.LayerNorm): the checkers find it by what it does."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d_model))
        self.shift = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.gain * (x - mean) / torch.sqrt(var + self.eps) + self.shift


class OwnNormEncoderLayer(EncoderLayer):
    """Hand-written LayerNorms; attention dropout too, as in nn.TransformerEncoderLayer."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.norm1, self.norm2 = OwnLayerNorm(d_model), OwnLayerNorm(d_model)


class OwnNormDecoderLayer(DecoderLayer):
    """Hand-written LayerNorms with names of their own (a_2, b_2, as the Annotated Transformer's, but with
    nn.LayerNorm's statistics: the variance over d_model, eps inside the square root)."""

    class AnnotatedNorm(nn.Module):
        def __init__(self, d_model, eps=1e-6):
            super().__init__()
            self.a_2 = nn.Parameter(torch.ones(d_model))
            self.b_2 = nn.Parameter(torch.zeros(d_model))
            self.eps = eps

        def forward(self, x):
            centred = x - x.mean(-1, keepdim=True)
            return self.a_2 * centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps) + self.b_2

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (self.AnnotatedNorm(d_model) for _ in range(3))


class BiasFreeAttention(MultiHeadAttention):
    """Not the exercise's: it asks for nn.Linear's default bias (later cells copy it). For the layer checkers'
    tests, which blame it on the attention."""

    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__(d_model, num_heads, dropout)
        for name in ("W_q", "W_k", "W_v", "W_o"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=False))


class BiasFreeEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = BiasFreeAttention(d_model, num_heads, dropout)


class BiasFreeDecoderLayer(DecoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = BiasFreeAttention(d_model, num_heads, dropout)
        self.cross_attn = BiasFreeAttention(d_model, num_heads, dropout)
