"""The catalogue of check_to_torch_transformer: correct copies into nn.Transformer, and wrong ones with their messages.

The slips of the checker's tables (in_proj_weight's blocks transposed or in another order, ...) are made into answers
and tried by tests/test_slips.py; the wrong copies here are written as a learner would."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import expect

from course_utils.checks.conversion import check_to_torch_transformer

class _Translator(nn.Module):
    def __init__(self, model, core, *, scale=True, flip_masks=False, no_causal=False, cpu_mask=False):
        super().__init__()
        self.d_model, self.pad_id = model.d_model, model.pad_id
        self.src_embed, self.tgt_embed = copy.deepcopy(model.src_embed), copy.deepcopy(model.tgt_embed)
        self.positional_encoding = copy.deepcopy(model.positional_encoding)
        self.generator = copy.deepcopy(model.generator)
        self.core = core
        self.scale, self.flip_masks, self.no_causal, self.cpu_mask = scale, flip_masks, no_causal, cpu_mask

    def forward(self, src, tgt):
        factor = math.sqrt(self.d_model) if self.scale else 1.0
        x = self.positional_encoding(self.src_embed(src) * factor)  # (B, L_src, d_model)
        y = self.positional_encoding(self.tgt_embed(tgt) * factor)  # (B, L_tgt, d_model)
        src_pad, tgt_pad = src == self.pad_id, tgt == self.pad_id  # True = hidden
        if self.flip_masks:
            src_pad, tgt_pad = ~src_pad, ~tgt_pad
        L = tgt.size(1)
        device = None if self.cpu_mask else tgt.device  # None: the CPU, wrong on a GPU
        causal = None if self.no_causal else torch.ones(L, L, dtype=torch.bool, device=device).triu(1)  # True: hidden
        out = self.core(x, y, tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                        memory_key_padding_mask=src_pad, tgt_is_causal=not self.no_causal)
        return self.generator(out)


def _bias(linear):
    return linear.bias if linear.bias is not None else torch.zeros(linear.out_features)


def _copy_linear(src, dst):
    dst.weight.copy_(src.weight)
    dst.bias.copy_(_bias(src))


def _copy_norm(src, dst):
    """Scale then shift, whatever the learner's LayerNorm calls them."""
    for mine, theirs in zip(dst.parameters(), src.parameters()):
        mine.copy_(theirs)


def _copy_attention(dst, src):
    names = ("W_q", "W_k", "W_v")
    dst.in_proj_weight.copy_(torch.cat([getattr(src, n).weight for n in names]))
    dst.in_proj_bias.copy_(torch.cat([_bias(getattr(src, n)) for n in names]))
    _copy_linear(src.W_o, dst.out_proj)


def _convert(model, *, keep_final_norms=False, norm_first=False,
             activation="relu", swap_norms=False, separate_stacks=False, heads_from="num_heads", dropout=None,
             **forward_options):
    layer = model.encoder_layers[0]
    d_model, heads = model.d_model, getattr(layer.self_attn, heads_from)
    d_ff = layer.feed_forward.linear1.out_features
    n_enc, n_dec = len(model.encoder_layers), len(model.decoder_layers)
    rate = model.positional_encoding.dropout.p if dropout is None else dropout  # the model's rate, by contract
    core = nn.Transformer(d_model, heads, n_enc, n_dec, d_ff, dropout=rate, activation=activation,
                          batch_first=True, norm_first=norm_first)
    if not keep_final_norms:
        core.encoder.norm, core.decoder.norm = None, None
    with torch.no_grad():
        for ours, theirs in zip(model.encoder_layers, core.encoder.layers):
            _copy_attention(theirs.self_attn, ours.self_attn)
            for lin in ("linear1", "linear2"):
                _copy_linear(getattr(ours.feed_forward, lin), getattr(theirs, lin))
            _copy_norm(ours.norm1, theirs.norm1)
            _copy_norm(ours.norm2, theirs.norm2)
        for ours, theirs in zip(model.decoder_layers, core.decoder.layers):
            _copy_attention(theirs.self_attn, ours.self_attn)
            _copy_attention(theirs.multihead_attn, ours.cross_attn)
            for lin in ("linear1", "linear2"):
                _copy_linear(getattr(ours.feed_forward, lin), getattr(theirs, lin))
            names = ("norm2", "norm1", "norm3") if swap_norms else ("norm1", "norm2", "norm3")
            for mine, yours in zip(("norm1", "norm2", "norm3"), names):
                _copy_norm(getattr(ours, yours), getattr(theirs, mine))
    return _Translator(model, core, **forward_options)


