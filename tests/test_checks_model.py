"""Checker for lesson 05 (model): the whole Transformer.

The correct and wrong implementations below exist only to test the checker.
They reuse the layers written in test_checks_layers.py.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import expect
from course_utils.checks.model import check_transformer
from reference_modules import (
    DecoderLayer,
    EncoderLayer,
    FusedAttention,
    OwnNormDecoderLayer,
    OwnNormEncoderLayer,
    TorchAttentionDecoderLayer,
    TorchAttentionEncoderLayer,
)


class FusedEncoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__(d_model, num_heads, d_ff, dropout)
        self.self_attn = FusedAttention(d_model, num_heads, dropout)


class PositionalEncoding(nn.Module):
    """dropout(x + PE[:L]) with the sinusoidal table as a buffer."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        pos = torch.arange(max_len).unsqueeze(1)
        freq = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(pos * freq)
        pe[:, 1::2] = torch.cos(pos * freq)
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(1)])


class Transformer(nn.Module):
    """Encoder-decoder Transformer, post-LN, as in the paper."""

    enc_cls, dec_cls = EncoderLayer, DecoderLayer

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0):
        super().__init__()
        self.d_model, self.pad_id = d_model, pad_id
        self.src_embed = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, d_model)
        self.positional_encoding = PositionalEncoding(d_model, dropout, max_len)
        self.encoder_layers = nn.ModuleList([self.enc_cls(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])
        self.decoder_layers = nn.ModuleList([self.dec_cls(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def src_mask(self, src):
        return (src != self.pad_id)[:, None, None, :]  # (B, 1, 1, L_src)

    def tgt_mask(self, tgt):
        L = tgt.size(1)
        causal = torch.tril(torch.ones(L, L, dtype=torch.bool, device=tgt.device))
        return (tgt != self.pad_id)[:, None, None, :] & causal  # (B, 1, L, L)

    def embed(self, embedding, tokens):
        return self.positional_encoding(embedding(tokens) * math.sqrt(self.d_model))

    def encode(self, src):
        x = self.embed(self.src_embed, src)
        for layer in self.encoder_layers:
            x = layer(x, self.src_mask(src))
        return x

    def decode(self, tgt, memory, src):
        y = self.embed(self.tgt_embed, tgt)
        for layer in self.decoder_layers:
            y = layer(y, memory, self.src_mask(src), self.tgt_mask(tgt))
        return self.generator(y)

    def forward(self, src, tgt):
        return self.decode(tgt, self.encode(src), src)


# --------------------------------------------------------------------------
# Correct variants.


class TiedTransformer(Transformer):
    """Output projection tied to the target embedding; padding_idx; layers with F.scaled_dot_product_attention."""

    enc_cls = FusedEncoderLayer

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, dropout, max_len, pad_id)
        self.src_embed = nn.Embedding(src_vocab_size, d_model, padding_idx=pad_id)
        nn.init.xavier_normal_(self.src_embed.weight)
        self.generator = nn.Linear(d_model, tgt_vocab_size, bias=False)
        self.generator.weight = self.tgt_embed.weight


class Encoder(nn.Module):
    def __init__(self, vocab, d_model, num_heads, num_layers, d_ff, dropout, max_len):
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            self.layers.append(EncoderLayer(d_model, num_heads, d_ff, dropout))
        self.embedding = nn.Embedding(vocab, d_model)
        self.pe = PositionalEncoding(d_model, dropout, max_len)
        self.scale = d_model**0.5
        self.norm = nn.LayerNorm(d_model)

    def forward(self, src, mask):
        x = self.pe(self.embedding(src) * self.scale)
        for layer in self.layers:
            x = layer(x, mask=mask)
        return self.norm(x)


class Decoder(nn.Module):
    def __init__(self, vocab, d_model, num_heads, num_layers, d_ff, dropout, max_len):
        super().__init__()
        self.pe = PositionalEncoding(d_model, dropout, max_len)
        self.embedding = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            self.layers.append(DecoderLayer(d_model, num_heads, d_ff, dropout))
        self.norm = nn.LayerNorm(d_model)
        self.scale = math.sqrt(d_model)

    def forward(self, tgt, memory, src_mask, tgt_mask):
        y = self.pe(self.embedding(tgt) * self.scale)
        for layer in self.layers:
            y = layer(y, memory, src_mask=src_mask, tgt_mask=tgt_mask)
        return self.norm(y)


class StackTransformer(nn.Module):
    """Encoder and Decoder modules, final LayerNorms (like nn.Transformer), projection without bias, masks via torch.where."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0):
        super().__init__()
        self.pad_id = pad_id
        self.decoder = Decoder(tgt_vocab_size, d_model, num_heads, num_layers, d_ff, dropout, max_len)
        self.encoder = Encoder(src_vocab_size, d_model, num_heads, num_layers, d_ff, dropout, max_len)
        self.generator = nn.Linear(d_model, tgt_vocab_size, bias=False)

    def masks(self, src, tgt):
        src_mask = (src != self.pad_id).unsqueeze(1).unsqueeze(2)
        L = tgt.shape[1]
        future = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
        tgt_mask = torch.where(future, False, (tgt != self.pad_id)[:, None, None, :])
        return src_mask, tgt_mask

    def encode(self, src):
        return self.encoder(src, self.masks(src, src[:, :1])[0])

    def decode(self, tgt, memory, src):
        src_mask, tgt_mask = self.masks(src, tgt)
        return self.generator(self.decoder(tgt, memory, src_mask, tgt_mask))

    def forward(self, src, tgt):
        return self.decode(tgt, self.encode(src), src)


class TorchLayersTransformer(Transformer):
    """Layers built on nn.MultiheadAttention: checked by properties only."""

    enc_cls, dec_cls = TorchAttentionEncoderLayer, TorchAttentionDecoderLayer


class OwnNormTransformer(Transformer):
    """Hand-written LayerNorms (found by what they do, so values are still compared)."""

    enc_cls, dec_cls = OwnNormEncoderLayer, OwnNormDecoderLayer


class EmbeddingTiedTransformer(Transformer):
    """Tied the other way round (the embedding takes the projection's matrix); causal mask as a buffer."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, dropout, max_len, pad_id)
        self.tgt_embed.weight = self.generator.weight
        self.register_buffer("causal", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)), persistent=False)

    def tgt_mask(self, tgt):
        L = tgt.size(1)
        return (tgt != self.pad_id)[:, None, None, :] & self.causal[:L, :L]


class TorchTransformer(nn.Module):
    """nn.Transformer inside (its masks are True where blocked); accepted when it computes the same thing."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0, **options):
        super().__init__()
        self.d_model, self.pad_id = d_model, pad_id
        self.src_embed = nn.Embedding(src_vocab_size, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, d_model)
        self.positional_encoding = PositionalEncoding(d_model, dropout, max_len)
        self.core = nn.Transformer(d_model, num_heads, num_layers, num_layers, d_ff, dropout, batch_first=True,
                                   **options)
        self.generator = nn.Linear(d_model, tgt_vocab_size)

    def embed(self, embedding, tokens):
        return self.positional_encoding(embedding(tokens) * math.sqrt(self.d_model))

    def encode(self, src):
        return self.core.encoder(self.embed(self.src_embed, src), src_key_padding_mask=src == self.pad_id)

    def decode(self, tgt, memory, src):
        L = tgt.size(1)
        future = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
        y = self.core.decoder(self.embed(self.tgt_embed, tgt), memory, tgt_mask=future,
                              tgt_key_padding_mask=tgt == self.pad_id, memory_key_padding_mask=src == self.pad_id)
        return self.generator(y)

    def forward(self, src, tgt):
        return self.decode(tgt, self.encode(src), src)


class Float64Transformer(Transformer):
    """Parameters (and so logits) in float64."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.double()


CORRECT = [Transformer, TiedTransformer, OwnNormTransformer, EmbeddingTiedTransformer, Float64Transformer]

# Right logits, but not the contract's layout (names, or layers not built from the course's classes).
NOT_THE_CONTRACT_LAYOUT = [
    (StackTransformer, ["no submodules `src_embed`, `tgt_embed`, `positional_encoding`, `encoder_layers`"]),
    (TorchLayersTransformer, ["`encoder_layers.0` = TorchAttentionEncoderLayer", "fix that first"]),
    (TorchTransformer, ["no submodules `encoder_layers`, `decoder_layers`"]),
]


@pytest.mark.parametrize("impl, phrases", NOT_THE_CONTRACT_LAYOUT, ids=[i.__name__ for i, _ in NOT_THE_CONTRACT_LAYOUT])
def test_transformer_not_in_the_contract_layout_fails(impl, phrases):
    expect(check_transformer(impl), "failed", *phrases)


@pytest.mark.parametrize("impl", CORRECT)
def test_transformer_accepts_correct_variants(impl):
    expect(check_transformer(impl), "passed")


def test_transformer_says_what_it_recognised():
    tied = check_transformer(TiedTransformer)
    assert any("tied to the target embedding" in item for item in tied.checked), str(tied)
    result = check_transformer(OwnNormTransformer)  # found, so compared by value
    assert any("matches" in item for item in result.checked), str(result)


# --------------------------------------------------------------------------
# Wrong variants.


def _variant(**methods):
    class Variant(Transformer):
        pass

    for name, method in methods.items():
        setattr(Variant, name, method)
    return Variant


class SharedLayersTransformer(Transformer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        n = len(self.encoder_layers)
        self.encoder_layers = nn.ModuleList([self.encoder_layers[0]] * n)
        self.decoder_layers = nn.ModuleList([self.decoder_layers[0]] * n)


class LearnedTableTransformer(Transformer):
    """The positional table as a learnable nn.Parameter."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        table = self.positional_encoding.pe
        del self.positional_encoding.pe
        self.positional_encoding.pe = nn.Parameter(table.clone())


class UnusedModuleTransformer(Transformer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.final_norm = nn.LayerNorm(self.d_model)


class NoDropoutTransformer(Transformer):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, 0.0, max_len, pad_id)


class NoEncodeTransformer(Transformer):
    encode = None

    def forward(self, src, tgt):
        return self.decode(tgt, Transformer.encode(self, src), src)


def _decode_without_src_mask(self, tgt, memory, src):
    y = self.embed(self.tgt_embed, tgt)
    for layer in self.decoder_layers:
        y = layer(y, memory, None, self.tgt_mask(tgt))
    return self.generator(y)


def _decode_without_memory(self, tgt, memory, src):
    y = self.embed(self.tgt_embed, tgt)
    for layer in self.decoder_layers:
        y = layer(y, y, None, self.tgt_mask(tgt))
    return self.generator(y)


class LayersWithoutDropoutTransformer(Transformer):
    """Dropout after the positional encoding, but the layers are built with dropout=0."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, dropout, max_len, pad_id)
        self.encoder_layers = nn.ModuleList([EncoderLayer(d_model, num_heads, d_ff, 0.0) for _ in range(num_layers)])
        self.decoder_layers = nn.ModuleList([DecoderLayer(d_model, num_heads, d_ff, 0.0) for _ in range(num_layers)])
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)


class OwnNormUnscaledTransformer(OwnNormTransformer):
    def embed(self, embedding, tokens):
        return self.positional_encoding(embedding(tokens))


class LayerwiseMemoryTransformer(Transformer):
    """Decoder layer i attends to the output of encoder layer i, not to the last one."""

    enc_cls = FusedEncoderLayer

    def decode(self, tgt, memory, src):
        x, memories = self.embed(self.src_embed, src), []
        for layer in self.encoder_layers:
            x = layer(x, self.src_mask(src))
            memories.append(x)
        y = self.embed(self.tgt_embed, tgt)
        for layer, mem in zip(self.decoder_layers, memories):
            y = layer(y, mem, self.src_mask(src), self.tgt_mask(tgt))
        return self.generator(y)


def _torch_transformer(**options):
    class Variant(TorchTransformer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs, **options)

    return Variant


class UnscaledTorchTransformer(TorchTransformer):
    def embed(self, embedding, tokens):
        return self.positional_encoding(embedding(tokens))


class LayersDiscardedTransformer(Transformer):
    """The encoder loop calls each layer but never keeps its output."""

    def encode(self, src):
        x = self.embed(self.src_embed, src)
        for layer in self.encoder_layers:
            layer(x, self.src_mask(src))
        return x


class DropoutOutsideThePositionsTransformer(Transformer):
    """The positional encoding built with dropout 0, and one nn.Dropout after it: the same values, not the contract."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, dropout, max_len, pad_id)
        self.positional_encoding = PositionalEncoding(d_model, 0.0, max_len)
        self.embedding_dropout = nn.Dropout(dropout)

    def embed(self, embedding, tokens):
        return self.embedding_dropout(Transformer.embed(self, embedding, tokens))


class ReencodingTransformer(Transformer):
    """decode encodes src again and ignores the memory it is given."""

    def decode(self, tgt, memory, src):
        return Transformer.decode(self, tgt, Transformer.encode(self, src), src)


class CachedMaskTransformer(Transformer):
    """encode keeps its source mask on the model, and decode uses it: right only after encoding the same batch."""

    def encode(self, src):
        self._kept = self.src_mask(src)
        return Transformer.encode(self, src)

    def src_mask(self, src):
        return getattr(self, "_kept", None) if getattr(self, "_decoding", False) else Transformer.src_mask(self, src)

    def decode(self, tgt, memory, src):
        self._decoding = True
        try:
            return Transformer.decode(self, tgt, memory, src)
        finally:
            self._decoding = False


class TargetPositionsApartTransformer(Transformer):
    """A second PositionalEncoding for the target: swapping model.positional_encoding never reaches it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tgt_positions = PositionalEncoding(self.d_model, self.positional_encoding.dropout.p, 5000)

    def decode(self, tgt, memory, src):
        kept, self.positional_encoding = self.positional_encoding, self.tgt_positions
        try:
            return Transformer.decode(self, tgt, memory, src)
        finally:
            self.positional_encoding = kept


def _encode_dropping_memory(s, src):
    return s.positional_encoding.dropout(Transformer.encode(s, src))


def _decode_dropping_memory(s, tgt, memory, src):
    return Transformer.decode(s, tgt, s.positional_encoding.dropout(memory), src)


def _decode_memory_at_a_fixed_rate(s, tgt, memory, src):
    y = s.embed(s.tgt_embed, tgt)
    for layer in s.decoder_layers:
        y = layer(y, F.dropout(memory, 0.1, s.training), s.src_mask(src), s.tgt_mask(tgt))
    return s.generator(y)


def _encode_dropping_between_layers(s, src):
    x = s.embed(s.src_embed, src)
    for i, layer in enumerate(s.encoder_layers):
        x = layer(s.positional_encoding.dropout(x) if i else x, s.src_mask(src))
    return x


def _decode_dropping_between_layers(s, tgt, memory, src):
    y = s.embed(s.tgt_embed, tgt)
    for i, layer in enumerate(s.decoder_layers):
        y = layer(s.positional_encoding.dropout(y) if i else y, memory, s.src_mask(src), s.tgt_mask(tgt))
    return s.generator(y)


class RenamedHeadsTransformer(Transformer):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, n_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, n_heads, num_layers, d_ff, dropout, max_len, pad_id)


class RenamedVocabTransformer(Transformer):
    def __init__(self, src_vocab, tgt_vocab, d_model=512, num_heads=8, num_layers=6, d_ff=2048, dropout=0.1,
                 max_len=5000, pad_id=0):
        super().__init__(src_vocab, tgt_vocab, d_model, num_heads, num_layers, d_ff, dropout, max_len, pad_id)


WRONG = {
    # a seventh hidden set: dropout on the memory and between the layers; constructor names lessons 05 and 09 pass
    "memory dropped at the end of encode": (_variant(encode=_encode_dropping_memory),
                                            ["between `encoder_layers.1` and the memory of `decoder_layers.0`"]),
    "memory dropped at the start of decode": (_variant(decode=_decode_dropping_memory), ["the memory of"]),
    "memory dropped at a fixed rate": (_variant(decode=_decode_memory_at_a_fixed_rate), ["the memory of", "an extra dropout"]),
    "dropout between encoder layers": (_variant(encode=_encode_dropping_between_layers),
                                       ["between `encoder_layers.0` and `encoder_layers.1`"]),
    "dropout between decoder layers": (_variant(decode=_decode_dropping_between_layers),
                                       ["between `decoder_layers.0` and `decoder_layers.1`"]),
    "num_heads renamed": (RenamedHeadsTransformer, ["no parameter `num_heads`", "by name"]),
    "vocabulary sizes renamed": (RenamedVocabTransformer, ["no parameter `src_vocab_size` or `tgt_vocab_size`"]),
    "softmax at the end": (_variant(forward=lambda s, src, tgt: Transformer.forward(s, src, tgt).softmax(-1)), ["probabilities", "softmax"]),
    "log_softmax at the end": (_variant(forward=lambda s, src, tgt: Transformer.forward(s, src, tgt).log_softmax(-1)), ["log-probabilities"]),
    "no positional encoding": (_variant(embed=lambda s, emb, tokens: emb(tokens) * math.sqrt(s.d_model)), ["word order"]),
    "layer * N": (SharedLayersTransformer, ["share their weights", "[layer] * num_layers"]),
    "no src mask in cross-attention": (_variant(decode=_decode_without_src_mask), ["cross-attention does not use the source mask"]),
    "pad id hard-coded": (
        _variant(src_mask=lambda s, src: (src != 0)[:, None, None, :],
                 tgt_mask=lambda s, tgt: (tgt != 0)[:, None, None, :] & torch.tril(torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool))),
        ["token 0 as padding"],
    ),
    "no source mask at all": (_variant(src_mask=lambda s, src: None), ["padding is not masked"]),
    "no causal mask": (_variant(tgt_mask=lambda s, tgt: (tgt != s.pad_id)[:, None, None, :]), ["see the future"]),
    "encoder output unused": (_variant(decode=_decode_without_memory), ["does not use the encoder"]),
    "no sqrt(d_model)": (_variant(embed=lambda s, emb, tokens: s.positional_encoding(emb(tokens))), ["not multiplied by sqrt(d_model)"]),
    "times d_model": (_variant(embed=lambda s, emb, tokens: s.positional_encoding(emb(tokens) * s.d_model)), ["instead of sqrt(d_model)"]),
    "target times d_model": (_variant(embed=lambda s, emb, tokens: s.positional_encoding(emb(tokens) * (
        s.d_model if emb is s.tgt_embed else math.sqrt(s.d_model)))), ["target embeddings are multiplied by d_model"]),
    "source not scaled": (_variant(embed=lambda s, emb, tokens: s.positional_encoding(emb(tokens) * (
        1 if emb is s.src_embed else math.sqrt(s.d_model)))), ["source embeddings are not multiplied by sqrt"]),
    "scaled by sqrt(d_k)": (_variant(embed=lambda s, emb, tokens: s.positional_encoding(emb(tokens) * math.sqrt(
        s.d_model // s.decoder_layers[0].self_attn.num_heads))), ["multiplied by sqrt(d_k)"]),
    "learned table as a parameter": (LearnedTableTransformer, ["register_buffer", "nn.Parameter", "`pe`"]),
    "unused module": (UnusedModuleTransformer, ["receive no gradient", "final_norm.weight"]),
    "forward differs from decode": (
        _variant(forward=lambda s, src, tgt: Transformer.forward(s, src, tgt) * 2.0),
        ["decode(tgt, encode(src), src)", "equal forward"],
    ),
    "no encode method": (NoEncodeTransformer, ["no method `encode`"]),
    "dropout ignored": (NoDropoutTransformer, ["dropout is not applied"]),
    "dropout in eval mode": (
        _variant(embed=lambda s, emb, tokens: F.dropout(s.positional_encoding(emb(tokens) * math.sqrt(s.d_model)), 0.5 if s.positional_encoding.dropout.p else 0.0)),
        ["dropout is still active"],
    ),
    "no return": (_variant(forward=lambda s, src, tgt: None), ["forget a `return`"]),
    "scaled after the positional encoding": (
        _variant(embed=lambda s, emb, tokens: s.positional_encoding(emb(tokens)) * math.sqrt(s.d_model)),
        ["after adding the positional encoding"],
    ),
    "positional encoding in the encoder only": (
        _variant(embed=lambda s, emb, tokens: s.positional_encoding(emb(tokens) * math.sqrt(s.d_model)) if emb is s.src_embed
                 else s.positional_encoding.dropout(emb(tokens) * math.sqrt(s.d_model))),
        ["source embeddings only"],
    ),
    "no dropout after the positional encoding": (
        _variant(embed=lambda s, emb, tokens: emb(tokens) * math.sqrt(s.d_model) + s.positional_encoding.pe[: tokens.size(1)]),
        ["dropout=1.0", "sums of the embeddings and the positional encodings"],
    ),
    "dropout before adding the positions": (
        _variant(embed=lambda s, emb, tokens: s.positional_encoding.dropout(emb(tokens) * math.sqrt(s.d_model))
                 + s.positional_encoding.pe[: tokens.size(1)]),
        ["dropout=1.0"],
    ),
    "layers built without dropout": (LayersWithoutDropoutTransformer, ["dropout rate does not reach them"]),
    "target padding on the query axis": (
        _variant(tgt_mask=lambda s, tgt: (tgt != s.pad_id)[:, None, :, None]
                 & torch.tril(torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool))),
        ["NaN", "not padded queries"],
    ),
    "logits (length, batch, vocab)": (
        _variant(forward=lambda s, src, tgt: Transformer.forward(s, src, tgt).transpose(0, 1)),
        ["batch and length axes are swapped"],
    ),
    "own LayerNorms, no sqrt(d_model)": (OwnNormUnscaledTransformer, ["not multiplied by sqrt(d_model)"]),
    "memory from each encoder layer": (LayerwiseMemoryTransformer, ["wrong values", "output of the last encoder layer"]),
    "encoder outputs thrown away": (LayersDiscardedTransformer, ["returns the embedded source itself", "x = layer(x, src_mask)"]),
    "decode encodes again": (ReencodingTransformer, ["ignores its memory argument"]),
    "dropout outside the positional encoding": (DropoutOutsideThePositionsTransformer,
                                                ["built with dropout 0", "model.positional_encoding.dropout.p"]),
    "decode reuses encode's mask": (CachedMaskTransformer, ["after encode() of another batch", "its own arguments"]),
    "target positions from a module of their own": (TargetPositionsApartTransformer,
                                                     ["does not run `model.positional_encoding`", "lesson 09"]),
    "nn.Transformer without sqrt(d_model)": (UnscaledTorchTransformer, ["no submodules `encoder_layers`, `decoder_layers`"]),
    "nn.Transformer pre-LN": (_torch_transformer(norm_first=True), ["no submodules `encoder_layers`, `decoder_layers`"]),
    "nn.Transformer with GELU": (_torch_transformer(activation="gelu"), ["no submodules `encoder_layers`, `decoder_layers`"]),
}


@pytest.mark.parametrize("name", WRONG)
@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
def test_transformer_diagnoses(name):
    impl, phrases = WRONG[name]
    expect(check_transformer(impl), "failed", *phrases)


def test_target_embedded_with_the_source_table_names_the_tables_before_the_inputs():
    def decode(s, tgt, memory, src):
        y = s.embed(s.src_embed, tgt)
        for layer in s.decoder_layers:
            y = layer(y, memory, s.src_mask(src), s.tgt_mask(tgt))
        return s.generator(y)

    result = check_transformer(_variant(decode=decode))
    expect(result, "error", "index out of range", "target ids through tgt_embed")
    text = str(result)
    assert "If it is about sizes" not in text  # the hint for a size mismatch is not this crash's
    assert text.index("Likely cause") < text.index("It was called with")


def test_shared_embedding_with_different_vocabularies_is_an_error():
    class SharedEmbedding(Transformer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.tgt_embed = self.src_embed

    expect(check_transformer(SharedEmbedding), "failed", "nn.Embedding(tgt_vocab_size, d_model) = nn.Embedding(13, 16)")


def test_wrong_layers_inside_the_model_are_reported():
    class PreLN(EncoderLayer):
        def forward(self, x, mask=None):
            x = x + self.self_attn(self.norm1(x), self.norm1(x), self.norm1(x), mask)
            return x + self.feed_forward(self.norm2(x))

    class PreLNTransformer(Transformer):
        enc_cls = PreLN

    expect(check_transformer(PreLNTransformer), "failed", "`encoder_layers.0` = PreLN", "fix that first", "pre-LN")


def test_parameter_count_breakdown():
    class BiggerFeedForward(Transformer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.extra = nn.Linear(self.d_model, self.d_model)

        def decode(self, tgt, memory, src):
            return Transformer.decode(self, tgt, self.extra(memory), src)

    expect(check_transformer(BiggerFeedForward), "failed", "paper's layout has 10,685", "In yours", "other linear layers")


# --------------------------------------------------------------------------
# Outcomes.


def test_stub_is_not_attempted():
    class Stub(nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__()
            raise NotImplementedError()

    class StubForward(Transformer):
        def forward(self, src, tgt):
            raise NotImplementedError()

    expect(check_transformer(Stub), "not attempted", "NotImplementedError")
    expect(check_transformer(StubForward), "not attempted", "NotImplementedError")


def test_crash_is_an_error():
    class Crash(Transformer):
        def forward(self, src, tgt):
            return self.decode(tgt, self.encode(tgt), src[:, :1].float())

    expect(check_transformer(Crash), "error", "It was called with")


def test_in_place_change_of_the_input_is_reported():
    class Mutating(Transformer):
        def forward(self, src, tgt):
            src[:, 0] = 1
            return super().forward(src, tgt)

    expect(check_transformer(Mutating), "failed", "in place")


def test_not_a_class():
    expect(check_transformer(Transformer(11, 13, 16, 4, 1, 24)), "failed", "expected a class")


def test_transformer_blames_bias_free_attention_projections_on_the_attention():
    from reference_modules import BiasFreeDecoderLayer, BiasFreeEncoderLayer

    class BiasFreeTransformer(Transformer):
        enc_cls, dec_cls = BiasFreeEncoderLayer, BiasFreeDecoderLayer

    expect(check_transformer(BiasFreeTransformer), "failed", "without a bias")


# --------------------------------------------------------------------------
# Issue 9: the contract, initialisation, sizes, moves, measured dropout, components first.


class DefaultInitTransformer(Transformer):
    """Forgets the Xavier initialisation the exercise asks for."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.reset_parameters()


class RenamedTransformer(Transformer):
    """Right logits, but `generator` renamed (lesson 05's parameter breakdown puts it under "other")."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.out_proj = self.generator
        del self.generator

    def decode(self, tgt, memory, src):
        y = self.embed(self.tgt_embed, tgt)
        for layer in self.decoder_layers:
            y = layer(y, memory, self.src_mask(src), self.tgt_mask(tgt))
        return self.out_proj(y)


class NoPadIdTransformer(Transformer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pad = self.pad_id
        del self.pad_id

    def src_mask(self, src):
        return (src != self._pad)[:, None, None, :]

    def tgt_mask(self, tgt):
        L = tgt.size(1)
        return (tgt != self._pad)[:, None, None, :] & torch.tril(torch.ones(L, L, dtype=torch.bool))


class CPUMaskTransformer(Transformer):
    """Builds the causal mask without `device=`: on the CPU whatever the device of tgt."""

    def tgt_mask(self, tgt):
        L = tgt.size(1)
        return (tgt != self.pad_id)[:, None, None, :] & torch.tril(torch.ones(L, L, dtype=torch.bool))


class PlainTablePositionalEncoding(PositionalEncoding):
    """The table as a plain attribute: `.to()` and `.double()` leave it behind."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, max_len)
        table = self.pe
        del self.pe
        self.pe = table


class PlainTableTransformer(Transformer):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, dropout, max_len, pad_id)
        self.positional_encoding = PlainTablePositionalEncoding(d_model, dropout, max_len)


class ShortTablePositionalEncoding(PositionalEncoding):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__(d_model, dropout, min(max_len, 50))


class ShortTableTransformer(Transformer):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, dropout, max_len, pad_id)
        self.positional_encoding = ShortTablePositionalEncoding(d_model, dropout, max_len)


class ExtraDropoutTransformer(Transformer):
    """A second dropout on the embeddings, after the positional encoding's own."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.embed_dropout = nn.Dropout(self.positional_encoding.dropout.p)

    def embed(self, embedding, tokens):
        return self.embed_dropout(super().embed(embedding, tokens))


class PlainListTransformer(Transformer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        layers = list(self.encoder_layers)
        del self.encoder_layers
        self.encoder_layers = layers  # a plain list is not registered: the optimizer never sees these layers


CONTRACT_MISTAKES = {
    "layers in a plain list": (PlainListTransformer, ["plain Python list", "nn.ModuleList"]),
    "no Xavier initialisation": (DefaultInitTransformer, ["not initialised with Xavier/Glorot", "xavier_uniform_"]),
    "generator renamed": (RenamedTransformer, ["no submodule `generator`", "parameter breakdown"]),
    "pad_id not stored": (NoPadIdTransformer, ["`pad_id`", "self.pad_id = pad_id"]),
    "causal mask in the encoder": (
        _variant(encode=lambda s, src: (lambda x: [x := layer(x, s.tgt_mask(src)) for layer in s.encoder_layers][-1])(
            s.embed(s.src_embed, src))),
        ["cannot see later source words", "causal mask"]),
    "sqrt(d_model) on the source side only": (
        _variant(embed=lambda s, emb, tokens: s.positional_encoding(
            emb(tokens) * (math.sqrt(s.d_model) if emb is s.src_embed else 1.0))),
        ["target embeddings are not multiplied by sqrt(d_model)"]),
    "sqrt(d_model) on the target side only": (
        _variant(embed=lambda s, emb, tokens: s.positional_encoding(
            emb(tokens) * (math.sqrt(s.d_model) if emb is s.tgt_embed else 1.0))),
        ["source embeddings are not multiplied by sqrt(d_model)"]),
    "mask built on the CPU": (CPUMaskTransformer, ["creates a tensor on the CPU", "device=x.device", "torch.ones(L, L, dtype=torch.bool)"]),
    "table kept in a plain attribute": (PlainTableTransformer, ["register_buffer"]),
    "table shorter than max_len": (ShortTableTransformer, ["ShortTablePositionalEncoding", "fix that first"]),
    "extra dropout on the embeddings": (ExtraDropoutTransformer, ["a second time", "extra dropout"]),
    "GELU in the encoder layers": (
        type("GeluLayersTransformer", (Transformer,), {"enc_cls": __import__("test_checks_layers").GeluFeedForwardEncoderLayer}),
        ["`encoder_layers.0` = GeluFeedForwardEncoderLayer", "fix that first"]),
}


@pytest.mark.parametrize("name", CONTRACT_MISTAKES)
def test_transformer_diagnoses_contract_mistakes(name):
    impl, phrases = CONTRACT_MISTAKES[name]
    expect(check_transformer(impl), "failed", *phrases)


class ShortCausalBufferTransformer(Transformer):
    """A causal mask cached as a 50 x 50 buffer: fine for short sentences, wrong at lesson 06's max_len of 64."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("causal", torch.tril(torch.ones(50, 50, dtype=torch.bool)), persistent=False)

    def tgt_mask(self, tgt):
        L = tgt.size(1)
        return (tgt != self.pad_id)[:, None, None, :] & self.causal[:L, :L]


def test_sentences_of_max_len_are_tried():
    expect(check_transformer(ShortCausalBufferTransformer), "error", "not for 64 tokens")


def _decode_with_masks_swapped(self, tgt, memory, src):
    y = self.embed(self.tgt_embed, tgt)
    for layer in self.decoder_layers:
        y = layer(y, memory, self.tgt_mask(tgt), self.src_mask(src))
    return self.generator(y)


def test_masks_passed_the_wrong_way_round_are_named():
    expect(check_transformer(_variant(decode=_decode_with_masks_swapped)), "failed", "wrong way round",
           "layer(x, memory, src_mask, tgt_mask)")


# --------------------------------------------------------------------------
# Issue 17: a second dropout on the raw embeddings, before the positional encoding's own.


class EmbeddingDropoutTransformer(Transformer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.embedding_dropout = nn.Dropout(self.positional_encoding.dropout.p)

    def embed(self, embedding, tokens):
        return self.positional_encoding(self.embedding_dropout(embedding(tokens) * math.sqrt(self.d_model)))


def test_a_second_dropout_on_the_raw_embeddings_is_named():
    expect(check_transformer(EmbeddingDropoutTransformer), "failed", "embeddings", "before the positional encoding",
           "once")


class AliasedPositionsTransformer(Transformer):
    """Computes with positional_encoding under a second name: lesson 09's swap of positional_encoding goes unused."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pe = self.positional_encoding

    def embed(self, embedding, tokens):
        return self.pe(embedding(tokens) * math.sqrt(self.d_model))


class HeadsAfterLayersTransformer(Transformer):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_layers=6, num_heads=8, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, dropout, max_len, pad_id)


def test_positional_encoding_under_a_second_name_is_named():
    expect(check_transformer(AliasedPositionsTransformer), "failed", "never calls `self.positional_encoding`",
           "lesson 09")


def test_parameters_in_another_order_are_named():
    expect(check_transformer(HeadsAfterLayersTransformer), "failed", "the exercise's order is", "num_heads",
           "by position")


class FinalNormTransformer(Transformer):
    """A final LayerNorm after the decoder stack, as nn.Transformer has: not the paper's post-LN model."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.final_norm = nn.LayerNorm(self.d_model)

    def decode(self, tgt, memory, src):
        y = self.embed(self.tgt_embed, tgt)
        for layer in self.decoder_layers:
            y = layer(y, memory, self.src_mask(src), self.tgt_mask(tgt))
        return self.generator(self.final_norm(y))


class SourceTableForTheTargetTransformer(Transformer):
    def embed(self, embedding, tokens):
        return super().embed(self.src_embed, tokens)


class FinalEncoderNormTransformer(Transformer):
    """A final LayerNorm without gain or bias on the memory: no parameter betrays it, its values do."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.memory_norm = nn.LayerNorm(self.d_model, elementwise_affine=False)

    def encode(self, src):
        return self.memory_norm(super().encode(src))


class NotChainedTransformer(Transformer):
    """Each encoder layer reads the embedded source, and only the last one's output is kept."""

    def encode(self, src):
        x = self.embed(self.src_embed, src)
        for layer in self.encoder_layers:
            out = layer(x, self.src_mask(src))
        return out


def test_layers_not_chained_are_named():
    expect(check_transformer(NotChainedTransformer), "failed", "only the last of your transformer's `encoder_layers`",
           "x = layer(x, ...)")


class NormalEmbeddingsTransformer(Transformer):
    """Xavier everywhere, then the embeddings re-drawn with std 1/sqrt(d_model): not the exercise's init."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, *args, **kwargs):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, *args, **kwargs)
        nn.init.normal_(self.src_embed.weight, std=d_model ** -0.5)
        nn.init.normal_(self.tgt_embed.weight, std=d_model ** -0.5)


def test_embeddings_drawn_with_another_spread_are_named():
    expect(check_transformer(NormalEmbeddingsTransformer), "failed", "not initialised with Xavier/Glorot",
           "src_embed.weight")


@pytest.mark.parametrize("impl, where", [(FinalNormTransformer, "decoder stack"),
                                         (FinalEncoderNormTransformer, "encoder stack")])
def test_a_final_layer_norm_is_named(impl, where):
    result = check_transformer(impl)
    expect(result, "failed", "a final layernorm", "lesson 07", "remove it", where)
    assert not any("matches a model" in item for item in result.checked), str(result)


def test_target_ids_through_the_source_table_are_explained():
    expect(check_transformer(SourceTableForTheTargetTransformer), "error", "index out of range",
           "tgt_embed (tgt_vocab_size rows)")


def test_the_count_of_matrices_off_xavier_counts_each_once():
    """The wide model is measured too, but a matrix off in both instances is one matrix in the message."""
    result = check_transformer(DefaultInitTransformer)
    expect(result, "failed", "not initialised with Xavier/Glorot")
    counted = int(re.search(r"(\d+) weight matri", result.messages[0]).group(1))
    matrices = sum(p.dim() > 1 for p in DefaultInitTransformer(11, 13, 16, 4, 2, 24, 0.0, 64, 3).parameters())
    assert 0 < counted <= matrices, result.messages[0]


# --------------------------------------------------------------------------
# Found by a fresh hidden set of mistakes (issue 30): a crash inside a part, caused at the call.


class SwappedPositionalArguments(Transformer):
    """Builds PositionalEncoding(d_model, max_len, dropout): the crash is inside PositionalEncoding.__init__."""

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, pad_id=0):
        super().__init__(src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, dropout, max_len,
                         pad_id)
        self.positional_encoding = PositionalEncoding(d_model, max_len, dropout)


def test_max_len_and_dropout_swapped_at_the_call_are_named():
    expect(check_transformer(SwappedPositionalArguments), "failed", "with `max_len` and `dropout` swapped",
           "PositionalEncoding(d_model, dropout, max_len)")


class NormalisedInput(Transformer):
    """A LayerNorm on the embeddings plus positions, before the first layer (a pre-LN stack's norm, misplaced)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.input_norm = nn.LayerNorm(self.d_model)

    def embed(self, embedding, tokens):
        return self.input_norm(self.positional_encoding(embedding(tokens) * math.sqrt(self.d_model)))


def test_a_layer_norm_before_the_first_layer_is_named():
    expect(check_transformer(NormalisedInput), "failed", "normalises the embeddings plus positions before the first "
           "layer")
