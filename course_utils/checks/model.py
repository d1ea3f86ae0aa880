"""Checker for lesson 05: the whole encoder-decoder ``Transformer``.

The contract first: the submodule names and attributes later lessons read
(``src_embed``, ``tgt_embed``, ``positional_encoding``, ``encoder_layers``,
``decoder_layers``, ``generator``; ``d_model``, ``pad_id``), then the own
checkers of the components the learner's model uses (its layers, its
``PositionalEncoding``, the lesson 02 mask functions its methods call), blamed
first when they fail. Then small models built from the learner's class
(different source and target vocabularies, a pad id other than 0, source and
target of different lengths) are tested for what a translation model must do:
logits of the right shape, ``decode(tgt, encode(src), src) == forward(src, tgt)``,
an encoder that sees the whole source, causality, invariance to padding,
sensitivity to word order, gradients reaching every parameter, distinct
layers, the parameter count of the paper's layout, Xavier/Glorot
initialisation (measured spread), sentences of ``max_len`` tokens, ``.double()``
moving every tensor, no tensor created off the input's device, and dropout
measured in training. Where the parts can be found, the logits are compared
with a model assembled from PyTorch's own encoder and decoder layers carrying
the learner's weights (``_assembled``); its flags are the known slips around the
stacks (the embeddings' scale, the positions, extra LayerNorms), ``Slip``
records replayed by the one matcher. The whole check is declared at the bottom,
``TRANSFORMER``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import stages
from .stages import anatomy, twins
from ._core import Check, CheckResult, Raised, close_enough, fmt_shape, generator, identical
from .. import contracts
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip, same_tensor
from .stages.measuring import drop_pattern
from .stages.hooks import Recorder

_SRC_VOCAB, _TGT_VOCAB = 11, 13
_D_MODEL, _NUM_HEADS, _NUM_LAYERS, _D_FF = 16, 4, 2, 24
_MAX_LEN, _PAD = 64, 3
_B, _L_SRC, _L_TGT = 2, 7, 5
_ATOL, _RTOL = 1e-4, 1e-4


def check_transformer(Transformer: type[nn.Module]) -> CheckResult:
    """Check ``Transformer(src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, dropout, max_len, pad_id)``."""
    return TRANSFORMER.check(Transformer)


def _check_transformer(check: Check, Transformer: type[nn.Module]) -> None:
    check.callable_(Transformer, "Transformer", want_class=True)
    g = generator(5)

    def build(pad_id: int = _PAD, dropout: float = 0.0, vocab: tuple = (_SRC_VOCAB, _TGT_VOCAB)) -> nn.Module:
        arguments = (*vocab, _D_MODEL, _NUM_HEADS, _NUM_LAYERS, _D_FF, dropout, _MAX_LEN, pad_id)
        model = check.attempt(Transformer, *arguments, what="Transformer(...)")
        if isinstance(model, Raised) and not isinstance(model.exception, NotImplementedError):
            _arguments_swapped(check, model, dropout)
        if isinstance(model, Raised):
            model = check.build(Transformer, *arguments)  # the usual report: not attempted, or the crash
        return stages.is_module(check, model, "Transformer").eval()

    model = build()
    _model_contract(check, model, Transformer)
    m = _Model(check, model)
    src = _tokens(g, _SRC_VOCAB, (_B, _L_SRC), _PAD)
    tgt = _tokens(g, _TGT_VOCAB, (_B, _L_TGT), _PAD)
    src[0, 2], tgt[1, 1] = 0, 0  # token 0 is a real word when pad_id is 3
    for tokens, (i, j), vocab in ((src, (1, 4), _SRC_VOCAB), (tgt, (1, 2), _TGT_VOCAB)):
        same = tokens[:, i] == tokens[:, j]  # the order tests swap positions i and j: make them differ
        tokens[:, j] = torch.where(same, (tokens[:, i] + 1) % vocab, tokens[:, j])
        tokens[tokens == _PAD] = _PAD + 1

    _model_masks_swapped(check, model, src, tgt)
    logits = m.logits(src, tgt)
    check.ok(f"returns logits of shape (batch, target length, tgt_vocab_size) = ({_B}, {_L_TGT}, {_TGT_VOCAB})")
    _not_probabilities(check, logits)
    _encode_decode(check, model, src, tgt, logits)

    other = src.clone()
    other[:, 1] = (other[:, 1] + 1) % _SRC_VOCAB
    other[other == _PAD] = _PAD + 1
    if close_enough(m.logits(other, tgt), logits, atol=1e-6, rtol=_RTOL):
        check.fail(
            "Changing the source sentence does not change the logits: the decoder does not use the encoder's "
            "output.\nPass memory = encode(src) to every decoder layer, where it is the key and value of the "
            "cross-attention."
        )
    check.ok("uses the source (changing it changes the logits)")
    _encoder_sees_everything(check, m, src)

    _causality(check, m, src, tgt, logits)
    _padding(check, m, build, src, tgt, logits)
    _order(check, m, src, tgt, logits)
    _distinct_layers(check, model)
    _parameter_count(check, model)
    _xavier(check, model, build(vocab=(600, 500)))
    _gradients(check, model, m, src, tgt)
    _compare_with_oracle(check, model, m, g)
    _model_dropout(check, build, src, tgt)
    _decode_uses_its_arguments(check, model, src, tgt)
    _model_dropout_measured(check, build, src, tgt)
    stages.replaced_parts_used(check, build(), ["positional_encoding"], (src, tgt), "Transformer",
                               "Lesson 09's ablation (learned positions, no positions)")
    stages.dropout_set_through(check, lambda p: build(dropout=p), ["positional_encoding.dropout"], (src, tgt),
                               "Transformer", "to the embeddings plus positions")
    _long_sentences(check, build, g)
    _moves(check, build, src, tgt)


def _tokens(g: torch.Generator, vocab: int, shape: tuple, pad: int) -> torch.Tensor:
    """Random real tokens (never pad, sometimes 0)."""
    t = torch.randint(0, vocab - 1, shape, generator=g)
    return t + (t >= pad).long()  # skip the pad id


class _Model:
    """The learner's model with guarded calls."""

    def __init__(self, check: Check, model: nn.Module):
        self.check, self.model = check, model

    def logits(self, src: torch.Tensor, tgt: torch.Tensor, what: str = "the logits", nan_hint: str = "") -> torch.Tensor:
        out = self.check.call(self.model, src, tgt, what="Transformer.forward", hint=lambda exc: "" if isinstance(
            exc, IndexError) else (
            f"If it is about sizes that do not match: src and tgt have different lengths here ({src.shape[1]} and "
            f"{tgt.shape[1]}), so a mask built from the wrong one shows. The encoder's mask and the cross-attention's "
            f"come from src (its keys are memory's positions): make_padding_mask(src, pad_id); the decoder's "
            f"self-attention mask from tgt: make_target_mask(tgt, pad_id)."))
        hint = ""
        shape = (src.shape[0], tgt.shape[1], _TGT_VOCAB)
        if isinstance(out, torch.Tensor) and nan_hint and tuple(out.shape) == shape and out.is_floating_point():
            bad = ~torch.isfinite(out.detach())
            if bool(bad.any()):
                self.check.fail(f"The logits contain {int(bad.sum())} NaN or infinite values (out of {out.numel()}). "
                                f"{nan_hint}")
        if isinstance(out, torch.Tensor) and out.dim() == 3:
            if tuple(out.shape) == (tgt.shape[1], src.shape[0], _TGT_VOCAB):
                hint = ("The batch and length axes are swapped: return (batch, target length, tgt_vocab_size), "
                        "batch first, as the inputs are.")
            elif out.shape[1] == src.shape[1] and out.shape[1] != tgt.shape[1]:
                hint = "There is one row per source position: the logits belong to the target positions (the decoder's output)."
            elif out.shape[-1] == _D_MODEL:
                hint = "The last dimension is d_model: the final nn.Linear(d_model, tgt_vocab_size) seems to be missing."
            elif out.shape[-1] == _SRC_VOCAB:
                hint = "The last dimension is the source vocabulary size: the output projection maps to tgt_vocab_size."
        return self.check.tensor(out, what, shape=shape, dtype="float", shape_hint=hint)