def to_torch_transformer(model):
    return _convert(model)


def _conversion(**options):
    def fn(model):
        return _convert(model, **options)

    fn.__name__ = "_".join(options)
    return fn


def modifies_the_model(model):
    with torch.no_grad():
        model.generator.weight.mul_(1.0)
        model.generator.bias.add_(1.0)
    return _convert(model)


def float_causal_mask(model):
    """PyTorch's own causal mask (floats, -inf above the diagonal) and the stacks' final norms as nn.Identity."""
    converted = _convert(model, keep_final_norms=True)
    converted.core.encoder.norm, converted.core.decoder.norm = nn.Identity(), nn.Identity()

    def forward(src, tgt):
        x = converted.positional_encoding(converted.src_embed(src) * math.sqrt(converted.d_model))
        y = converted.positional_encoding(converted.tgt_embed(tgt) * math.sqrt(converted.d_model))
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device)  # (L, L) floats
        src_pad = (src == converted.pad_id).float().masked_fill(src == converted.pad_id, float("-inf"))
        tgt_pad = (tgt == converted.pad_id).float().masked_fill(tgt == converted.pad_id, float("-inf"))
        return converted.generator(converted.core(x, y, tgt_mask=causal, src_key_padding_mask=src_pad,
                                                  tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad))

    converted.forward = forward
    return converted


def separate_stacks(model):
    """nn.TransformerEncoder and nn.TransformerDecoder without nn.Transformer, filled with load_state_dict."""
    reference = _convert(model)  # only to borrow a state dict with PyTorch's names

    class Stacks(nn.Module):
        def __init__(self):
            super().__init__()
            layer = model.encoder_layers[0]
            d, h = model.d_model, layer.self_attn.num_heads
            d_ff = layer.feed_forward.linear1.out_features
            self.translator = copy.deepcopy(reference)
            rate = model.positional_encoding.dropout.p
            enc = nn.TransformerEncoderLayer(d, h, d_ff, dropout=rate, batch_first=True)
            dec = nn.TransformerDecoderLayer(d, h, d_ff, dropout=rate, batch_first=True)
            self.encoder = nn.TransformerEncoder(enc, len(model.encoder_layers), enable_nested_tensor=False)
            self.decoder = nn.TransformerDecoder(dec, len(model.decoder_layers))
            self.encoder.load_state_dict({k[len("encoder."):]: v for k, v in reference.core.state_dict().items()
                                          if k.startswith("encoder.")})
            self.decoder.load_state_dict({k[len("decoder."):]: v for k, v in reference.core.state_dict().items()
                                          if k.startswith("decoder.")})
            del self.translator.core  # only the embeddings, positional encoding and generator stay

        def forward(self, src, tgt):
            t = self.translator
            x = t.positional_encoding(t.src_embed(src) * math.sqrt(t.d_model))
            y = t.positional_encoding(t.tgt_embed(tgt) * math.sqrt(t.d_model))
            src_pad = src == t.pad_id
            causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device).isinf()  # True above
            memory = self.encoder(x, src_key_padding_mask=src_pad)
            out = self.decoder(y, memory, tgt_mask=causal, tgt_key_padding_mask=tgt == t.pad_id,
                               memory_key_padding_mask=src_pad)
            return t.generator(out)

    return Stacks()


