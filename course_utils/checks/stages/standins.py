"""The package's own stand-in for a learner's model: the course's layout, PyTorch's arithmetic.

Checkers that take the learner's code for what surrounds a model (``decode_step``
reads the model's parts one step at a time; ``to_torch_transformer`` copies
them into ``nn.Transformer``) need a model with exactly the names and shapes of
lesson 05's contract: :class:`CourseTransformer`. Its attention is PyTorch's
``F.scaled_dot_product_attention`` behind lesson 04's ``W_q``, ``W_k``, ``W_v``,
``W_o``; its weights are random (LayerNorm gains and shifts too, so that a
skipped norm shows). It is written once, here: the checkers and the tests'
reference model (``tests/reference_modules.py``) are the only two models.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .._core import generator

# d_k (6) differs from the number of heads (4), and d_ff from d_model: a size read from the wrong attribute shows.
D_MODEL, HEADS, LAYERS, D_FF, SRC_VOCAB, TGT_VOCAB, MAX_POS = 24, 4, 2, 40, 11, 13, 40
#: the rate of every dropout (the model is used in eval mode, where they do nothing)
DROPOUT = 0.25


class _Attention(nn.Module):
    """Lesson 04's layout: W_q, W_k, W_v, W_o, num_heads, d_k (its forward is PyTorch's attention)."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_model // num_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, query, key, value, mask=None):
        B, L_q, L_k, H, d_k = query.size(0), query.size(1), key.size(1), self.num_heads, self.d_k
        q = self.W_q(query).view(B, L_q, H, d_k).transpose(1, 2)  # (B, H, L_q, d_k)
        k = self.W_k(key).view(B, L_k, H, d_k).transpose(1, 2)  # (B, H, L_k, d_k)
        v = self.W_v(value).view(B, L_k, H, d_k).transpose(1, 2)  # (B, H, L_k, d_k)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, L_q, d_k)
        return self.W_o(out.transpose(1, 2).reshape(B, L_q, self.d_model))  # (B, L_q, d_model)


class _FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.linear1, self.linear2, self.dropout = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), nn.Dropout(DROPOUT)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


class _DecoderLayer(nn.Module):
    def __init__(self, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        self.self_attn, self.cross_attn = _Attention(d_model, num_heads), _Attention(d_model, num_heads)
        self.feed_forward = _FeedForward(d_model, d_ff)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, src_mask)))
        return self.norm3(x + self.dropout(self.feed_forward(x)))


class _EncoderLayer(nn.Module):
    def __init__(self, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        self.self_attn, self.feed_forward = _Attention(d_model, num_heads), _FeedForward(d_model, d_ff)
        self.norm1, self.norm2, self.dropout = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.Dropout(DROPOUT)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


class _PositionalEncoding(nn.Module):
    """Lesson 03's layout: the table in the buffer ``pe`` (max_len, d_model), then dropout."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        where = torch.arange(max_len).double()[:, None]  # (max_len, 1)
        rates = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (d_model / 2,)
        table = torch.zeros(max_len, d_model, dtype=torch.float64)
        table[:, 0::2], table[:, 1::2] = torch.sin(where * rates), torch.cos(where * rates)
        self.register_buffer("pe", table.float())
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


class CourseTransformer(nn.Module):
    """A stand-in with the layout of lesson 05's Transformer; decode() recomputes the whole prefix."""

    def __init__(self, seed: int, pad_id: int):
        super().__init__()
        self.d_model, self.pad_id = D_MODEL, pad_id
        self.src_embed, self.tgt_embed = nn.Embedding(SRC_VOCAB, D_MODEL), nn.Embedding(TGT_VOCAB, D_MODEL)
        self.positional_encoding = _PositionalEncoding(D_MODEL, MAX_POS)
        self.encoder_layers = nn.ModuleList(_EncoderLayer(D_MODEL, HEADS, D_FF) for _ in range(LAYERS))
        self.decoder_layers = nn.ModuleList(_DecoderLayer(D_MODEL, HEADS, D_FF) for _ in range(LAYERS))
        self.generator = nn.Linear(D_MODEL, TGT_VOCAB)
        g = generator(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "norm" in name:  # LayerNorm gains and shifts away from 1 and 0, so that a skipped norm shows
                    p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.3 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
        self.eval()

    def encode(self, src):
        x = self.positional_encoding(math.sqrt(self.d_model) * self.src_embed(src))  # (B, L_src, d_model)
        mask = (src != self.pad_id)[:, None, None, :]  # (B, 1, 1, L_src), True = visible
        for block in self.encoder_layers:
            x = block(x, mask)
        return x

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt, self.encode(src), src)

    def decode(self, tgt, memory, src, positions=None, keys="causal", src_padding=True):
        """Full recomputation (the oracle); the keyword arguments replay known mistakes."""
        B, L = tgt.shape
        pe = self.positional_encoding.pe
        where = torch.arange(L) if positions is None else positions
        x = self.positional_encoding.dropout(self.tgt_embed(tgt) * math.sqrt(self.d_model) + pe[where])  # (B, L, d_model)
        real = src != self.pad_id
        src_mask = real[:, None, None, :] if src_padding else None  # (B, 1, 1, L_src), True = visible
        if keys == "causal":
            tgt_mask = torch.ones(L, L, dtype=torch.bool).tril() & (tgt != self.pad_id)[:, None, None, :]  # (B, 1, L, L)
        elif keys == "self_only":  # each position sees itself only: a cache that is never read
            tgt_mask = torch.eye(L, dtype=torch.bool)
        elif keys == "newest_two":  # itself and the position before: a cache that keeps only its newest entry
            tgt_mask = torch.ones(L, L, dtype=torch.bool).tril() & torch.ones(L, L, dtype=torch.bool).triu(-1)
        else:  # "first_only": each position sees position 0 only (the causal mask's first row)
            tgt_mask = torch.zeros(L, L, dtype=torch.bool)
            tgt_mask[:, 0] = True
        for block in self.decoder_layers:
            x = block(x, memory, src_mask, tgt_mask)
        return self.generator(x)  # (B, L, V)




def select_rows(cache, rows: torch.Tensor):
    """The cache of the rows ``rows``: every tensor indexed along its first dimension (lesson 07's reorder_cache)."""
    if isinstance(cache, torch.Tensor):
        return cache.index_select(0, rows)
    if isinstance(cache, dict):
        return {key: select_rows(value, rows) for key, value in cache.items()}
    if isinstance(cache, (list, tuple)):
        return type(cache)(select_rows(value, rows) for value in cache)
    return cache

__all__ = ["CourseTransformer", "D_FF", "D_MODEL", "DROPOUT", "HEADS", "LAYERS", "MAX_POS", "SRC_VOCAB", "TGT_VOCAB", "select_rows"]