def _not_probabilities(check: Check, logits: torch.Tensor) -> None:
    x = logits.detach().double()
    if bool(((x >= 0) & (x <= 1)).all()) and close_enough(x.sum(-1), torch.ones(x.shape[:-1], dtype=x.dtype), _ATOL, _RTOL):
        check.fail(
            "Your Transformer returns probabilities (every row is in [0, 1] and sums to 1): there is a softmax "
            "at the end.\nReturn the raw logits of the final linear layer; F.cross_entropy applies log-softmax "
            "itself, and argmax gives the same word either way."
        )
    if close_enough(torch.logsumexp(x, -1), torch.zeros(x.shape[:-1], dtype=x.dtype), _ATOL, _RTOL):
        check.fail(
            "Your Transformer returns log-probabilities (the log-sum-exp of every row is 0): there is a "
            "log_softmax at the end.\nReturn the raw logits of the final linear layer; F.cross_entropy applies "
            "log-softmax itself."
        )
    check.ok("returns raw logits (no softmax at the end)")


def _encode_decode(check: Check, model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, logits: torch.Tensor) -> None:
    for name in ("encode", "decode"):
        if not callable(getattr(model, name, None)):
            check.fail(
                f"Your Transformer has no method `{name}`. Greedy decoding needs encode(src) -> memory and "
                f"decode(tgt, memory, src) -> logits, and forward(src, tgt) is decode(tgt, encode(src), src)."
            )
    memory = check.call(model.encode, src, what="Transformer.encode")
    memory = check.tensor(memory, "the output of encode(src)", shape=(_B, _L_SRC, _D_MODEL), dtype="float")
    check.ok("encode(src) returns memory of shape (batch, source length, d_model)")
    out = check.call(model.decode, tgt, memory, src, what="Transformer.decode")
    out = check.tensor(out, "the output of decode(tgt, memory, src)", shape=(_B, _L_TGT, _TGT_VOCAB), dtype="float")
    if not close_enough(out, logits, _ATOL, _RTOL):
        check.close(
            out, logits, "decode(tgt, encode(src), src)", atol=_ATOL, rtol=_RTOL,
            hint="It should equal forward(src, tgt): let forward call encode and decode, so that greedy decoding "
            "computes exactly what training does.",
        )
    check.ok("decode(tgt, encode(src), src) equals forward(src, tgt)")


