"""Checker for lesson 10's from_marian: a real translator's weights in the learner's own Transformer.

The oracle is Hugging Face's ``MarianMTModel`` itself: tiny random Marians of several sizes (float32 and
float64), built from a ``MarianConfig`` with the quirks of Helsinki-NLP's ``opus-mt-en-de`` (SiLU, the sines
and cosines in two halves of the positional table, a ``final_logits_bias``, the pad id as decoder start token
and as the last id, end of sentence 0), every weight random. The learner's model must give Marian's logits on
a padded batch.

Known slips are one table of records, :data:`SLIPS`: a mutant of the oracle (the flags of ``_slipped_logits``: a
change made to a copy of Marian, or to how it is called) and the message that names it. They are replayed on the same inputs only
once the learner's logits disagree with Marian's, never to accept. Two signatures are read off the mismatch
itself: logits that are Marian's plus one constant per vocabulary column (an output bias that is not
final_logits_bias), and a size mismatch raised inside from_marian between a weight and its transpose (a
weight copied with ``.T``). What neither explains is narrowed down by hand: the encoder or the decoder, and
any weight of Marian's that the learner's model does not hold.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from typing import Any, Callable

import torch
from torch import nn

from ._core import Check, CheckResult, is_ours, close_enough, describe, fmt_shape, generator, seed_offset
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip

_NAME = "from_marian"
#: Tolerances against Marian's logits, by dtype (the lesson's promise: 1e-4 in float32, far closer in float64).
_TOL = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-9, 1e-9)}


@dataclasses.dataclass(frozen=True)
class Size:
    """One tiny Marian: vocabulary, width, layers, heads, feed-forward width, positions, dtype."""

    vocab: int
    d_model: int
    layers: int
    heads: int
    d_ff: int
    positions: int
    dtype: torch.dtype

    @property
    def label(self) -> str:
        return (f"a tiny Marian (vocab_size={self.vocab}, d_model={self.d_model}, {self.layers} + {self.layers} "
                f"layers, {self.heads} heads, d_ff={self.d_ff}, {str(self.dtype).replace('torch.', '')})")


#: The sizes the checker builds (d_k of 4, 8 and 3; one layer and three; float32 and float64).
SIZES = (Size(37, 16, 2, 4, 24, 40, torch.float32), Size(50, 24, 1, 3, 40, 32, torch.float64),
         Size(29, 12, 3, 4, 20, 24, torch.float32))


def check_from_marian(from_marian: Callable) -> CheckResult:
    """Check ``from_marian(marian)``: the learner's Transformer holding Marian's weights gives Marian's logits."""
    return FROM_MARIAN.check(from_marian)


def _check_from_marian(check: Check, from_marian: Callable) -> None:
    check.callable_(from_marian, _NAME)
    try:
        import transformers  # noqa: F401  (the oracle)
    except ImportError:
        check.error("This checker compares your model with Hugging Face's MarianMTModel, and `transformers` is not "
                    "installed here: `pip install transformers sentencepiece`, restart the kernel, run again.")
    for i, size in enumerate(SIZES):
        marian = tiny_marian(size, seed=i)
        model = _ported(check, from_marian, marian, size)
        src, tgt = _batch(size, seed=10 + i)
        _logits_agree(check, model, marian, size, src, tgt)
    check.ok("returns an nn.Module with encode and decode, in eval mode, on Marian's device and in its dtype "
             "(float32 and float64), sharing no storage with Marian, and leaves Marian as it was")
    check.ok("gives Marian's logits through model(src, tgt) and decode(tgt, encode(src), src), on padded batches "
             f"of {len(SIZES)} tiny Marians (float32 and float64)")
    _pad_can_be_forbidden(check, model, marian, src, tgt)
    if torch.cuda.is_available():  # Marian on the GPU, as the lesson puts it there: the model must follow
        marian = tiny_marian(SIZES[0], seed=7).to("cuda")
        model = _ported(check, from_marian, marian, SIZES[0])
        src, tgt = (t.to("cuda") for t in _batch(SIZES[0], seed=17))
        _logits_agree(check, model, marian, SIZES[0], src, tgt)
        check.ok("with Marian on the GPU, your model is built there and gives Marian's logits")


# --------------------------------------------------------------------------
# The oracle and its inputs