def out_proj_transposed(model):
    """Copies each square W_o with `.T`, as if nn.Linear stored (in, out)."""
    converted = _convert(model)
    with torch.no_grad():
        for layer in [*converted.core.encoder.layers, *converted.core.decoder.layers]:
            layer.self_attn.out_proj.weight.copy_(layer.self_attn.out_proj.weight.t().clone())
    return converted


def no_memory_padding_mask(model):
    """Forgets memory_key_padding_mask: the cross-attention reads the padded source positions."""
    converted = _convert(model)

    def forward(src, tgt):
        x = converted.positional_encoding(converted.src_embed(src) * math.sqrt(converted.d_model))
        y = converted.positional_encoding(converted.tgt_embed(tgt) * math.sqrt(converted.d_model))
        causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device).triu(1)
        out = converted.core(x, y, tgt_mask=causal, src_key_padding_mask=src == converted.pad_id,
                             tgt_key_padding_mask=tgt == converted.pad_id)
        return converted.generator(out)

    converted.forward = forward
    return converted


def subclassed(model):
    """A subclass of nn.Transformer that carries the embeddings itself; the causal mask from PyTorch's helper."""

    class Full(nn.Transformer):
        def forward(self, src, tgt):
            x = self.pe(self.src_embed(src) * math.sqrt(self.d_model))
            y = self.pe(self.tgt_embed(tgt) * math.sqrt(self.d_model))
            causal = self.generate_square_subsequent_mask(tgt.size(1), tgt.device, torch.float32)  # floats, -inf above
            out = super().forward(x, y, tgt_mask=causal, src_key_padding_mask=src == self.pad_id,
                                  tgt_key_padding_mask=tgt == self.pad_id, memory_key_padding_mask=src == self.pad_id)
            return self.generator(out)

    layer = model.encoder_layers[0]
    full = Full(model.d_model, layer.self_attn.num_heads, len(model.encoder_layers), len(model.decoder_layers),
                layer.feed_forward.linear1.out_features, dropout=model.positional_encoding.dropout.p, batch_first=True)
    full.encoder.norm, full.decoder.norm = None, None
    full.pad_id = model.pad_id
    full.src_embed, full.tgt_embed = copy.deepcopy(model.src_embed), copy.deepcopy(model.tgt_embed)
    full.pe, full.generator = copy.deepcopy(model.positional_encoding), copy.deepcopy(model.generator)
    reference = _convert(model)
    full.load_state_dict(reference.core.state_dict(), strict=False)
    return full


def shares_the_embeddings(model):
    """Keeps the model's own embedding modules: one optimizer step on the copy would change the model."""
    converted = _convert(model)
    converted.src_embed, converted.tgt_embed = model.src_embed, model.tgt_embed
    return converted


def relu_as_a_lambda(model):
    """A ReLU given as a function of its own: what it computes is what counts."""
    converted = _convert(model)
    for layer in [*converted.core.encoder.layers, *converted.core.decoder.layers]:
        layer.activation = lambda x: F.relu(x)
    return converted


def positions_without_dropout(model):
    """The positional encoding's dropout left out of the copy (as when pe is added by hand)."""
    converted = _convert(model)
    converted.positional_encoding.dropout = nn.Identity()
    return converted


def positions_with_a_new_dropout(model):
    converted = _convert(model)
    converted.positional_encoding.dropout = nn.Dropout(0.1)  # the usual rate, not the model's
    return converted


def norms_with_a_large_eps(model):
    converted = _convert(model)
    for layer in [*converted.core.encoder.layers, *converted.core.decoder.layers]:
        for norm in (m for m in layer.modules() if isinstance(m, nn.LayerNorm)):
            norm.eps = 1e-3
    return converted


def puts_the_model_in_training_mode(model):
    model.train()
    return _convert(model)


def delegates_to_a_copy(model):
    """Fills nn.Transformer, then computes with a copy of the learner's model: nn.Transformer never runs."""
    converted = _convert(model)
    twin = copy.deepcopy(model)
    converted.forward = lambda src, tgt: twin(src, tgt)
    return converted