def _decode_uses_its_arguments(check: Check, model: nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> None:
    """decode computes from the memory and src it is given, whatever encode saw last, and through the model's one
    positional_encoding (the module lesson 09 swaps). Run last: the stages before name the usual causes first."""
    model.eval()
    memory = check.call(model.encode, src, what="Transformer.encode")
    out = check.call(model.decode, tgt, memory, src, what="Transformer.decode")
    moved = check.call(model.decode, tgt, memory * 1.5 + 0.25, src, what="Transformer.decode")
    if isinstance(moved, torch.Tensor) and moved.shape == out.shape and close_enough(moved, out, 1e-6, _RTOL):
        check.fail(
            "decode(tgt, memory, src) gives the same logits whatever memory it is given: it ignores its memory "
            "argument (it encodes src again, or keeps what encode computed). Beam search and lesson 07's cache "
            "pass their own memory: the decoder layers' cross-attention must read the memory decode receives."
        )
    check.call(model.encode, src[:1, :3], what="Transformer.encode")  # another batch, of another size
    again = check.attempt(model.decode, tgt, memory, src, what="Transformer.decode")
    if isinstance(again, Raised) or not (isinstance(again, torch.Tensor) and close_enough(again, out, _ATOL, _RTOL)):
        found = (f"it raised {type(again.exception).__name__}: {str(again.exception).splitlines()[0]}"
                 if isinstance(again, Raised) else "it gave other logits")
        check.fail(
            f"After encode() of another batch (1 sentence of 3 tokens), decode(tgt, memory, src) for the first "
            f"batch changed: {found}. decode depends on something encode left behind (a source mask kept on the "
            f"model, say): build everything decode needs from its own arguments, the source mask from its `src`."
        )
    pe = getattr(model, "positional_encoding", None)
    if isinstance(pe, nn.Module):
        calls = []
        handle = pe.register_forward_hook(lambda *_: calls.append(1))
        try:
            check.call(model.decode, tgt, memory, src, what="Transformer.decode")
        finally:
            handle.remove()
        if not calls:
            check.fail(
                "decode does not run `model.positional_encoding`: the target side gets its positions elsewhere (a "
                "second PositionalEncoding, or none). Use the one module for both sides, as the exercise says: "
                "lesson 09 swaps `model.positional_encoding` to compare encodings, and the swap must reach the target."
            )
    check.ok("decode reads the memory and src it is given, and the target passes through model.positional_encoding")


def _causality(check: Check, m: _Model, src: torch.Tensor, tgt: torch.Tensor, logits: torch.Tensor) -> None:
    changed = tgt.clone()
    changed[:, 3] = (changed[:, 3] + 1) % _TGT_VOCAB
    changed[changed == _PAD] = _PAD + 1
    out = m.logits(src, changed)
    if not close_enough(out[:, :3], logits[:, :3], atol=1e-6, rtol=_RTOL):
        check.fail(
            "Changing the target token at position 3 changed the logits at positions 0 to 2: the decoder can "
            "see the future.\nBuild the target mask with make_target_mask(tgt, pad_id) (padding AND causal) and "
            "pass it to the decoder's self-attention."
        )
    if close_enough(out[:, 3], logits[:, 3], atol=1e-6, rtol=_RTOL):
        check.fail(
            "Changing the target token at position 3 did not change the logits at position 3: each position "
            "should see its own token (the causal mask keeps the diagonal)."
        )
    check.ok("is causal: changing a target token never changes the logits at earlier positions")


def _padding(check: Check, m: _Model, build: Callable, src: torch.Tensor, tgt: torch.Tensor, logits: torch.Tensor) -> None:
    pads = torch.full((_B, 3), _PAD)
    longer = torch.cat([src, pads], dim=1)
    src_hint = ("They appear once padding is appended to the source: some row of a mask hides every key. The "
                "source mask hides padded keys: make_padding_mask(src, pad_id), shape (batch, 1, 1, length).")
    if not close_enough(m.logits(longer, tgt, nan_hint=src_hint), logits, _ATOL, _RTOL):
        memory = m.check.call(m.model.encode, longer, what="Transformer.encode")
        encoder_ok = isinstance(memory, torch.Tensor) and close_enough(memory[:, :_L_SRC], m.model.encode(src), _ATOL, _RTOL)
        model0 = build(pad_id=0)
        src0, pads0 = src.clone(), torch.zeros(_B, 3, dtype=torch.long)
        src0[src0 == 0] = _PAD
        with_zeros = torch.cat([src0, pads0], dim=1)
        m0 = _Model(m.check, model0)
        if close_enough(m0.logits(with_zeros, tgt), m0.logits(src0, tgt), _ATOL, _RTOL):
            m.check.fail(
                f"Appending padding to the source changed the logits when pad_id={_PAD}, but not when pad_id=0: "
                f"your masks treat token 0 as padding whatever pad_id is.\n"
                f"Build them from the model's own pad id: make_padding_mask(src, self.pad_id)."
            )
        if encoder_ok:
            m.check.fail(
                "Appending padding to the source did not change encode(src) at the real positions, but it changed "
                "the logits: the cross-attention does not use the source mask.\n"
                "Pass the source padding mask to every decoder layer (src_mask) so the cross-attention ignores "
                "padded source positions."
            )
        m.check.fail(
            "Appending padding tokens to the source changed the output at the real positions: the padding is "
            "not masked.\nBuild src_mask = make_padding_mask(src, pad_id) and pass it to the encoder's "
            "self-attention and to the decoder's cross-attention."
        )
    check_ok = m.check.ok
    check_ok(f"ignores padding appended to the source (pad_id={_PAD})")
    longer_tgt = torch.cat([tgt, pads], dim=1)
    out = m.logits(src, longer_tgt, nan_hint=(
        "They appear once padding is appended to the target: some row of your target mask hides every key, so "
        "its softmax is 0/0. The padding part of the target mask hides padded keys (the last axis), not padded "
        "queries: make_target_mask(tgt, pad_id) = (tgt != pad_id)[:, None, None, :] & causal; the diagonal "
        "keeps every row alive."))
    if not close_enough(out[:, :_L_TGT], logits, _ATOL, _RTOL):
        m.check.fail(
            "Appending padding tokens to the target changed the logits at the real target positions.\n"
            "The target mask combines padding and causality: make_target_mask(tgt, pad_id)."
        )
    check_ok(f"ignores padding appended to the target (pad_id={_PAD})")


def _order(check: Check, m: _Model, src: torch.Tensor, tgt: torch.Tensor, logits: torch.Tensor) -> None:
    swapped = src.clone()
    swapped[:, [1, 4]] = swapped[:, [4, 1]]
    source_blind = close_enough(m.logits(swapped, tgt), logits, atol=1e-6, rtol=_RTOL)
    swapped = tgt.clone()
    swapped[:, [1, 2]] = swapped[:, [2, 1]]
    target_blind = close_enough(m.logits(src, swapped)[:, 4], logits[:, 4], atol=1e-6, rtol=_RTOL)
    if source_blind and _positions_on_the_target_only(m, src, tgt):
        check.fail(TARGET_POSITIONS_ONLY.says.showing(
            "Swapping two source words does not change the logits: the encoder cannot see word order."))
    if source_blind:
        check.fail(
            "Swapping two source words does not change the logits: the encoder cannot see word order.\n"
            "Add the positional encoding to the source embeddings: positional_encoding(embed(src) * sqrt(d_model))."
        )
    if target_blind:
        check.fail(
            "Swapping two earlier target words does not change the logits at the last position: the decoder "
            "cannot see word order.\nAdd the positional encoding to the target embeddings too."
        )
    check.ok("is sensitive to word order in the source and in the target (positional encoding in use)")


def _owner(model: nn.Module, name: str) -> nn.Module:
    path = name.rpartition(".")[0]
    return model.get_submodule(path) if path else model


def _is_vocab_matrix(module: nn.Module) -> bool:
    return isinstance(module, nn.Embedding) or (isinstance(module, nn.Linear) and module.out_features == _TGT_VOCAB)


def _distinct_layers(check: Check, model: nn.Module) -> None:
    for names in anatomy.shared_parameter_groups(model):
        if all(_is_vocab_matrix(_owner(model, n)) for n in names):
            continue  # weight tying between the target embedding and the output projection
        shown = ", ".join(f"`{n}`" for n in names[:3])
        check.fail(
            f"Some of your layers share their weights: {shown} are one and the same tensor.\n"
            f"Likely cause: `[layer] * num_layers` or `[layer for _ in range(num_layers)]` with one layer object, "
            f"which repeats the same layer. Create a new layer each time: "
            f"nn.ModuleList([EncoderLayer(...) for _ in range(num_layers)])."
        )
    check.ok("its layers are distinct modules (no shared weights apart from tied embeddings)")


def _parameter_count(check: Check, model: nn.Module) -> None:
    d = _D_MODEL
    attention = 4 * (d * d + d)
    ffn = d * _D_FF + _D_FF + _D_FF * d + d
    norm = 2 * d
    enc, dec = attention + ffn + 2 * norm, 2 * attention + ffn + 3 * norm
    base = _SRC_VOCAB * d + _TGT_VOCAB * d + _NUM_LAYERS * (enc + dec)
    options = {}
    for bias in (True, False):
        for tied in (False, True):
            for finals in (0, 1, 2):
                total = base + d * _TGT_VOCAB * (not tied) + _TGT_VOCAB * bias + finals * norm
                options.setdefault(total, (finals, "output projection " + ("with" if bias else "without") +
                                           " bias, " + ("tied to the target embedding" if tied else
                                                        "its own weight matrix")))
    actual = anatomy.count_parameters(model)
    finals, words = options.get(actual, (0, ""))
    if finals:  # the layout's count plus one or two LayerNorms: the gradients name one unused, the values one used
        return
    if words:
        check.ok(f"has the number of parameters the paper's layout gives at these sizes, {actual:,} (recognised: "
                 f"{words})")
        return
    expected = base + d * _TGT_VOCAB + _TGT_VOCAB
    lines = [
        f"Your Transformer has {actual:,} parameters; the paper's layout has {expected:,} with these sizes "
        f"(d_model={d}, num_heads={_NUM_HEADS}, num_layers={_NUM_LAYERS}, d_ff={_D_FF}, vocabularies "
        f"{_SRC_VOCAB} and {_TGT_VOCAB}):",
        f"  source embedding {_SRC_VOCAB} x {d} = {_SRC_VOCAB * d:,}; target embedding {_TGT_VOCAB} x {d} = {_TGT_VOCAB * d:,}",
        f"  {_NUM_LAYERS} encoder layers x {enc:,} (self-attention {attention:,}, feed-forward {ffn:,}, 2 LayerNorms {2 * norm})",
        f"  {_NUM_LAYERS} decoder layers x {dec:,} (2 attentions {2 * attention:,}, feed-forward {ffn:,}, 3 LayerNorms {3 * norm})",
        f"  output projection {d} x {_TGT_VOCAB} + {_TGT_VOCAB} = {d * _TGT_VOCAB + _TGT_VOCAB:,} "
        f"(also accepted: without bias, tied to the target embedding)",
        "In yours: " + _breakdown(model),
    ]
    if any(_MAX_LEN in p.shape for p in model.parameters() if p.requires_grad):
        lines.append(
            "A parameter has a dimension of size max_len: is the positional-encoding table an nn.Parameter? "
            "Register it with register_buffer: it is fixed, not learned."
        )
    check.fail("\n".join(lines))


def _breakdown(model: nn.Module) -> str:
    """The learner's parameters grouped by what holds them."""
    attention = {id(p) for a in anatomy.attention_modules(model) for p in a.parameters()}
    norms = anatomy.layer_norms(model, _D_MODEL)
    norm_ids = {id(n) for n in norms}
    groups: dict[str, int] = {}
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if id(p) in seen or not p.requires_grad:
            continue
        seen.add(id(p))
        owner = _owner(model, name)
        if id(p) in attention:
            kind = "attention modules"
        elif isinstance(owner, nn.Embedding):
            kind = "embeddings"
        elif id(owner) in norm_ids:
            kind = "LayerNorms"
        elif isinstance(owner, nn.Linear):
            kind = "other linear layers"
        else:
            kind = "other parameters"
        groups[kind] = groups.get(kind, 0) + p.numel()
    counts = {
        "attention modules": len(anatomy.attention_modules(model)),
        "LayerNorms": len(norms),
        "embeddings": sum(isinstance(x, nn.Embedding) for x in model.modules()),
    }
    parts = []
    for kind in ("embeddings", "attention modules", "LayerNorms", "other linear layers", "other parameters"):
        if kind in groups:
            count = f"{counts[kind]} " if kind in counts else ""
            parts.append(f"{count}{kind} {groups[kind]:,}")
    return "; ".join(parts) + "."


def _gradients(check: Check, model: nn.Module, m: _Model, src: torch.Tensor, tgt: torch.Tensor) -> None:
    stages.every_parameter_learns(check, model, m.logits(src, tgt), "Transformer", seed=6)


# --------------------------------------------------------------------------
# The assembled oracle: PyTorch's layers carrying the learner's weights, and the known slips around the stacks.


@dataclasses.dataclass
class _Parts:
    """The learner's parts, found: embeddings, PyTorch twins of its layers, LayerNorms outside them, the projection."""

    src_emb: nn.Embedding
    tgt_emb: nn.Embedding
    encoder: list
    decoder: list
    finals: list  # LayerNorms outside the layers, in the order the model registers them
    project: Callable[[torch.Tensor], torch.Tensor]


def _final_indices(count: int) -> list[tuple]:
    """Where the LayerNorms outside the layers may sit as final norms: (after the encoder, after the decoder)."""
    return {0: [(None, None)], 1: [(None, None), (0, None), (None, 0)]}.get(count, [(None, None), (0, 1), (1, 0)])


def _sinusoids(length: int) -> torch.Tensor:
    """Lesson 03's table, (length, d_model), in float64."""
    position = torch.arange(length, dtype=torch.float64)[:, None]
    angle = position / 10000 ** (torch.arange(0, _D_MODEL, 2, dtype=torch.float64) / _D_MODEL)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(length, _D_MODEL)


def _assembled(parts: _Parts, src: torch.Tensor, tgt: torch.Tensor, *, scale: float = math.sqrt(_D_MODEL),
               tgt_scale: float | None = None, scale_after: bool = False, pe: tuple = (True, True),
               first: tuple = (None, None), final: tuple = (None, None)) -> torch.Tensor:
    """The logits (B, L_tgt, V) of the paper's model made of the learner's parts, in float64, or with the slip its
    flags name: the embeddings' scale (both sides, or the target's), the scale applied after the positions, the
    positions on one side only, a LayerNorm (index into ``parts.finals``) before the first layer or after a stack."""
    if final not in _final_indices(len(parts.finals)):
        raise LookupError(f"no final norms at {final} among {len(parts.finals)}")
    norm = {i: _double_norm(n) for i, n in enumerate(parts.finals)}
    L_src, L_tgt = src.shape[1], tgt.shape[1]
    src_keep = (src != _PAD)[:, None, None, :]
    tgt_keep = (tgt != _PAD)[:, None, None, :] & torch.tril(torch.ones(L_tgt, L_tgt, dtype=torch.bool))

    def embed(emb: nn.Embedding, tokens: torch.Tensor, side: int, factor: float) -> torch.Tensor:
        e = emb.weight.detach().double()[tokens]
        t = _sinusoids(tokens.shape[1]) if pe[side] else 0
        x = (e + t) * factor if scale_after else e * factor + t
        return x if first[side] is None else norm[first[side]](x)

    h = embed(parts.src_emb, src, 0, scale)
    for twin in parts.encoder:
        h = twins.run_twin(twin, h, src_mask=twins.torch_mask(src_keep, _B, _NUM_HEADS, L_src, L_src))
    h = h if final[0] is None else norm[final[0]](h)
    y = embed(parts.tgt_emb, tgt, 1, scale if tgt_scale is None else tgt_scale)
    for twin in parts.decoder:
        y = twins.run_twin(twin, y, h, tgt_mask=twins.torch_mask(tgt_keep, _B, _NUM_HEADS, L_tgt, L_tgt),
                           src_mask=twins.torch_mask(src_keep, _B, _NUM_HEADS, L_tgt, L_src))
    y = y if final[1] is None else norm[final[1]](y)
    return parts.project(y)


_ASSEMBLED = ("Seen by comparing its logits with a model assembled from nn.TransformerEncoderLayer / "
              "nn.TransformerDecoderLayer carrying your weights: yours have the wrong values, those this mistake gives.")


def _final_norm(where: str) -> Diagnosis:
    return Diagnosis(f"Your Transformer normalises the output of {where}: a final LayerNorm, as nn.Transformer has.",
                     "The paper's post-LN model has none, since every layer already ends with its own norm, and lesson "
                     "07's nn.Transformer copy of your model leaves it out (encoder.norm = None). Remove it.")


#: a LayerNorm after a stack (tried first, alone): ``final`` holds indices into the LayerNorms outside the layers
FINAL_NORM_SLIPS = (
    Slip("final norm after the encoder stack", _final_norm("the encoder stack"), dict(final=(0, None))),
    Slip("final norm after the decoder stack", _final_norm("the decoder stack"), dict(final=(None, 0))),
    Slip("final norms after both stacks", _final_norm("the encoder stack and the decoder stack"), dict(final=(0, 1))),
    Slip("final norms after both stacks, the decoder's registered first",
         _final_norm("the encoder stack and the decoder stack"), dict(final=(1, 0))),
)

_ROOT = math.sqrt(_D_MODEL)
#: the scales embeddings are found multiplied by, and how a learner reads each
_SCALINGS = {1.0: "not multiplied by sqrt(d_model)", float(_D_MODEL): "multiplied by d_model instead of sqrt(d_model)",
             1 / _ROOT: "divided by sqrt(d_model) where they should be multiplied by it",
             math.sqrt(_D_MODEL // _NUM_HEADS): "multiplied by sqrt(d_k), the size of one head, instead of "
             "sqrt(d_model)"}
_SCALED = "Scale them first, `embed(tokens) * math.sqrt(d_model)`, then add the positions."


def _scaling_slips() -> list[Slip]:
    both = [Slip(f"embeddings {how}", Diagnosis(
        f"Your Transformer's embeddings are {how} before the positional encoding is added.", _SCALED), dict(scale=k))
        for k, how in _SCALINGS.items()]
    for k, how in _SCALINGS.items():  # one side right, the other not: name the side
        both += [Slip(f"target embeddings {how}", Diagnosis(
                     f"Your Transformer's target embeddings are {how}; the source ones are right.",
                     "`tgt_embed(tgt) * math.sqrt(d_model)` in decode too."), dict(scale=_ROOT, tgt_scale=k)),
                 Slip(f"source embeddings {how}", Diagnosis(
                     f"Your Transformer's source embeddings are {how}; the target ones are right.",
                     "`src_embed(src) * math.sqrt(d_model)` in encode too."), dict(scale=k, tgt_scale=_ROOT))]
    return both


#: the positional encoding added to the target only: the encoder then cannot see word order (named by ``_order``)
TARGET_POSITIONS_ONLY = Slip("positions on the target only", Diagnosis(
    "Your Transformer adds the positional encoding to the target embeddings only.",
    "The source embeddings need it too: `positional_encoding(src_embed(src) * math.sqrt(d_model))`."),
    dict(pe=(False, True)))

_FIRST_NORM = Diagnosis(
    "A LayerNorm in your Transformer normalises the embeddings plus positions before the first layer.",
    "The paper's post-LN model has none there, since every layer ends with its own (a pre-LN model puts its extra "
    "LayerNorm after the last layer, not before the first): pass PE(embed(tokens) * sqrt(d_model)) to the first "
    "layer as it is.")

#: how the embeddings enter the stacks (each tried with every place a final norm may sit)
EMBEDDING_SLIPS = (
    *_scaling_slips(),
    Slip("scaled after the positions", Diagnosis(
        "Your Transformer applies the scaling by sqrt(d_model) after adding the positional encoding.",
        "Scale the embeddings first, then add the positions."), dict(scale_after=True)),
    Slip("positions on the source only", Diagnosis(
        "Your Transformer adds the positional encoding to the source embeddings only.",
        "The target embeddings need it too: `positional_encoding(tgt_embed(tgt) * math.sqrt(d_model))`."),
        dict(pe=(True, False))),
    TARGET_POSITIONS_ONLY,
    Slip("norm before the first source layer", _FIRST_NORM, dict(first=(0, None))),
    Slip("norm before the first target layer", _FIRST_NORM, dict(first=(None, 0))),
    Slip("one norm before both stacks", _FIRST_NORM, dict(first=(0, 0))),
    Slip("a norm before each stack", _FIRST_NORM, dict(first=(0, 1))),
    Slip("a norm before each stack, the target's registered first", _FIRST_NORM, dict(first=(1, 0))),
)

SLIPS = FINAL_NORM_SLIPS + EMBEDDING_SLIPS


def _with_any_final(parts: _Parts, out: torch.Tensor, src: torch.Tensor, tgt: torch.Tensor, real: torch.Tensor,
                    slips: tuple) -> Slip | None:
    """The first of ``slips`` whose logits, with the final norms wherever they may sit, are the learner's."""
    agrees, options = same_tensor(out, _ATOL, _RTOL), _final_indices(len(parts.finals))
    return matching_slip(slips, lambda slip: [slip.replay(_assembled, parts, src, tgt, final=f)[real] for f in options],
                         lambda wrongs: any(map(agrees, wrongs)))


def _named_slip(parts: _Parts, out: torch.Tensor, src: torch.Tensor, tgt: torch.Tensor, real: torch.Tensor) -> Slip | None:
    """A final norm alone, else the slip of the embeddings (with final norms anywhere) whose logits are the learner's."""
    final = matching_slip(FINAL_NORM_SLIPS, lambda slip: slip.replay(_assembled, parts, src, tgt)[real],
                          same_tensor(out, _ATOL, _RTOL))
    return final or _with_any_final(parts, out, src, tgt, real, EMBEDDING_SLIPS)


def _positions_on_the_target_only(m: _Model, src: torch.Tensor, tgt: torch.Tensor) -> bool:
    """Whether a model blind to the source's word order computes the paper's model with positions on the target
    only (its parts found, its LayerNorms given trained-looking values first)."""
    found = _find_parts(m.model)
    if isinstance(found, str):
        return False
    src_emb, tgt_emb, enc_layers, dec_layers, finals, project = found
    g = generator(9)
    twins.randomise_norms(anatomy.layer_norms(m.model, _D_MODEL), g)
    stacks = [[_twin_of(layer, kind, g)[0] for layer in layers] for kind, layers in
              (("encoder", enc_layers), ("decoder", dec_layers))]
    if any(twin is None for stack in stacks for twin in stack):
        return False
    parts = _Parts(src_emb, tgt_emb, *stacks, finals, project)
    real = tgt != _PAD
    out = m.logits(src, tgt)[real]
    with torch.no_grad():
        return _with_any_final(parts, out, src, tgt, real, (TARGET_POSITIONS_ONLY,)) is not None


def _twin_stacks(check: Check, layers: dict[str, list], g: torch.Generator) -> dict[str, list]:
    """PyTorch's layer wired like each of the learner's, found by comparing outputs; a layer without one fails."""
    stacks: dict[str, list] = {}
    for kind in ("encoder", "decoder"):
        stacks[kind] = []
        for layer in layers[kind]:
            twin, reason = _twin_of(layer, kind, g)
            if twin is None and reason.startswith(" (it is PyTorch"):
                check.fail(f"The {kind} layers inside your Transformer are not the paper's{reason}.")
            if twin is None:
                check.fail(
                    f"One of the {kind} layers inside your Transformer does not compute a post-LN {kind} layer"
                    f"{reason}. Run check_{kind}_layer on your {kind.capitalize()}Layer class first."
                )
            stacks[kind].append(twin)
    return stacks


def _compare_with_oracle(check: Check, model: nn.Module, m: _Model, g: torch.Generator) -> None:
    """Compare the logits with PyTorch's layers carrying the learner's weights, where the parts are found."""
    found = _find_parts(model)
    if isinstance(found, str):
        check.ok(f"only the properties above were checked: the parts of your Transformer could not all be "
                 f"found ({found}), so its exact values were not compared")
        return
    src_emb, tgt_emb, enc_layers, dec_layers, finals, project = found
    twins.randomise_norms(anatomy.layer_norms(model, _D_MODEL), g)
    stacks = _twin_stacks(check, {"encoder": enc_layers, "decoder": dec_layers}, g)
    parts = _Parts(src_emb, tgt_emb, stacks["encoder"], stacks["decoder"], finals, project)
    src = _tokens(g, _SRC_VOCAB, (_B, _L_SRC), _PAD)
    tgt = _tokens(g, _TGT_VOCAB, (_B, _L_TGT), _PAD)
    src[0, 1], tgt[0, 2] = 0, 0
    src[1, 5:], tgt[1, 4:] = _PAD, _PAD
    real = tgt != _PAD  # logits at padded target positions are never used: they are not compared
    out = m.logits(src, tgt)[real]
    with torch.no_grad():
        expected = _assembled(parts, src, tgt)[real]
        if close_enough(out, expected, _ATOL, _RTOL):
            check.ok("matches a model assembled from nn.TransformerEncoderLayer / nn.TransformerDecoderLayer "
                     "carrying your weights (embeddings scaled by sqrt(d_model), sinusoidal positions)")
            return
        slip = _named_slip(parts, out, src, tgt, real)
    if slip is not None:
        check.fail(slip.says.showing(_ASSEMBLED))
    check.close(
        out, expected, "the output of your Transformer (its logits at the real target positions)", atol=_ATOL, rtol=_RTOL,
        hint="Expected: memory = encoder layers(PE(embed(src) * sqrt(d_model)), src_mask); logits = "
        "linear(decoder layers(PE(embed(tgt) * sqrt(d_model)), memory, src_mask, tgt_mask)), with the "
        "sinusoidal table of lesson 03, masks built from pad_id, and the output of the last encoder layer as "
        "the memory of every decoder layer.",
    )


def _double_norm(norm: nn.Module) -> nn.Module:
    if not isinstance(norm, nn.LayerNorm):
        return twins.prepared_norm(norm, _D_MODEL)
    twin = nn.LayerNorm(_D_MODEL, dtype=torch.float64)
    twins.copy_norm(norm, twin)
    return twin


_TORCH_LAYERS = {"encoder": nn.TransformerEncoderLayer, "decoder": nn.TransformerDecoderLayer}


def _find_parts(model: nn.Module):
    """(src_emb, tgt_emb, encoder layers, decoder layers, final norms, projection) or why not."""
    embeddings = [x for x in model.modules() if isinstance(x, nn.Embedding)]
    src_emb = [e for e in embeddings if tuple(e.weight.shape) == (_SRC_VOCAB, _D_MODEL)]
    tgt_emb = [e for e in embeddings if tuple(e.weight.shape) == (_TGT_VOCAB, _D_MODEL)]
    if len(src_emb) != 1 or len(tgt_emb) != 1:
        return "no single nn.Embedding per vocabulary"
    encoders, decoders = [], []
    for _, sub in model.named_modules(remove_duplicate=False):
        for kind, found in (("encoder", encoders), ("decoder", decoders)):
            if isinstance(sub, _TORCH_LAYERS[kind]) or (
                not isinstance(sub, tuple(_TORCH_LAYERS.values()))
                and not twins.LayerLayout(sub, kind, _D_MODEL, _NUM_HEADS, _D_FF).missing
            ):
                found.append(sub)
    if len(encoders) != _NUM_LAYERS or len(decoders) != _NUM_LAYERS:
        return (f"found {len(encoders)} encoder and {len(decoders)} decoder layers made of contract attention "
                f"modules, LayerNorms and nn.Linear")
    inner = {id(x) for layer in encoders + decoders for x in layer.modules()}
    finals = [n for n in anatomy.layer_norms(model, _D_MODEL) if id(n) not in inner]
    if len(finals) > 2:
        return "more than two LayerNorms outside the layers"
    linears = [x for x in anatomy.linears_outside(model, encoders + decoders)
               if (x.in_features, x.out_features) == (_D_MODEL, _TGT_VOCAB)]
    if len(linears) > 1:
        return "more than one nn.Linear(d_model, tgt_vocab_size)"
    if linears:
        weight, bias = linears[0].weight, linears[0].bias
    else:  # the output projection may reuse the target embedding's matrix
        weight = tgt_emb[0].weight
        biases = [p for p in model.parameters() if tuple(p.shape) == (_TGT_VOCAB,)]
        bias = biases[0] if len(biases) == 1 else None

    def project(y: torch.Tensor) -> torch.Tensor:
        out = y @ weight.detach().double().T
        return out if bias is None else out + bias.detach().double()

    return src_emb[0], tgt_emb[0], encoders, decoders, finals, project


def _twin_of(layer: nn.Module, kind: str, g: torch.Generator) -> tuple:
    """(PyTorch's layer wired like the learner's one, found by comparing outputs, or None; why not)."""
    if isinstance(layer, _TORCH_LAYERS[kind]):  # PyTorch's own layer: read its settings
        if layer.norm_first:
            return None, " (it is PyTorch's layer with norm_first=True: pre-LN; the paper's layers are post-LN)"
        if getattr(layer, "activation_relu_or_gelu", 1) != 1:
            return None, " (it is PyTorch's layer with an activation other than ReLU)"
        return copy.deepcopy(layer).double().eval(), ""
    layout = twins.LayerLayout(layer, kind, _D_MODEL, _NUM_HEADS, _D_FF)
    dtype = next((p.dtype for p in layer.parameters() if p.is_floating_point()), torch.float32)
    x = torch.randn(_B, 4, _D_MODEL, generator=g)
    memory = torch.randn(_B, 6, _D_MODEL, generator=g)
    keep = torch.ones(_B, 1, 1, 6, dtype=torch.bool)
    keep[1, ..., 4:] = False
    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool)).expand(_B, 1, 4, 4)
    try:
        with torch.no_grad():
            if kind == "encoder":
                out = layer(memory.to(dtype), keep)
            else:
                out = layer(x.to(dtype), memory.to(dtype), keep, causal)
    except Exception:  # an unusual signature: leave this comparison out
        return None, " (it could not be called as layer(x, mask) / layer(x, memory, src_mask, tgt_mask))"
    if not isinstance(out, torch.Tensor):
        return None, ""
    for twin, _, norms in layout.twins():
        if len({id(n) for n in norms}) < len(norms) <= len(layout.norms):
            continue  # one LayerNorm used twice while another sits unused: not a post-LN layer
        with torch.no_grad():
            if kind == "encoder":
                expected = twins.run_twin(twin, memory.double(), src_mask=twins.torch_mask(keep, _B, _NUM_HEADS, 6, 6))
            else:
                expected = twins.run_twin(twin, x.double(), memory.double(),
                                         tgt_mask=twins.torch_mask(causal, _B, _NUM_HEADS, 4, 4),
                                         src_mask=twins.torch_mask(keep, _B, _NUM_HEADS, 4, 6))
        if close_enough(out, expected, _ATOL, _RTOL):
            return copy.deepcopy(twin), ""
    return None, ""