def tiny_marian(size: Size, seed: int = 0, **config: Any) -> nn.Module:
    """A MarianMTModel with opus-mt-en-de's quirks, in ``size``, every weight random (layer norms and biases too).

    ``config`` overrides MarianConfig's arguments (the tests try unshared embeddings, no embedding scale).
    """
    from transformers import MarianConfig, MarianMTModel

    pad = size.vocab - 1  # as in opus-mt-en-de: the pad id is the last id, end of sentence is 0
    config = MarianConfig(**{**dict(
        vocab_size=size.vocab, decoder_vocab_size=size.vocab, d_model=size.d_model, encoder_layers=size.layers,
        decoder_layers=size.layers, encoder_attention_heads=size.heads, decoder_attention_heads=size.heads,
        encoder_ffn_dim=size.d_ff, decoder_ffn_dim=size.d_ff, max_position_embeddings=size.positions,
        activation_function="swish", scale_embedding=True, share_encoder_decoder_embeddings=True,
        pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=None,
        dropout=0.1, attention_dropout=0.0, activation_dropout=0.0), **config})
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed + seed_offset())  # MarianMTModel draws its initial weights from the global generator
        marian = MarianMTModel(config)
    finally:
        torch.random.set_rng_state(state)
    g = generator(100 + seed)
    with torch.no_grad():
        for name, p in marian.named_parameters():
            if "embed_positions" in name:
                continue  # the sinusoidal table, as Marian computes it
            if name.endswith("layer_norm.weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:  # the weight matrices, and the shared embedding (whose pad row is the start token's: not zero)
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
        marian.final_logits_bias.copy_(torch.randn(marian.final_logits_bias.shape, generator=g))
    return marian.to(size.dtype).eval()


def _batch(size: Size, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A source batch padded with the pad id, and targets that start with it (one ends in padding too)."""
    pad, g = size.vocab - 1, generator(seed)
    src = torch.randint(1, pad, (3, 7), generator=g)  # (B, L_src): words, then end of sentence (0), then padding
    src[0, 6], src[1, 4], src[1, 5:], src[2, 2], src[2, 3:] = 0, 0, pad, 0, pad
    tgt = torch.randint(1, pad, (3, 6), generator=g)  # (B, L_tgt)
    tgt[:, 0] = pad  # the decoder start token
    tgt[1, 3], tgt[1, 4:] = 0, pad  # a sentence that ended: end of sentence (0), then padding
    return src, tgt


def marian_logits(marian: nn.Module, src: torch.Tensor, tgt: torch.Tensor, hide_target_padding: bool = False,
                  source_pad: int | None | str = "pad") -> torch.Tensor:
    """Marian's logits (B, L_tgt, V), as generate() sees them: the source padding masked, the target's not.

    The mutants change that: ``hide_target_padding`` hides the target's pad tokens (the start token too), and
    ``source_pad`` is the id masked in the source (None: nothing masked).
    """
    pad = marian.config.pad_token_id
    hidden = pad if source_pad == "pad" else source_pad
    with torch.no_grad():
        return marian(input_ids=src, attention_mask=None if hidden is None else src.ne(hidden).long(),
                      decoder_input_ids=tgt,
                      decoder_attention_mask=tgt.ne(pad).long() if hide_target_padding else None).logits


# --------------------------------------------------------------------------
# The known slips: one record each, a mutant of the oracle and the message that names it


def _slipped_logits(marian: nn.Module, src: torch.Tensor, tgt: torch.Tensor,
                    mutate: Callable[[nn.Module], None] | None = None, hide_target_padding: bool = False, source_pad: int | None | str = "pad",
                    from_position: int = 0) -> torch.Tensor:
    """Marian's logits with one known slip (its flags): made on a copy of Marian (``mutate``), or in how it is called
    (``marian_logits``' own flags); from target position ``from_position`` on (the first the slip determines)."""
    if mutate is not None:
        marian = copy.deepcopy(marian)
        mutate(marian)
    return marian_logits(marian, src, tgt, hide_target_padding, source_pad)[:, from_position:]


def _layers(marian: nn.Module) -> list[nn.Module]:
    return [*marian.model.encoder.layers, *marian.model.decoder.layers]


def _attentions(marian: nn.Module) -> list[nn.Module]:
    return [m for layer in _layers(marian) for m in (layer.self_attn, getattr(layer, "encoder_attn", None)) if m]


def _with_relu(marian: nn.Module) -> None:
    for layer in _layers(marian):
        layer.activation_fn = nn.ReLU()


def _interleaved(marian: nn.Module) -> None:
    """The paper's layout: sin in the even columns, cos in the odd ones, from Marian's [sin | cos] halves."""
    for side in (marian.model.encoder, marian.model.decoder):
        table = side.embed_positions.weight
        half = table.shape[1] // 2
        paper = torch.stack([table[:, :half], table[:, half:]], dim=-1).flatten(1)  # (positions, d_model)
        with torch.no_grad():
            table.copy_(paper)


def _no_final_bias(marian: nn.Module) -> None:
    marian.final_logits_bias.zero_()


def _embed_scale(factor: Callable[[int], float]) -> Callable[[nn.Module], None]:
    def mutate(marian: nn.Module) -> None:
        for side in (marian.model.encoder, marian.model.decoder):
            side.embed_scale = factor(marian.config.d_model)
    return mutate


def _projections(order: tuple[str, str, str]) -> Callable[[nn.Module], None]:
    """W_q, W_k, W_v given the weights of Marian's projections in ``order`` (q_proj, k_proj, v_proj permuted)."""
    def mutate(marian: nn.Module) -> None:
        for attention in _attentions(marian):
            linears = {n: copy.deepcopy(getattr(attention, n)) for n in ("q_proj", "k_proj", "v_proj")}
            for target, source in zip(("q_proj", "k_proj", "v_proj"), order):
                setattr(attention, target, linears[source])
    return mutate


def _transposed(names: tuple[str, ...]) -> Callable[[nn.Module], None]:
    def mutate(marian: nn.Module) -> None:
        with torch.no_grad():
            for attention in _attentions(marian):
                for n in names:
                    weight = getattr(attention, n).weight
                    weight.copy_(weight.t().clone())
    return mutate


def _swapped_norms(where: str, a: str, b: str) -> Callable[[nn.Module], None]:
    def mutate(marian: nn.Module) -> None:
        side = marian.model.encoder if where == "encoder" else marian.model.decoder
        for layer in side.layers:
            first, second = getattr(layer, a), getattr(layer, b)
            setattr(layer, a, second)
            setattr(layer, b, first)
    return mutate


_QKV = "Marian's attentions name them `q_proj`, `k_proj`, `v_proj` and `out_proj`: W_q takes q_proj, W_k k_proj, " \
       "W_v v_proj, W_o out_proj. (Marian registers k_proj before q_proj, so pairing parameters in the order of " \
       "named_parameters() mixes them up: pair them by name.)"
_NORMS = ("Each sublayer has its own LayerNorm. Encoder layer: norm1 takes `self_attn_layer_norm`, norm2 "
          "`final_layer_norm`. Decoder layer: norm1 takes `self_attn_layer_norm`, norm2 `encoder_attn_layer_norm`, "
          "norm3 `final_layer_norm`.")
_NAMES = {"q_proj": "W_q", "k_proj": "W_k", "v_proj": "W_v"}


def _qkv_slip(order: tuple[str, str, str]) -> Slip:
    wrong = [f"{_NAMES[t]} holds {s}" for t, s in zip(("q_proj", "k_proj", "v_proj"), order) if t != s]
    return Slip(f"qkv {' '.join(order)}", Diagnosis(
        f"in every attention, {', '.join(wrong)}: your logits are Marian's with its query, key and value projections "
        f"mixed up that way.", _QKV), dict(mutate=_projections(order)))


#: The known slips of a port, in the order they are tried. Each message says the cause, then the fix.
SLIPS: tuple[Slip, ...] = (
    Slip("relu", Diagnosis(
        "your feed-forward networks use ReLU, where Marian's use SiLU, x * sigmoid(x) (its "
        "`config.activation_function` is \"swish\"): your logits are those of a Marian switched to ReLU.",
        "Put `SiLUFeedForward(layer.feed_forward)` in place of the `feed_forward` of every encoder and decoder "
        "layer."), dict(mutate=_with_relu)),
    Slip("table", Diagnosis(
        "your positional table has the paper's layout, sin and cos interleaved (columns 2i and 2i + 1), where "
        "Marian's holds all the sines in its first half and all the cosines in its second: your logits are those of "
        "a Marian given the interleaved table.",
        "Copy Marian's own table, `marian.model.encoder.embed_positions.weight`, into `model.positional_encoding.pe` "
        "(or re-lay yours, `torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=1)`). If you did, check that your "
        "PositionalEncoding's forward reads its buffer `self.pe`."), dict(mutate=_interleaved)),
    Slip("final bias", Diagnosis(
        "your logits leave out `marian.final_logits_bias`, the bias Marian adds to every logit (`lm_head` itself "
        "has none).", "Copy it into your generator's bias: `model.generator.bias.copy_(marian.final_logits_bias[0])` "
        "(it has shape (1, vocab_size))."), dict(mutate=_no_final_bias)),
    Slip("scaled twice", Diagnosis(
        "your embeddings are multiplied by sqrt(d_model) twice: your Transformer already scales them, as Marian does "
        "(its `embed_scale`).", "Copy `marian.model.shared.weight` as it is, without multiplying it."),
        dict(mutate=_embed_scale(lambda d: float(d)))),
    Slip("not scaled", Diagnosis(
        "your embeddings end up without the sqrt(d_model) scale: Marian multiplies them by sqrt(d_model) "
        "(`config.scale_embedding` is True), exactly as your Transformer does.",
        "Copy `marian.model.shared.weight` as it is, without dividing it."), dict(mutate=_embed_scale(lambda d: 1.0))),
    *(_qkv_slip(order) for order in (("k_proj", "v_proj", "q_proj"), ("v_proj", "q_proj", "k_proj"),
                                     ("k_proj", "q_proj", "v_proj"), ("v_proj", "k_proj", "q_proj"),
                                     ("q_proj", "v_proj", "k_proj"))),
    Slip("encoder norms", Diagnosis("in every encoder layer, norm1 and norm2 hold each other's weights.", _NORMS),
         dict(mutate=_swapped_norms("encoder", "self_attn_layer_norm", "final_layer_norm"))),
    Slip("decoder norms 2 3", Diagnosis("in every decoder layer, norm2 and norm3 hold each other's weights.", _NORMS),
         dict(mutate=_swapped_norms("decoder", "encoder_attn_layer_norm", "final_layer_norm"))),
    Slip("decoder norms 1 2", Diagnosis("in every decoder layer, norm1 and norm2 hold each other's weights.", _NORMS),
         dict(mutate=_swapped_norms("decoder", "self_attn_layer_norm", "encoder_attn_layer_norm"))),
    Slip("transposed", Diagnosis(
        "every attention projection holds the transpose of Marian's weight.",
        "Both models use nn.Linear, which stores (out_features, in_features), so copy each weight as it is, without "
        "`.T` (GPT-2's Conv1D in Hugging Face stores the transpose; Marian does not)."),
        dict(mutate=_transposed(("q_proj", "k_proj", "v_proj", "out_proj")))),
    Slip("start hidden", Diagnosis(
        "your model hides its first target position from every query. Marian starts decoding with its pad id "
        "(`decoder_start_token_id == pad_token_id`), and your target mask hides every pad token, the start token "
        "included.", "Marian's decoder masks the future only, never target padding: wrap the self-attention of "
        "every decoder layer, `layer.self_attn = CausalOnly(layer.self_attn)`."),
        dict(hide_target_padding=True, from_position=1)),
    Slip("pad id 0", Diagnosis(
        "your model hides id 0 of the source, not Marian's pad id: it was built with the course's pad id, 0, which "
        "is Marian's end of sentence.", "Build your Transformer with Marian's pad id, "
        "`pad_id=marian.config.pad_token_id`, so that its masks hide the padded source positions and nothing else."),
        dict(source_pad=0)),
    Slip("source padding", Diagnosis(
        "your model does not mask the source padding: your logits are Marian's when Marian is told nothing about "
        "padding.", "Build your Transformer with Marian's pad id, `pad_id=marian.config.pad_token_id`, so that its "
        "masks hide the padded source positions."), dict(source_pad=None)),
)


def named_slip(marian: nn.Module, src: torch.Tensor, tgt: torch.Tensor, out: torch.Tensor,
               atol: float, rtol: float) -> Slip | None:
    """The known slip whose mutant, run on the same inputs, gives the learner's logits ``out``; else None."""
    def agrees(wrong: torch.Tensor) -> bool:  # the positions the slip determines: the last ones
        return out.dim() == 3 and out[:, out.shape[1] - wrong.shape[1]:].shape == wrong.shape and \
            close_enough(out[:, out.shape[1] - wrong.shape[1]:], wrong, atol, rtol)

    return matching_slip(SLIPS, lambda slip: slip.replay(_slipped_logits, marian, src, tgt), agrees)


class _SlippedPort(nn.Module):
    """A port that makes one known slip: a copy of Marian, mutated or called as the slip says (the slip's answer)."""

    def __init__(self, marian: nn.Module, slip: Slip):
        super().__init__()
        self.flags = {k: v for k, v in slip.mutant.items() if k not in ("mutate", "from_position")}
        self.marian = copy.deepcopy(marian)
        slip.mutant.get("mutate", lambda m: None)(self.marian)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return _slipped_logits(self.marian, src, tgt, **self.flags)

    def encode(self, src: torch.Tensor) -> torch.Tensor:  # (read by the checker only once the logits agree)
        return self.marian.model.encoder(input_ids=src).last_hidden_state

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return self(src, tgt)


def _as_answer(slip: Slip) -> Callable:
    """The slip made into a learner's from_marian (for the generated catalogue tests)."""
    def slipped_from_marian(marian: nn.Module) -> nn.Module:
        return _SlippedPort(marian, slip).eval()

    return slipped_from_marian


# --------------------------------------------------------------------------
# The stages


def _ported(check: Check, from_marian: Callable, marian: nn.Module, size: Size) -> nn.Module:
    """from_marian's model: an nn.Module with encode and decode, in eval mode, Marian's device and dtype, no
    storage shared, Marian left as it was."""
    before = {k: v.clone() for k, v in marian.state_dict().items()}
    modes = [m.training for m in marian.modules()]
    model = check.call(from_marian, marian, what=_NAME, hint=lambda exc: _crash_hint(exc, marian))
    if any(not torch.equal(before[k], v) for k, v in marian.state_dict().items()) or \
            [m.training for m in marian.modules()] != modes:
        check.fail("from_marian changed Marian (its weights, or its mode): copy Marian's tensors INTO your model "
                   "(`.copy_()` on your parameters, inside torch.no_grad()), and leave Marian as it was given.")
    if not isinstance(model, nn.Module) or not all(callable(getattr(model, m, None)) for m in ("encode", "decode")):
        check.fail(f"from_marian should return your lesson-05 Transformer (an nn.Module with encode and decode), "
                   f"but it returned {describe(model)}. Build `Transformer(...)`, copy the weights, `return model`.")
    if any(m.training for m in model.modules()):
        check.fail("The model from_marian returns is in training mode, so its dropout would change every "
                   "translation: end with `return model.eval()`.")
    tensors = [*model.named_parameters(), *model.named_buffers()]
    reference = next(marian.parameters())
    wrong = [(n, t) for n, t in tensors if t.is_floating_point() and
             (t.dtype != reference.dtype or t.device != reference.device)]
    if wrong:
        name, t = wrong[0]
        check.fail(f"Your model's `{name}` is {str(t.dtype).replace('torch.', '')} on {t.device}, where Marian is "
                   f"{str(reference.dtype).replace('torch.', '')} on {reference.device} ({size.label}): move the "
                   f"model to Marian's device and dtype, `model.to(weight.device, weight.dtype)` with "
                   f"`weight = next(marian.parameters())`.")
    theirs = {t.untyped_storage().data_ptr() for t in (*marian.parameters(), *marian.buffers())}
    shared = [n for n, t in tensors if t.untyped_storage().data_ptr() in theirs]
    if shared:
        check.fail(f"Your model shares storage with Marian ({', '.join(f'`{n}`' for n in shared[:3])}"
                   f"{', ...' if len(shared) > 3 else ''}): its tensors are Marian's own, so changing one changes "
                   f"the other (the lesson sets an entry of generator.bias). Copy the values: "
                   f"`param.copy_(marian_tensor)` inside torch.no_grad(), never `param = marian_tensor` or "
                   f"`nn.Parameter(marian_tensor)`.")
    return model


def _logits_agree(check: Check, model: nn.Module, marian: nn.Module, size: Size, src: torch.Tensor,
                  tgt: torch.Tensor) -> None:
    atol, rtol = _TOL[size.dtype]
    want = marian_logits(marian, src, tgt)
    shape = tuple(want.shape)
    with torch.no_grad():
        out = check.call(model, src, tgt, what="your model(src, tgt)")
    out = check.tensor(out, f"your model's logits for {size.label}", shape=shape, finite=False,
                       shape_hint="model(src, tgt) returns one logit per target position and token of Marian's "
                                  "vocabulary: (B, L_tgt, vocab_size).")
    if not close_enough(out, want, atol, rtol):
        slip = named_slip(marian, src, tgt, out, atol, rtol)
        if slip is None and not bool(torch.isfinite(out).all()):
            slip = _start_probe(check, model, marian, src, tgt, atol, rtol)
        if slip is not None:
            check.fail(f"Your ported model is wrong for {size.label}: {slip.says}")
        offset = _column_offset(model, marian, out, want, atol, rtol)
        if offset:
            check.fail(f"Your ported model is wrong for {size.label}: {offset}")
        check.fail(_unexplained(check, model, marian, size, src, tgt, out, want, atol, rtol))
    with torch.no_grad():
        memory = check.call(model.encode, src, what="your model.encode(src)")
        again = check.call(model.decode, tgt, memory, src, what="your model.decode(tgt, memory, src)")
    if not close_enough(again, want, atol, rtol):
        check.fail(f"model(src, tgt) gives Marian's logits, but model.decode(tgt, model.encode(src), src) does not "
                   f"({size.label}): greedy decoding and beam search use encode and decode. Change the model only "
                   f"through its submodules, which forward, encode and decode all use.")


_SIZES_HINT = ("Build your Transformer with Marian's sizes, read from `marian.config`: vocab_size (both sides), "
               "d_model, encoder_attention_heads, encoder_layers, encoder_ffn_dim, max_position_embeddings and "
               "pad_token_id.")
_TRANSPOSE = re.compile(r"\.T\b|\.mT\b|\.t\(\)|\.transpose\(|\.permute\(")


def _crash_hint(exc: BaseException, marian: nn.Module) -> str:
    """What a crash inside from_marian most likely means: a weight copied transposed, else wrong sizes."""
    message = str(exc)
    if not isinstance(exc, RuntimeError) or not ("must match the size" in message or "size mismatch" in message):
        return _SIZES_HINT
    loaded = re.search(r"size mismatch for (\S+): copying a param with shape torch\.Size\(\[([\d, ]*)\]\) from "
                       r"checkpoint, the shape in current model is torch\.Size\(\[([\d, ]*)\]\)", message)
    if loaded:  # load_state_dict: both shapes are in the message
        given, own = (tuple(int(n) for n in g.split(",") if n.strip()) for g in loaded.group(2, 3))
        if len(own) == 2 and own[0] != own[1] and given == own[::-1]:
            return (f"Your `{loaded.group(1)}` has shape {fmt_shape(own)} and the tensor loaded into it has the "
                    f"transposed shape, {fmt_shape(given)}: that weight was copied transposed (`.T`). Both models "
                    f"use nn.Linear, which stores (out_features, in_features): copy each weight as it is.")
        return _SIZES_HINT
    frames = [tb for tb in _tracebacks(exc) if not is_ours(tb.tb_frame.f_code.co_filename)]
    line = _line(frames[-1]) if frames else ""
    dims = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", message)
    if dims is None:
        return _SIZES_HINT
    a, b = int(dims.group(1)), int(dims.group(2))  # the last size of the tensor written into, of the one copied
    theirs = {id(p): name for name, p in marian.named_parameters()}
    for tb in reversed(frames):  # the innermost of the learner's frames first
        here = _line(tb)
        dotted = re.sub(r"\[(\d+)\]", r".\1", here)  # layers[0] as named_parameters() writes it, layers.0
        pairs = [(int(own_name in dotted) + int(local in dotted), own_name, own, marian_name, their)
                 for own_name, own, local, marian_name, their in _transposed_pairs(tb.tb_frame.f_locals, theirs, a, b)]
        pairs = [pair for pair in pairs if pair[0]]  # named on the line that raised
        if pairs:
            _, own_name, own, marian_name, their = max(pairs, key=lambda pair: pair[0])
            if tuple(their.shape) == tuple(own.shape):  # the same shape: it went in as its transpose
                return (f"This is a weight copied transposed (`.T`): Marian's `{marian_name}` has shape "
                        f"{fmt_shape(their.shape)}, as your `{own_name}` does, and the line `{here}` copies its "
                        f"transpose, {fmt_shape(their.shape[::-1])}. Both models use nn.Linear, which stores "
                        f"(out_features, in_features): copy each weight as it is, without `.T`.")
            return (f"Your `{own_name}` has shape {fmt_shape(own.shape)}, and the line `{here}` copies Marian's "
                    f"`{marian_name}` into it, whose shape {fmt_shape(their.shape)} is its transpose: either that is "
                    f"the wrong weight (fc1 goes into linear1, fc2 into linear2; W_q takes q_proj), or your "
                    f"module was built with in_features and out_features swapped.")
    if _TRANSPOSE.search(line):
        return (f"Copying raised a size mismatch on the line `{line}`, which copies a transpose: a weight copied "
                f"transposed (`.T`)? Both models use nn.Linear, which stores (out_features, in_features): copy "
                f"each weight as it is.")
    return _SIZES_HINT


def _tracebacks(exc: BaseException) -> list:
    out, tb = [], exc.__traceback__
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


def _line(tb) -> str:
    import linecache
    return linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip()


def _transposed_pairs(names: dict, theirs: dict, a: int, b: int):
    """Pairs of tensors in a frame's locals, (local name, tensor) of the learner's, then (local name, name in Marian,
    tensor) of Marian's: the learner's of shape (b, a), a != b, and Marian's of that shape (copied as ``.T``) or
    of its transpose (the wrong weight, or a module built with its sizes swapped)."""
    if a == b:
        return
    ours, marians = [], []
    for local, value in list(names.items()):
        if isinstance(value, nn.Module):
            tensors = list(value.named_parameters(prefix=local))
        elif isinstance(value, torch.Tensor):
            tensors = [(local, value)]
        else:
            continue
        for name, t in tensors:
            if id(t) in theirs:
                marians.append((name, theirs[id(t)], t))
            elif t.dim() == 2 and tuple(t.shape) == (b, a):
                ours.append((name, t))
    for own_name, own in ours:
        for local, marian_name, their in marians:
            if their.dim() == 2 and tuple(their.shape) in ((b, a), (a, b)):
                yield own_name, own, local, marian_name, their


def _column_offset(model: nn.Module, marian: nn.Module, out: torch.Tensor, want: torch.Tensor, atol: float,
                   rtol: float) -> str:
    """The learner's logits are Marian's plus one constant per vocabulary column: the output layer's bias is not
    final_logits_bias (lesson 05's random initial bias left in place, say)."""
    if not bool(torch.isfinite(out).all()):
        return ""
    difference = out.double() - want.double()  # (B, L_tgt, V)
    offset = difference[:1, :1]  # (1, 1, V): the first position's
    if not close_enough(difference, offset.expand_as(difference), atol, rtol):
        return ""
    bias = getattr(getattr(model, "generator", None), "bias", None)
    final = marian.final_logits_bias[0]
    figures = f"(the offset ranges from {offset.min().item():.3g} to {offset.max().item():.3g})"
    if isinstance(bias, torch.Tensor) and bias.shape == final.shape and close_enough(bias.detach(), final, atol, rtol):
        return (f"your logits are Marian's plus one constant per vocabulary column, the same at every position of "
                f"every sentence {figures}, although your `generator.bias` holds final_logits_bias: a second bias "
                f"is added to your logits somewhere. Marian adds exactly one, final_logits_bias, in the output "
                f"layer.")
    return (f"your logits are Marian's plus one constant per vocabulary column, the same at every position of every "
            f"sentence {figures}: the bias of your output layer is not Marian's. final_logits_bias was not copied "
            f"into it, so `model.generator.bias` still holds what it had (nn.Linear's random initial values). Copy "
            f"it: `model.generator.bias.copy_(marian.final_logits_bias[0])` (final_logits_bias has shape "
            f"(1, vocab_size)).")


def _start_probe(check: Check, model: nn.Module, marian: nn.Module, src: torch.Tensor, tgt: torch.Tensor,
                 atol: float, rtol: float) -> Slip | None:
    """NaN in the logits: the start-token slip when another start token (not the pad id) gives Marian's logits."""
    other = tgt.clone()
    other[:, 0] = 1  # any id but the pad id
    other[other == marian.config.pad_token_id] = 2
    with torch.no_grad():
        out = check.attempt(model, src, other)
    if isinstance(out, torch.Tensor) and close_enough(out, marian_logits(marian, src, other), atol, rtol):
        return next(s for s in SLIPS if s.name == "start hidden")
    return None


def _unexplained(check: Check, model: nn.Module, marian: nn.Module, size: Size, src: torch.Tensor,
                 tgt: torch.Tensor, out: torch.Tensor, want: torch.Tensor, atol: float, rtol: float) -> str:
    """What no known slip explains: where it goes wrong (encoder or decoder), and a weight of Marian's not held."""
    pad = marian.config.pad_token_id
    head = f"Your ported model's logits differ from Marian's for {size.label}"
    if not bool(torch.isfinite(out).all()):
        head += " (they hold NaN or infinite values)"
    with torch.no_grad():
        memory = check.attempt(model.encode, src)
        theirs = marian.model.encoder(input_ids=src, attention_mask=src.ne(pad).long()).last_hidden_state
    real = src.ne(pad)
    where = ""
    if isinstance(memory, torch.Tensor) and memory.shape == theirs.shape:
        if close_enough(memory[real], theirs[real], atol, rtol):
            where = " The encoder's output is Marian's: the difference is in the decoder or the output layer."
        else:
            where = " Already the encoder's output (model.encode(src)) differs from Marian's encoder's."
    missing = _missing_weight(model, marian)
    held = f" {missing}" if missing else ""
    error = (out.double() - want.double()).abs()
    error = error[torch.isfinite(error)]
    largest = f" (largest difference {error.max().item():.3g})" if error.numel() else ""
    return (f"{head}{largest}.{where}{held}\nCompare your mapping with Marian's names, one module at a time: "
            f"`print(marian)` shows them, and every weight of Marian's should be in your model, as it is.")


def _missing_weight(model: nn.Module, marian: nn.Module) -> str:
    """The first weight of Marian's that no tensor of the model holds, as it is (or one it holds transposed)."""
    ours = [t.detach() for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()]
    for name, theirs in marian.named_parameters():
        if "embed_positions" in name or "embed_tokens" in name:
            continue  # the table is checked through the logits; the embeddings are model.shared
        t = theirs.detach()
        if any(o.shape == t.shape and torch.equal(o, t) for o in ours):
            continue
        if t.dim() == 2 and any(o.shape == t.t().shape and torch.equal(o, t.t()) for o in ours):
            return f"Your model holds Marian's `{name}` transposed: copy it as it is, without `.T`."
        return f"No tensor of your model holds Marian's `{name}` (shape {fmt_shape(t.shape)}): is it copied?"
    return ""


def _pad_can_be_forbidden(check: Check, model: nn.Module, marian: nn.Module, src: torch.Tensor,
                          tgt: torch.Tensor) -> None:
    """The lesson forbids the pad token by setting its entry of generator.bias to -inf: that must work."""
    pad = marian.config.pad_token_id
    bias = getattr(getattr(model, "generator", None), "bias", None)
    if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (marian.config.vocab_size,):
        check.fail(f"Your model's `generator.bias` is {describe(bias)}: the lesson forbids the pad token by setting "
                   f"its entry of `model.generator.bias` to -inf, so keep Marian's final_logits_bias there "
                   f"(a vector of vocab_size entries).")
    forbidding = copy.deepcopy(model)
    with torch.no_grad():
        forbidding.generator.bias[pad] = float("-inf")
        out = check.call(forbidding, src, tgt, what="your model(src, tgt), with generator.bias[pad_id] = -inf")
    want = marian_logits(marian, src, tgt)
    keep = torch.ones(want.shape[-1], dtype=torch.bool)
    keep[pad] = False
    atol, rtol = _TOL.get(want.dtype, _TOL[torch.float32])
    if not (isinstance(out, torch.Tensor) and out.shape == want.shape and bool((out[..., pad] == float("-inf")).all())
            and close_enough(out[..., keep], want[..., keep], atol, rtol)):
        check.fail("With `model.generator.bias[pad_id] = -inf` (how the lesson stops your model from writing the pad "
                   "token, as Marian's generate does), your logits for the pad token should be -inf and all the "
                   "others unchanged: keep final_logits_bias in `generator.bias`, which the output layer adds last.")
    check.ok("keeps final_logits_bias in generator.bias, where the lesson forbids the pad token")


FROM_MARIAN = Exercise(
    _NAME, _check_from_marian,
    oracle="Hugging Face's MarianMTModel itself, with the quirks of opus-mt-en-de (SiLU, the [sin | cos] positional "
           "table, final_logits_bias, the pad id as start token and last id, end of sentence 0)",
    cases="3 tiny random Marians (d_k 4, 8 and 3; one layer and three; float32 and float64) on padded batches of "
          "3 sentences; on the GPU too where there is one",
    slips=SLIPS, answer=_as_answer)