def frozen_copy(model):
    """A copy for comparison only: its parameters frozen. Lesson 07 then cannot train it."""
    return _convert(model).requires_grad_(False)


def forward_without_gradients(model):
    """The copy's forward runs under torch.no_grad(): the logits match, and lesson 07's training step crashes."""
    converted = _convert(model)
    converted.forward = torch.no_grad()(converted.forward)
    return converted


CORRECT = [to_torch_transformer, float_causal_mask, separate_stacks, subclassed, relu_as_a_lambda]
WRONG = [
    (_conversion(keep_final_norms=True), ["final layernorm", "encoder.norm = none"]),
    (_conversion(norm_first=True), ["norm_first"]),
    (_conversion(activation="gelu"), ["activation"]),
    (_conversion(swap_norms=True), ["norm1 should hold your norm1 (it holds your norm2)"]),
    (_conversion(flip_masks=True), ["opposite of ours"]),
    (_conversion(no_causal=True), ["receives no tgt_mask", "generate_square_subsequent_mask"]),
    (_conversion(cpu_mask=True), ["creates a tensor on the cpu", "device=tgt.device"]),
    (_conversion(scale=False), ["input of the first encoder layer", "sqrt(d_model)"]),
    (modifies_the_model, ["changed the weights of your model"]),
    (lambda model: model, ["nn.transformerencoderlayer"]),
    (no_memory_padding_mask, ["receives no memory_key_padding_mask"]),
    # issue 17
    (shares_the_embeddings, ["shares", "src_embed.weight", "copy"]),
    (_conversion(heads_from="d_k"), ["num_heads", "6", "4"]),
    (_conversion(dropout=0.1), ["dropout", "0.25"]),
    # a second hidden set
    (positions_without_dropout, ["training mode", "applies no dropout on the embeddings plus positions",
                                 "positional encoding's dropout"]),
    (positions_with_a_new_dropout, ["1 / (1 - 0.10)", "1 / (1 - 0.25)", "new nn.Dropout"]),
    (delegates_to_a_copy, ["ran 0 times", "not a copy of your model"]),
    (norms_with_a_large_eps, ["eps = 0.001", "layer_norm_eps"]),
    (puts_the_model_in_training_mode, ["changed the mode of your model"]),
    # a third hidden set: copies that lesson 07 cannot train
    (frozen_copy, ["do not require gradients", "lesson 07 trains the copy"]),
    (forward_without_gradients, ["torch.no_grad()", "lesson 07 trains the copy"]),
    # a fifth hidden set
    (out_proj_transposed, ["out_proj should hold your w_o", "holds the transpose of your weight", "without `.t`"]),
]


@pytest.mark.parametrize("fn", CORRECT, ids=[fn.__name__ for fn in CORRECT])
def test_to_torch_transformer_accepts_correct_variants(fn):
    result = check_to_torch_transformer(fn)
    assert result.passed, f"{fn.__name__}:\n{result}"


@pytest.mark.parametrize("fn, phrases", WRONG, ids=[str(i) for i in range(len(WRONG))])
def test_to_torch_transformer_diagnoses_mistakes(fn, phrases):
    result = check_to_torch_transformer(fn)
    expect(result, "failed", *phrases)


def stub(*args, **kwargs):
    raise NotImplementedError()


def test_to_torch_transformer_stub_is_not_attempted():
    expect(check_to_torch_transformer(stub), "not attempted")


# --------------------------------------------------------------------------
# Found by a fresh hidden set of mistakes (issue 30): dropout measured through the port in training mode.


def forward_forces_eval_mode(model):
    """The copy's forward switches nn.Transformer to eval mode: its layers never drop, and lesson 07 trains it."""
    converted = _convert(model)
    original = converted.forward

    def forward(src, tgt):
        converted.core.eval()
        return original(src, tgt)

    converted.forward = forward
    return converted


def test_a_copy_whose_forward_forces_eval_mode_is_caught():
    expect(check_to_torch_transformer(forward_forces_eval_mode), "failed", "in training mode",
           "does not run as a training-mode dropout", "no `.eval()`")