def _model_dropout(check: Check, build: Callable, src: torch.Tensor, tgt: torch.Tensor) -> None:
    model = build(dropout=0.5)
    m = _Model(check, model)
    stages.eval_deterministic(check, model, lambda _: m.logits(src, tgt), "Transformer", 0.5)
    stages.train_random(check, model, lambda _: m.logits(src, tgt), "Transformer", 0.5,
                        fix="Pass the dropout rate to the positional encoding and to every layer.")
    model.eval()
    _layers_drop(check, model)
    _model_everything_dropped(check, build, src, tgt)


def _layers_drop(check: Check, model: nn.Module) -> None:
    """Where the layers can be found: each of them applies dropout in training mode."""
    parts = _find_parts(model)
    if isinstance(parts, str):
        return
    g = generator(8)
    x = torch.randn(_B, 4, _D_MODEL, generator=g)
    memory = torch.randn(_B, 6, _D_MODEL, generator=g)
    for kind, layers in (("encoder", parts[2]), ("decoder", parts[3])):
        for layer in layers:
            dtype = next((p.dtype for p in layer.parameters() if p.is_floating_point()), torch.float32)
            args = (x.to(dtype),) if kind == "encoder" else (x.to(dtype), memory.to(dtype))
            layer.train()
            try:
                with torch.no_grad():
                    first, second = layer(*args), layer(*args)
            except Exception:  # an unusual signature: not judged here
                continue
            finally:
                layer.eval()
            if isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor) and close_enough(first, second, atol=0, rtol=_RTOL):
                check.fail(
                    f"Inside your Transformer built with dropout=0.5, the {kind} layers apply no dropout in "
                    f"training mode (they give the same output twice): the dropout rate does not reach them.\n"
                    f"Pass it on: {kind.capitalize()}Layer(d_model, num_heads, d_ff, dropout)."
                )
    check.ok("passes the dropout rate on to its encoder and decoder layers")


