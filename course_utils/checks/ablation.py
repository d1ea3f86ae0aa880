"""Checkers for lesson 09: the pieces the ablations swap in, a learned positional table and pre-LN layers.

``LearnedPositionalEncoding`` runs the stages of a module that adds a table (the
library's ``stages.table_*``, lesson 03's too) on a table of its own: the oracle is ``dropout(x + pe[:L])`` with the module's
``pe``, which the checker first fills with random values (on its own instances),
so that a table that starts at zero cannot hide a forward that ignores it, nor
one that adds a copy made in ``__init__``. Bespoke: the table learns, is float32,
starts finite and belongs to one instance; what a zero input gets back. Its
known slips (``LPE_SLIPS``) are mutants of that oracle, named by the one matcher.

``PreLNEncoderLayer`` and ``PreLNDecoderLayer`` are the library's layer stages
(:mod:`.stages.wiring`, lesson 05's layers run them too) with :data:`PRE_LN`:
PyTorch's twins built with ``norm_first=True``, the pre-LN formula in the
messages, and the pre-LN slip tables, wrong layers as mutants of the right one
(post-LN, the residual normalised too, keys and values read from the raw
stream, memory normalised, a layer that normalises its own output...).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import stages
from ._core import Check, CheckResult, close_enough, generator
from .exercise import Exercise
from .layers import layer_components, own_norm_problem
from .slips import Diagnosis, Slip, matching_slip, same_tensor
from .stages.wiring import DECODER_RESIDUAL_SLIPS, Pieces, Wiring

_LPE = "LearnedPositionalEncoding"
_PRE_LN = "x + dropout(sublayer(LayerNorm(x)))"


def check_learned_positional_encoding(LearnedPositionalEncoding: type[nn.Module]) -> CheckResult:
    """Check ``LearnedPositionalEncoding(d_model, dropout, max_len)``: dropout(x + pe[:L]) with a learned table."""
    return LEARNED_POSITIONAL_ENCODING.check(LearnedPositionalEncoding)


def check_pre_ln_encoder_layer(PreLNEncoderLayer: type[nn.Module]) -> CheckResult:
    """Check ``PreLNEncoderLayer(d_model, num_heads, d_ff, dropout)``: x + dropout(sublayer(LayerNorm(x))), twice."""
    return PRE_LN_ENCODER_LAYER.check(PreLNEncoderLayer)


def check_pre_ln_decoder_layer(PreLNDecoderLayer: type[nn.Module]) -> CheckResult:
    """Check ``PreLNDecoderLayer(d_model, num_heads, d_ff, dropout)``: pre-LN self-, cross-attention and feed-forward."""
    return PRE_LN_DECODER_LAYER.check(PreLNDecoderLayer)


def _check_learned_positional_encoding(check: Check, cls: type[nn.Module]) -> None:
    check.callable_(cls, _LPE, want_class=True)
    d_model, max_len = 16, 40

    def build(dropout: float = 0.0, d: int = d_model, n: int = max_len) -> nn.Module:
        return stages.is_module(check, check.build(cls, d, dropout, n), _LPE)

    module = build()
    check.ok(f"{_LPE}(d_model, dropout, max_len) builds")
    stages.contract_parts(check, module, _LPE, {"d_model": d_model, "dropout": 0.0, "max_len": max_len})
    first = _trainable_table(check, build, module)
    module.eval()
    table = _table(check, module, max_len, d_model)
    _zero_input(check, module, table, first, max_len)
    x = torch.randn(3, 11, d_model, generator=generator(4))
    stages.table_values(check, module, x, table, max_len, _LEARNED, LPE_SLIPS,
                        replay=lambda slip, x_: slip.replay(None, x_.double(), table, first))
    _table_learns(check, module, x, table, max_len)
    stages.table_sizes(check, build, module, table, generator(8), _LEARNED)
    stages.follows_dtype(check, build(0.0, 8, 20).eval(), [torch.randn(2, 6, 8, generator=generator(5))], _LPE)
    stages.table_dropout(check, build, max_len, d_model, generator(11), _LEARNED)
    stages.module_on_gpu(check, build(0.5).train(), torch.randn(2, 6, d_model, generator=generator(7)), what=_LPE)
    stages.state_dict_round_trip(check, build, lambda m: m(x), _LPE)
    stages.table_defaults(check, cls, _LEARNED)


def _trainable_table(check: Check, build: Callable[..., nn.Module], module: nn.Module) -> torch.Tensor:
    """``pe`` (an nn.Parameter of the contract's shape) learns, is float32, starts finite, is this instance's own."""
    owner, pe = f"Your {_LPE}(d_model=16, dropout=0.0, max_len=40)", module.pe
    if not pe.requires_grad:
        check.fail(f"{owner} has `pe` with requires_grad=False: it is listed among the parameters, but no gradient "
                   f"ever reaches it, so it never learns. Leave requires_grad at its default (True).")
    if pe.dtype != torch.float32:
        check.fail(f"{owner} has `pe` in {pe.dtype}: the course works in float32 (PyTorch's default dtype), as "
                   f"the rest of the model does. Create the table in float32.")
    values = pe.detach().double()
    if not bool(torch.isfinite(values).all()) or float(values.abs().max()) > 1e4:
        check.fail(f"{owner} starts with a table holding NaN, infinite or huge values (largest "
                   f"{float(values.abs().nan_to_num(posinf=1e300).max()):.3g}): it is never initialised. "
                   f"torch.empty(...) gives whatever was in memory; start from small random values "
                   f"(torch.randn(...) * 0.02, or nn.init.normal_) or from zeros.")
    spread = float(values.std())
    if spread > 0.25:
        check.fail(f"{owner} starts with a table of spread {spread:.1f} (standard deviation): the positions start as "
                   f"loud as the words (an embedding times sqrt(d_model) has entries of about 1), so row E would not "
                   f"compare like with like. Start it small, as the exercise says: "
                   f"`torch.randn(max_len, d_model) * 0.02`, or zeros.")
    other = getattr(build(), "pe", None)
    if isinstance(other, torch.Tensor) and (other is pe or (other.shape == pe.shape and other.data_ptr() == pe.data_ptr())):
        check.fail(f"Two instances of your {_LPE} share one table `pe` (a class attribute, or a tensor made "
                   f"outside __init__): training one model would move the positions of every other. Create the "
                   f"table inside __init__, `self.pe = nn.Parameter(...)`, so that each instance has its own.")
    check.ok("`pe` is trainable, float32 and starts with finite values; each instance has a table of its own")
    return values


def _table_learns(check: Check, module: nn.Module, x: torch.Tensor, table: torch.Tensor, max_len: int) -> None:
    """Gradients reach x and pe: row t of pe gets the gradient at position t summed over the batch, later rows none."""
    grad_pe = torch.zeros_like(table)

    def expected(r: torch.Tensor) -> dict[str, torch.Tensor]:
        grad_pe[: x.shape[1]] = r.sum(0)
        return {"x": r, "pe": grad_pe}

    stages.gradients(check, lambda x_: stages.table_forward(check, module, x_, max_len, _LEARNED), {"x": x},
                     expected, f"{_LPE}'s output", "the formula x + pe[:L]", params={"pe": module.pe}, causes={
                         frozenset({"pe"}): "The table does not learn as it should: row t must receive the gradient "
                                            "of position t, summed over the batch. Is it used as `self.pe.detach()`, "
                                            "`self.pe.data`, or through a copy?"})


def _table(check: Check, module: nn.Module, max_len: int, d_model: int) -> torch.Tensor:
    """Fill the checker's own instance's ``pe`` with N(0, 1) values; return them in float64: the table to add."""
    pe = getattr(module, "pe", None)
    if not (isinstance(pe, nn.Parameter) and tuple(pe.shape) == (max_len, d_model)):
        check.fail(f"{_LPE}(d_model={d_model}, max_len={max_len}) has no `pe` of shape ({max_len}, {d_model}): does "
                   f"the class use the d_model and max_len it is given, rather than fixed sizes?")
    values = torch.randn(pe.shape, generator=generator(3))
    with torch.no_grad():
        pe.copy_(values.to(pe.dtype))
    return values.double()


_LEARNED = stages.AddedTable(_LPE, "pe[:L]", _table)


def _zero_input(check: Check, module: nn.Module, table: torch.Tensor, first: torch.Tensor, max_len: int) -> None:
    """An all-zero input gives the table's first L rows, its current values, the same for every sentence."""
    B, L, d_model = 3, 11, table.shape[1]
    zeros = torch.zeros(B, L, d_model)
    out = stages.table_forward(check, module, zeros, max_len, _LEARNED)
    out = check.tensor(out, f"the output of {_LPE}", shape=(B, L, d_model), dtype=torch.float32, shape_hint=(
        "The output has the shape of the input, (B, L, d_model): the table's rows broadcast over the batch axis."))
    rows = out.detach().double()
    if not close_enough(rows, table[:L].expand(B, L, d_model)):
        slip = matching_slip(LPE_SLIPS, lambda s: s.replay(None, zeros.double(), table, first), same_tensor(rows))
        if slip is not None:
            check.fail(slip.says)
        check.close(rows, table[:L].expand(B, L, d_model), f"the output of {_LPE} for an all-zero input",
                    hint="With x = 0 the output is the table's first L rows, pe[:L], for every sentence.")
    check.ok("adds pe[:L], the table's current values, position by position (output for a zero input)")


def _copy(x: torch.Tensor, table: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """x plus the table's values from before the checker filled it (a copy made in __init__)."""
    if not bool(first.abs().gt(0).any()):
        raise ValueError("a copy of a table of zeros adds nothing: the slip 'ignored' names it")
    return x + first[: x.shape[1]].to(x.dtype)


#: the learned table's slips, mutants ``(x, table, first) -> output`` (float64; ``table`` the values the checker
#: put in ``pe``, ``first`` those it started with), tried at the zero input, then on random inputs
LPE_SLIPS = (
    Slip("batch rows", Diagnosis(
        f"{_LPE} adds row b of the table to every position of sentence b: it slices the table with the batch size "
        f"instead of the length.", "x has shape (B, L, d_model), so the length is `x.size(1)`, and the table's rows "
        "go along the second axis."), lambda x, table, first: x + table[: x.shape[0], None, :]),
    Slip("copy", Diagnosis(
        f"{_LPE} adds the table's values from before they changed (the checker filled `pe` with other values): "
        f"forward uses a copy made in __init__ (or `.data`, `.clone()`), not the parameter itself, so training would "
        f"never change what it adds.", "Read `self.pe` in forward."), _copy),
    Slip("shifted", Diagnosis(f"{_LPE} is shifted by one position: the row of position 0 is `pe[0]`.",
                              "Slice `self.pe[:L]`."), lambda x, table, first: x + table[1: x.shape[1] + 1]),
    Slip("ignored", Diagnosis(
        f"{_LPE} adds nothing to an all-zero input: forward does not add the table (or adds a copy of it made in "
        f"__init__, before the checker filled `pe` with other values).", "Return dropout(x + self.pe[:L])."),
        lambda x, table, first: x),
    Slip("table scaled", Diagnosis(
        f"{_LPE} multiplies the table by sqrt(d_model).", "That factor belongs to the embeddings, which your "
        "Transformer scales before this module: the table is added as it is, `x + self.pe[:L]`."),
        lambda x, table, first: x + table[: x.shape[1]] * x.shape[2] ** 0.5),
    Slip("table alone", Diagnosis(f"{_LPE} returns the table alone:", "add it to x, `x + self.pe[:x.size(1)]`."),
         lambda x, table, first: table[: x.shape[1]].expand_as(x)),
    *[slip for slip in stages.added_table_slips(_LPE, "pe[:L]") if slip.name != "x unchanged"],  # that is "ignored"
)


def _lpe_answer(slip: Slip) -> type[nn.Module]:
    """A slip made into a learner's LearnedPositionalEncoding (for the generated catalogue tests)."""
    class SlippedLearnedPositionalEncoding(nn.Module):
        def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
            super().__init__()
            self.pe = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
            self.dropout = nn.Dropout(p=dropout)
            self.copy = self.pe.detach().clone()  # what the slip "copy" adds

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.dropout(slip.replay(None, x, self.pe, self.copy.to(x.device)).to(x.dtype))

    return SlippedLearnedPositionalEncoding


LEARNED_POSITIONAL_ENCODING = Exercise(
    _LPE, _check_learned_positional_encoding,
    oracle="dropout(x + pe[:L]), pe the module's own table, filled by the checker with N(0, 1) values (float64)",
    cases="d_model 16, max_len 40: zeros and random (3, 11) inputs, batch sizes 1, 2, 5 and lengths up to max_len, "
          "L = 100 of max_len 128; dropout 0.5 and 0.1 in training",
    slips=LPE_SLIPS, answer=_lpe_answer)


# --------------------------------------------------------------------------
# Pre-LN, lesson 09's wiring: what lesson 05's layer stages read instead of post-LN's, and its slip tables.


def _pre_ln_encoder(p: Pieces, res: tuple = (1, 1), kv_raw: bool = False, act: Callable = torch.relu,
                    stale: bool = False, reads_h: bool = False) -> torch.Tensor:
    """The pre-LN encoder layer over a twin's pieces; each flag is one known slip. (A mask not used is named earlier,
    by what the layer must do: hide the padded positions.)"""
    x, n1 = p.x, p.n1
    y = x * res[0] + p.sa(n1(x), x if kv_raw else None)
    return y * res[1] + p.ff(p.n2(n1(x) if reads_h else x if stale else y), act)


def _stale(read: str, stream: str, right: str) -> Diagnosis:
    return Diagnosis(f"the feed-forward network reads {read}, the normalised {stream}, computed before the sublayers "
                     f"above it changed the stream.", f"Each sublayer reads the stream as it is now: "
                     f"y + dropout({right}), where y already holds the residual additions before it")


def _one_post_ln(sublayer: str, norm: str) -> Diagnosis:
    return Diagnosis(f"the {sublayer} sublayer is post-LN, {norm}(y + dropout({sublayer}(y))), while the rest of the "
                     f"layer is pre-LN.", f"In pre-LN every sublayer reads its normalised input and the residual path "
                     f"stays untouched: y + dropout({sublayer}({norm}(y)))")


def _output_normalised(kind: str, i: int) -> Slip:
    """The output normalised by the layer's ``i``-th LayerNorm: one of its sublayers' or (past them) one of its own."""
    wrong = _pre_ln_encoder if kind == "encoder" else _pre_ln_decoder

    def mutant(p: Pieces) -> torch.Tensor:
        return p.norms[i](wrong(p))

    mutant.norms = i + 1  # the LayerNorms a layer with this slip has (for the slip made into a learner's layer)
    slots = 2 if kind == "encoder" else 3
    return Slip(f"output normalised by norm{i + 1}" if i < slots else "output normalised by a LayerNorm of its own",
                _OUTPUT_NORMALISED, mutant)


_GELU = Diagnosis("the feed-forward network uses GELU:", "the paper's uses ReLU, FFN(x) = max(0, x W1 + b1) W2 + b2")
_OUTPUT_NORMALISED = Diagnosis(
    "it normalises its own output.", "A pre-LN layer returns the residual stream as it stands; the one final LayerNorm "
    "a pre-LN stack needs comes once, after its last layer (the lesson adds it to the stack), not inside every layer")
_POST_LN_HERE = Diagnosis("this is post-LN, lesson 05's layer: LayerNorm(x + dropout(sublayer(x))).",
                          f"Pre-LN normalises what enters the sublayer and leaves the residual path alone: {_PRE_LN}")
_NO_NORM = Diagnosis("there is no LayerNorm:", f"each sublayer is {_PRE_LN}")
_SWAPPED = Diagnosis("the sublayers are in the wrong order:", "self-attention comes first, then the feed-forward network")

#: the known wrong pre-LN encoder layers, tried in order once the values differ (flags of _pre_ln_encoder, or
#: functions of the pieces)
ENCODER_SLIPS = (
    Slip("post-LN", _POST_LN_HERE, lambda p: (lambda y: p.n2(y + p.ff(y)))(p.n1(p.x + p.sa(p.x)))),
    Slip("normalised residual", Diagnosis(
        "the residual connection adds the normalised stream LayerNorm(x) instead of x itself.",
        f"In pre-LN the residual path carries x untouched, and only the sublayer reads the normalised copy: {_PRE_LN}"),
        lambda p: (lambda y: p.n2(y) + p.ff(p.n2(y)))(p.n1(p.x) + p.sa(p.n1(p.x)))),
    Slip("raw keys and values", Diagnosis(
        "the keys and values of the self-attention read x itself, and only the query is normalised:",
        "all three read h = norm1(x), self_attn(h, h, h, mask)"), dict(kv_raw=True)),
    Slip("no residual around self-attention", Diagnosis(
        "the residual connection around self-attention is missing:",
        "x + dropout(self_attn(h, h, h, mask)) adds the sublayer's input stream x back"), dict(res=(0, 1))),
    Slip("no residual around feed-forward", Diagnosis(
        "the residual connection around the feed-forward network is missing:",
        "y + dropout(feed_forward(norm2(y)))"), dict(res=(1, 0))),
    Slip("LayerNorm on the output", Diagnosis(
        "the LayerNorm normalises the sublayer's output, before the residual addition.",
        f"Pre-LN normalises its input: {_PRE_LN}"), lambda p: (lambda y: y + p.n2(p.ff(y)))(p.x + p.n1(p.sa(p.x)))),
    Slip("no LayerNorm", _NO_NORM, lambda p: (lambda y: y + p.ff(y))(p.x + p.sa(p.x))),
    Slip("sublayers swapped", _SWAPPED, lambda p: (lambda y: y + p.sa(p.n2(y)))(p.x + p.ff(p.n1(p.x)))),
    Slip("feed-forward reads x", _stale("feed_forward(norm2(x))", "layer's input x", "feed_forward(norm2(y))"),
         dict(stale=True)),
    Slip("feed-forward reads h", _stale("feed_forward(norm2(h))", "copy h = norm1(x) of the layer's input",
                                        "feed_forward(norm2(y))"), dict(reads_h=True)),
    Slip("gelu", _GELU, dict(act=F.gelu)),
    Slip("self-attention post-LN", _one_post_ln("self_attn", "norm1"),
         lambda p: (lambda y: y + p.ff(p.n2(y)))(p.n1(p.x + p.sa(p.x)))),
    Slip("feed-forward post-LN", _one_post_ln("feed_forward", "norm2"),
         lambda p: (lambda y: p.n2(y + p.ff(y)))(p.x + p.sa(p.n1(p.x)))),
    *(_output_normalised("encoder", i) for i in range(3)),
)


def _pre_ln_decoder(p: Pieces, res: tuple = (1, 1, 1), memory_normalised: bool = False, query: str = "norm2",
                    kv_raw: bool = False, act: Callable = torch.relu, ff_reads: str = "y2") -> torch.Tensor:
    """The pre-LN decoder layer over a twin's pieces; each flag is one known slip. (A mask not used, or keys and
    values not read from memory, are named earlier by what the layer must do: hide, be causal, read memory.)"""
    x, memory, n1, n2 = p.x, p.memory, p.n1, p.n2
    y1 = x * res[0] + p.sa(n1(x), x if kv_raw else None)
    q = n2(y1) if query == "norm2" else n1(x) if query == "h" else y1
    y2 = y1 * res[1] + p.ca(q, n2(memory) if memory_normalised else memory)
    return y2 * res[2] + p.ff(p.n3({"y2": y2, "y1": y1, "x": x}[ff_reads]), act)


def _one_post_ln_decoder(p: Pieces, i: int) -> torch.Tensor:
    """Sublayer ``i`` post-LN, the others pre-LN."""
    x, memory = p.x, p.memory
    y1 = p.n1(x + p.sa(x)) if i == 0 else x + p.sa(p.n1(x))
    y2 = p.n2(y1 + p.ca(y1, memory)) if i == 1 else y1 + p.ca(p.n2(y1), memory)
    return p.n3(y2 + p.ff(y2)) if i == 2 else y2 + p.ff(p.n3(y2))


#: the known wrong pre-LN decoder layers, tried in order once the values differ
DECODER_SLIPS = (
    Slip("post-LN", Diagnosis(_POST_LN_HERE.cause, _POST_LN_HERE.fix.replace("the sublayer", "each sublayer")),
         lambda p: (lambda y2: p.n3(y2 + p.ff(y2)))((lambda y1: p.n2(y1 + p.ca(y1)))(p.n1(p.x + p.sa(p.x))))),
    Slip("normalised residual", Diagnosis(
        "the residual connections add the normalised stream instead of the stream itself.",
        f"In pre-LN the residual path carries x untouched, and only the sublayer reads the normalised copy: {_PRE_LN}"),
        lambda p: (lambda y2: p.n3(y2) + p.ff(p.n3(y2)))(
            (lambda y1: p.n2(y1) + p.ca(p.n2(y1)))(p.n1(p.x) + p.sa(p.n1(p.x))))),
    Slip("memory normalised", Diagnosis(
        "memory is normalised by norm2 before the cross-attention reads it.",
        "memory comes from the encoder stack, whose final LayerNorm has already normalised it: only the query is "
        "normalised, cross_attn(norm2(y), memory, memory, src_mask)"), dict(memory_normalised=True)),
    Slip("raw query", Diagnosis("the query of the cross-attention is not normalised:",
                                "cross_attn(norm2(y), memory, memory, src_mask)"), dict(query="raw")),
    Slip("raw keys and values", Diagnosis(
        "the keys and values of the masked self-attention read x itself, and only the query is normalised:",
        "all three read h = norm1(x), self_attn(h, h, h, tgt_mask)"), dict(kv_raw=True)),
    *DECODER_RESIDUAL_SLIPS,
    Slip("no LayerNorm", _NO_NORM,
         lambda p: (lambda y2: y2 + p.ff(y2))((lambda y1: y1 + p.ca(y1))(p.x + p.sa(p.x)))),
    Slip("sublayers out of order", Diagnosis(
        "the sublayers are in the wrong order:",
        "masked self-attention first, then cross-attention, then the feed-forward network"),
        lambda p: (lambda y2: y2 + p.ff(p.n3(y2)))((lambda y1: y1 + p.sa(p.n2(y1)))(p.x + p.ca(p.n1(p.x))))),
    Slip("query h", Diagnosis(
        "the query of the cross-attention is h = norm1(x), the normalised input of the layer, computed before the "
        "self-attention sublayer changed the stream.", "It must read the stream as it is now, normalised by its own "
        "LayerNorm: cross_attn(norm2(y), memory, memory, src_mask), y = x + dropout(self_attn(h, h, h, tgt_mask))"),
        dict(query="h")),
    Slip("feed-forward reads x", _stale("feed_forward(norm3(x))", "layer's input x", "feed_forward(norm3(y))"),
         dict(ff_reads="x")),
    Slip("feed-forward reads y1", _stale("feed_forward(norm3(y)) with y taken before the cross-attention", "stream",
                                         "feed_forward(norm3(y))"), dict(ff_reads="y1")),
    Slip("gelu", _GELU, dict(act=F.gelu)),
    *(Slip(f"{sub} post-LN", _one_post_ln(sub, norm), lambda p, i=i: _one_post_ln_decoder(p, i))
      for i, (sub, norm) in enumerate((("self_attn", "norm1"), ("cross_attn", "norm2"), ("feed_forward", "norm3")))),
    *(_output_normalised("decoder", i) for i in range(4)),
)

PRE_LN = Wiring(
    norm_first=True, names={"encoder": "PreLNEncoderLayer", "decoder": "PreLNDecoderLayer"}, sublayer=_PRE_LN,
    self_attn="self_attn(h, h, h, {mask}) with h = norm1(x)", cross_attn="cross_attn(norm2(x), memory, memory, src_mask)",
    hints={kind.lower(): f"Expected nn.Transformer{kind}Layer(..., norm_first=True) with your weights: each sublayer "
                         f"is {_PRE_LN}, and nothing normalises the output." for kind in ("Encoder", "Decoder")},
    slips={"encoder": ENCODER_SLIPS, "decoder": DECODER_SLIPS},
    wrong={"encoder": _pre_ln_encoder, "decoder": _pre_ln_decoder},
    components=layer_components, own_norm=own_norm_problem,
    whose="pre-LN", reads="the normalised stream",
    names_why=" (as in lesson 05's layer, whose weights they mirror).",
    read_note=f"in pre-LN each sublayer reads the normalised stream, {_PRE_LN}.",
    residual_note=f"{_PRE_LN} adds back the very stream the LayerNorm read.",
    wired="each LayerNorm reads the residual stream and opens its sublayer; each residual adds back the stream",
    misplaced="In training mode your {name} does not add dropout(sublayer(...)) to an untouched stream: dropout is in "
              "the wrong place (on the sum x + sublayer(...), which drops the residual stream too, or after the "
              "layer?). The pre-LN sublayer is " + _PRE_LN + ".")


def _pre_ln_encoder_layer(check: Check, PreLNEncoderLayer: type[nn.Module]) -> None:
    stages.encoder_layer_stages(check, PreLNEncoderLayer, PRE_LN)


def _pre_ln_decoder_layer(check: Check, PreLNDecoderLayer: type[nn.Module]) -> None:
    stages.decoder_layer_stages(check, PreLNDecoderLayer, PRE_LN)


PRE_LN_ENCODER_LAYER = Exercise(
    "PreLNEncoderLayer", _pre_ln_encoder_layer,
    oracle="nn.TransformerEncoderLayer(..., norm_first=True) (ReLU, float64) carrying the learner's weights",
    cases="lesson 05's EncoderLayer cases: d_model 16, 4 heads, d_ff 24, two padded positions; 1 head, d_model 20, "
          "64 tokens",
    slips=ENCODER_SLIPS, answer=lambda slip: stages.slipped_layer(PRE_LN, "encoder", slip))

PRE_LN_DECODER_LAYER = Exercise(
    "PreLNDecoderLayer", _pre_ln_decoder_layer,
    oracle="nn.TransformerDecoderLayer(..., norm_first=True) (ReLU, float64) carrying the learner's weights",
    cases="lesson 05's DecoderLayer cases: d_model 16, 4 heads, d_ff 24, memory of another length, a causal tgt_mask; "
          "1 head, d_model 20, 64 target and 70 memory tokens",
    slips=DECODER_SLIPS, answer=lambda slip: stages.slipped_layer(PRE_LN, "decoder", slip))