def _model_everything_dropped(check: Check, build: Callable, src: torch.Tensor, tgt: torch.Tensor) -> None:
    """With dropout=1.0 in training every path from the tokens to the logits goes through a dropout.

    The paper drops the sums of embeddings and positions and the output of every
    sublayer; with p = 1 nothing of src or tgt survives, so the logits are one
    constant row (the output bias).
    """
    try:
        model = build(dropout=1.0).train()
        with torch.no_grad():
            outs = [model(src, tgt), model(src.flip(1), tgt.flip(0))]
    except Exception:  # a model that refuses p = 1 (a hand-written dropout, an assertion): not judged here
        return
    if not all(isinstance(o, torch.Tensor) and o.shape == outs[0].shape for o in outs):
        return
    rows = torch.cat([o.detach().double().reshape(-1, o.shape[-1]) for o in outs])
    if not bool(torch.isfinite(rows).all()):
        return  # a hand-written dropout dividing by 1 - p, or a norm without eps on all-zero rows
    if not close_enough(rows, rows[:1].expand_as(rows), atol=1e-5, rtol=_RTOL):
        check.fail(
            "Built with dropout=1.0 and in training mode, your Transformer should drop everything that carries "
            "information about the tokens, so that its logits are one constant row, whatever the tokens and "
            "their positions. Yours still vary: something reaches the logits without going through a dropout.\n"
            "The paper applies dropout to the sums of the embeddings and the positional encodings (the "
            "PositionalEncoding module's dropout, for the source and for the target) and to the output of every "
            "sublayer, before the residual addition."
        )
    check.ok("drops the embeddings + positions and every sublayer's output in training (dropout=1.0 leaves a "
             "constant output)")


# --------------------------------------------------------------------------
# The contract: names, components first, initialisation, sizes, moves, measured dropout.

_MASKS = ("make_padding_mask", "make_causal_mask", "make_target_mask")


def _model_contract(check: Check, model: nn.Module, Transformer: type) -> None:
    """The submodule names, kinds and sizes later code reads, its attributes, and the components' own checkers."""
    from . import masks, positional
    from .layers import check_decoder_layer, check_encoder_layer

    parts = stages.called_parts(Transformer, {name: (getattr(masks, f"check_{name[5:]}"), name) for name in _MASKS})
    parts += stages.submodule_parts(model, {
        "encoder_layers.0": (check_encoder_layer, "EncoderLayer"),
        "decoder_layers.0": (check_decoder_layer, "DecoderLayer"),
        "positional_encoding": (positional.check_positional_encoding_module, "PositionalEncoding")})
    sizes = {"src_vocab_size": _SRC_VOCAB, "tgt_vocab_size": _TGT_VOCAB, "d_model": _D_MODEL, "num_heads": _NUM_HEADS,
             "num_layers": _NUM_LAYERS, "d_ff": _D_FF, "dropout": 0.0, "max_len": _MAX_LEN, "pad_id": _PAD}
    stages.contract_parts(check, model, "Transformer", sizes, components=parts)


def _xavier(check: Check, model: nn.Module, wide: nn.Module) -> None:
    """Every parameter with 2+ dimensions starts with Xavier/Glorot's spread, sqrt(2 / (fan_in + fan_out)).

    ``wide`` has vocabularies far larger than d_model, as the lessons' models do: there Xavier's spread of an
    embedding is far from the 1/sqrt(d_model) of a "transformer-style" normal init (at the checker's small sizes
    the two nearly agree)."""
    off: dict[str, tuple[float, float]] = {}  # by name: the wide model's matrices are the same ones again
    for name, p in [*model.named_parameters(), *wide.named_parameters()]:
        if p.dim() < 2 or not p.requires_grad:
            continue
        receptive = math.prod(p.shape[2:]) if p.dim() > 2 else 1
        fan_in, fan_out = p.shape[1] * receptive, p.shape[0] * receptive
        want = math.sqrt(2.0 / (fan_in + fan_out))
        got = float(p.detach().double().std())
        if not 0.75 * want <= got <= 1.33 * want:
            off.setdefault(name, (got, want))
    if off:
        name, (got, want) = next(iter(off.items()))
        check.fail(
            f"{len(off)} weight matri{'ces' if len(off) > 1 else 'x'} of your freshly built Transformer "
            f"{'are' if len(off) > 1 else 'is'} not initialised with Xavier/Glorot: `{name}` has standard deviation "
            f"{got:.3f}, where Xavier gives {want:.3f} = sqrt(2 / (fan_in + fan_out)).\n"
            f"The exercise asks for it (lesson 06's short training, and the losses it shows, depend on it): at the "
            f"end of __init__, `for p in self.parameters(): if p.dim() > 1: nn.init.xavier_uniform_(p)`."
        )
    check.ok("initialises every weight matrix and embedding with Xavier/Glorot (measured spread)")


def _arguments_swapped(check: Check, raised: Raised, dropout: float) -> None:
    """The constructor crashed inside a part built with ``max_len`` and ``dropout`` swapped (the positional
    encoding's ``(d_model, dropout, max_len)``): name the swap at the call rather than the crash inside."""
    tb = raised.exception.__traceback__
    while tb is not None:
        names = tb.tb_frame.f_locals
        if tb.tb_frame.f_code.co_name == "__init__" and type(names.get("max_len")) is float and \
                type(names.get("dropout")) is int and names["max_len"] == dropout and names["dropout"] == _MAX_LEN:
            part = type(names.get("self")).__name__
            check.fail(
                f"Your Transformer builds its {part} with `max_len` and `dropout` swapped: it received "
                f"dropout={_MAX_LEN} and max_len={dropout!r} (the model was built with dropout={dropout!r}, "
                f"max_len={_MAX_LEN}), and crashed inside. {part} takes (d_model, dropout, max_len), in this order: "
                f"`{part}(d_model, dropout, max_len)`, or pass them by name.\n\n{raised.message}")
        tb = tb.tb_next


def _encoder_sees_everything(check: Check, m: "_Model", src: torch.Tensor) -> None:
    """The encoder is not causal: changing the last source word changes memory at the first position."""
    memory = check.call(m.model.encode, src, what="Transformer.encode")
    changed = src.clone()
    changed[:, -1] = (changed[:, -1] + 1) % _SRC_VOCAB
    changed[changed == _PAD] = _PAD + 1
    other = check.call(m.model.encode, changed, what="Transformer.encode")
    if isinstance(memory, torch.Tensor) and isinstance(other, torch.Tensor) and close_enough(memory[:, 0], other[:, 0], atol=1e-6, rtol=_RTOL):
        embedded = _embedded_source(m.model, src)
        if embedded is not None and embedded.shape == memory.shape and close_enough(memory, embedded, 1e-6, _RTOL):
            check.fail(
                "encode(src) returns the embedded source itself (embeddings times sqrt(d_model), plus positions): "
                "the encoder layers run, but their outputs are thrown away. Keep each layer's output, "
                "`x = layer(x, src_mask)`, so that the next layer, and memory, are built on it."
            )
        check.fail(
            "Changing the last source word does not change encode(src) at the first position: your encoder "
            "cannot see later source words, as if it used a causal mask.\nThe encoder reads the whole source "
            "sentence: give its layers the padding mask only, make_padding_mask(src, self.pad_id); the causal "
            "mask belongs to the decoder (make_target_mask)."
        )
    check.ok("the encoder sees the whole source sentence (no causal mask in encode)")


def _embedded_source(model: nn.Module, src: torch.Tensor) -> torch.Tensor | None:
    """positional_encoding(src_embed(src) * sqrt(d_model)), in eval mode; None where the model lacks a part."""
    try:
        with torch.no_grad():
            return model.positional_encoding(model.src_embed(src) * math.sqrt(model.d_model))
    except Exception:  # noqa: BLE001  (a model without these parts gets the general message)
        return None


def _long_sentences(check: Check, build: Callable, g: torch.Generator) -> None:
    """Sentences as long as max_len (lesson 06 uses max_len = 64), on both sides."""
    model = build()
    src = _tokens(g, _SRC_VOCAB, (1, _MAX_LEN), _PAD)
    tgt = _tokens(g, _TGT_VOCAB, (1, _MAX_LEN), _PAD)
    out = check.call(model, src, tgt, what="Transformer.forward", hint=(
        f"It works for short sentences but not for {_MAX_LEN} tokens, the max_len it was built with: is a "
        f"table or a mask built for a fixed, smaller length?"))
    check.tensor(out, f"the logits for sentences of {_MAX_LEN} tokens", shape=(1, _MAX_LEN, _TGT_VOCAB), dtype="float")
    check.ok(f"handles sentences of max_len = {_MAX_LEN} tokens")


def _moves(check: Check, build: Callable, src: torch.Tensor, tgt: torch.Tensor) -> None:
    """.double() moves every tensor the model keeps; on another device nothing is created on the CPU."""
    stages.follows_dtype(check, build(), [src, tgt], "Transformer")
    stages.module_on_gpu(check, build(), src, tgt, what="Transformer")
    stages.in_16_bits_module(check, build(), (src, tgt), "Transformer")
    stages.state_dict_round_trip(check, build, lambda m: m(src, tgt), "Transformer")


def _model_dropout_measured(check: Check, build: Callable, src: torch.Tensor, tgt: torch.Tensor, p: float = 0.5) -> None:
    """Train mode: rate p on the embeddings + positions (both sides), nothing between the stacks and the ends."""
    model = build(dropout=p).train()
    layers = [f"{kind}_layers.{i}" for kind in ("encoder", "decoder") for i in range(_NUM_LAYERS)]
    names = ["positional_encoding", *layers, "generator"]

    def sites() -> list[stages.Site] | None:
        with Recorder(model, names) as rec:
            check.call(model, src, tgt, what="Transformer.forward")
        pe_calls = rec.calls["positional_encoding"]
        if len(pe_calls) != 2 or any(len(rec.calls[n]) != 1 for n in names[1:]):
            return None  # an unusual call pattern: the values above have judged it
        pe, found, links = model.positional_encoding, [], []
        for (args, kwargs, out), side, first, tokens, table in zip(
                pe_calls, ("source", "target"), ("encoder_layers.0", "decoder_layers.0"), (src, tgt),
                (model.src_embed, model.tgt_embed)):
            embedded = args[0] if args else next(iter(kwargs.values()))
            raw = drop_pattern(embedded, table.weight[tokens] * math.sqrt(_D_MODEL))
            if raw.exact and raw.rate > 0:
                check.fail(f"In training mode your Transformer drops {round(100 * raw.rate)}% of the {side} "
                           f"embeddings before the positional encoding is added: a second dropout. The positional "
                           f"encoding's own dropout, on the sum, is the paper's: apply it once.")
            reference = check.call(pe.eval(), embedded, what="PositionalEncoding.forward")
            pe.train()
            found.append(stages.Site(f"the {side} embeddings plus positional encoding", out, reference,
                                     {"sentence of the batch": 0, "position": 1, "feature": 2}))
            links.append((out, rec.first_input(first), f"the {side} positional encoding", f"`{first}`"))
        for kind in ("encoder", "decoder"):  # one layer's output is the next one's input
            links += [(rec.output(f"{kind}_layers.{i}"), rec.first_input(f"{kind}_layers.{i + 1}"),
                       f"`{kind}_layers.{i}`", f"`{kind}_layers.{i + 1}`") for i in range(_NUM_LAYERS - 1)]
        last = f"encoder_layers.{_NUM_LAYERS - 1}"  # the memory every decoder layer reads is the encoder's output
        links += [(rec.output(last), rec.input(f"decoder_layers.{i}", 1, "memory"), f"`{last}`",
                   f"the memory of `decoder_layers.{i}`") for i in range(_NUM_LAYERS)]
        links.append((rec.output(f"decoder_layers.{_NUM_LAYERS - 1}"), rec.first_input("generator"),
                      "the last decoder layer", "`generator`"))
        _nothing_between(check, links, getattr(getattr(pe, "dropout", None), "p", None))
        return found

    stages.dropout_measured(check, sites, p, "Transformer", fix=(
        "The paper drops the sums of the embeddings and the positional encodings: your PositionalEncoding's own "
        "nn.Dropout(dropout) does it; build it with the dropout rate."))


def _nothing_between(check: Check, links: list, pe_rate: float | None = None) -> None:
    """What one part produced is what the next received: no extra dropout in between."""
    for produced, received, source, target in links:
        if isinstance(produced, torch.Tensor) and isinstance(received, torch.Tensor) and not identical(
                produced.detach(), received.detach()):
            again = drop_pattern(received, produced)
            if again.exact and again.rate > 0 and pe_rate == 0 and "positional encoding" in source:
                check.fail(f"In training mode your Transformer's PositionalEncoding drops nothing (it was built with "
                           f"dropout 0), and a dropout of its own follows it ({round(100 * again.rate)}% of the "
                           f"entries before {target}). The same values, but not the contract: build "
                           f"PositionalEncoding(d_model, dropout, max_len) with the model's rate and drop the extra "
                           f"nn.Dropout, since lesson 07 reads the rate from `model.positional_encoding.dropout.p`.")
            if again.exact and again.rate > 0:
                check.fail(f"In training mode your Transformer drops entries a second time between {source} and "
                           f"{target} ({round(100 * again.rate)}% of them): an extra dropout. The positional "
                           f"encoding's own dropout is the paper's; apply it once.")
            if _normalised(produced.detach(), received.detach()):
                check.fail(_final_norm(f"{source}, before {target}"))
            check.fail(f"In training mode something changes the tensor between {source} and {target} (an extra "
                       f"dropout?): the paper applies dropout only to the embeddings plus positions and inside "
                       f"the layers.")


def _normalised(produced: torch.Tensor, received: torch.Tensor) -> bool:
    """Whether ``received`` is a layer norm of ``produced`` (normalised per position, then any scale and shift per feature)."""
    if produced.shape != received.shape or produced.dim() < 2:
        return False
    d = produced.shape[-1]
    z = F.layer_norm(produced.double(), (d,)).reshape(-1, d)
    r = received.double().reshape(-1, d)
    zc, rc = z - z.mean(0), r - r.mean(0)
    scale = (zc * rc).sum(0) / (zc * zc).sum(0).clamp_min(1e-12)
    return bool((rc - scale * zc).abs().max() <= 1e-3 * (1 + r.abs().max()))


def _model_masks_swapped(check: Check, model: nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> None:
    """A crash, and the first decoder layer received the target mask where the source mask goes: say so."""
    seen: list = []
    handle = model.decoder_layers[0].register_forward_pre_hook(lambda _m, args: seen.append(args))
    try:
        out = check.attempt(model, src, tgt, what="Transformer.forward")
    finally:
        handle.remove()
    if not isinstance(out, Raised) or not seen or len(seen[0]) < 4:
        return
    third, fourth = seen[0][2], seen[0][3]
    L_src, L_tgt = src.shape[1], tgt.shape[1]
    if (isinstance(third, torch.Tensor) and isinstance(fourth, torch.Tensor) and third.dim() == 4
            and fourth.dim() == 4 and third.shape[-2:] == (L_tgt, L_tgt) and fourth.shape[-1] == L_src):
        check.fail(
            "Your Transformer passes the two masks to its decoder layers the wrong way round: the third argument "
            f"has the shape of the target mask {fmt_shape(third.shape)}, the fourth that of the source mask "
            f"{fmt_shape(fourth.shape)}. DecoderLayer.forward is (x, memory, src_mask, tgt_mask): call "
            f"`layer(x, memory, src_mask, tgt_mask)`.\n\n{out.message}"
        )


@functools.cache
def _course_transformer() -> type[nn.Module]:
    """The course's own Transformer (solutions/05), loaded with lessons 01 to 04 as later lessons load it."""
    from ..autograde import solutions_dir
    from ..notebook import load_exercises

    namespace: dict = {}
    for lesson in sorted({c.lesson for c in contracts.CONTRACTS.values() if "01" <= c.lesson[:2] <= "05"}):
        names = [n for c in contracts.CONTRACTS.values() if c.lesson == lesson for n in (*c.loaded_with, c.exercise)]
        load_exercises(solutions_dir() / f"{lesson}.ipynb", names, namespace=namespace)
    return namespace["Transformer"]


def _as_answer(slip: Slip) -> type[nn.Module]:
    """The slip made into a learner's Transformer: the course's own, its embeddings and extra LayerNorms as
    ``_assembled``'s flags put them (for the generated catalogue tests)."""
    flags = {**dict(scale=_ROOT, tgt_scale=None, scale_after=False, pe=(True, True), first=(None, None),
                    final=(None, None)), **slip.mutant}
    count = 1 + max([-1] + [i for i in (*flags["first"], *flags["final"]) if i is not None])

    class SlippedTransformer(_course_transformer()):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.extra_norms = nn.ModuleList(nn.LayerNorm(self.d_model) for _ in range(count))

        def _embedded(self, table: nn.Embedding, tokens: torch.Tensor, side: int) -> torch.Tensor:
            factor = flags["scale"] if side == 0 or flags["tgt_scale"] is None else flags["tgt_scale"]
            if flags["scale_after"]:
                x = self.positional_encoding(table(tokens)) * factor
            else:
                x = (self.positional_encoding if flags["pe"][side] else self.positional_encoding.dropout)(
                    table(tokens) * factor)
            return self._normed(x, flags["first"][side])

        def _normed(self, x: torch.Tensor, index: int | None) -> torch.Tensor:
            return x if index is None else self.extra_norms[index](x)

        def encode(self, src):
            visible = (src != self.pad_id)[:, None, None, :]
            x = self._embedded(self.src_embed, src, 0)
            for block in self.encoder_layers:
                x = block(x, visible)
            return self._normed(x, flags["final"][0])

        def decode(self, tgt, memory, src):
            visible, L = (src != self.pad_id)[:, None, None, :], tgt.shape[1]
            causal = torch.ones(L, L, dtype=torch.bool, device=tgt.device).tril() & (tgt != self.pad_id)[:, None, None, :]
            y = self._embedded(self.tgt_embed, tgt, 1)
            for block in self.decoder_layers:
                y = block(y, memory, visible, causal)
            return self.generator(self._normed(y, flags["final"][1]))

    return SlippedTransformer


TRANSFORMER = Exercise(
    "Transformer", _check_transformer,
    oracle="a model assembled from nn.TransformerEncoderLayer / nn.TransformerDecoderLayer carrying the learner's "
           "weights, with lesson 03's sinusoids and masks from pad_id, in float64; and the properties a translation "
           "model must have (causality, padding, word order, encode/decode, dropout measured)",
    cases=f"Transformer({_SRC_VOCAB}, {_TGT_VOCAB}, d_model={_D_MODEL}, num_heads={_NUM_HEADS}, "
          f"num_layers={_NUM_LAYERS}, d_ff={_D_FF}, max_len={_MAX_LEN}, pad_id={_PAD}); batches of {_B} with source "
          f"and target of lengths {_L_SRC} and {_L_TGT}, token 0 a real word; sentences of max_len; vocabularies "
          f"600 and 500 for the initialisation; drawn from the check's seed",
    slips=SLIPS, answer=_as_answer)
