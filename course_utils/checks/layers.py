"""Checkers for lesson 05: the position-wise feed-forward network and the encoder and decoder layers.

Each checker takes the learner's class, builds small instances of its own and
tests what the layer means. The contract first: the submodules later lessons
read (``linear1``/``linear2``; ``self_attn``, ``cross_attn``, ``feed_forward``,
``norm1``...), and the components' own checkers on the classes the layer uses.
Then properties (shapes, positions processed independently, masks honoured,
causality, dropout only in training), then the values against PyTorch's own
``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` carrying the
learner's weights, with known wrong wirings tried to name a cause. Hooks on the
sublayers show the residual wiring and measure each sublayer's dropout.

The layer stages run with a :class:`Wiring`: :data:`POST_LN` here, lesson 09's
pre-LN one in :mod:`.ablation`. It gives the twins' ``norm_first``, the formula
and the calls the messages show, and the known wrong wirings; every stage is shared.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from . import stages
from .stages import anatomy, twins
from ._core import Check, CheckResult, Raised, close_enough, describe, generator
from .exercise import checked as run_check
from .stages.measuring import drop_pattern
from .stages.hooks import Recorder

_D_MODEL, _NUM_HEADS, _D_FF = 16, 4, 24
_ATOL, _RTOL = 1e-4, 1e-4  # layers compare float32 stacks with float64 twins


def check_feed_forward(FeedForward: type[nn.Module]) -> CheckResult:
    """Check ``FeedForward(d_model, d_ff, dropout)``: linear2(dropout(relu(linear1(x)))), position by position."""
    return run_check("FeedForward", _check_feed_forward, FeedForward)


def check_encoder_layer(EncoderLayer: type[nn.Module]) -> CheckResult:
    """Check ``EncoderLayer(d_model, num_heads, d_ff, dropout)``: post-LN self-attention and feed-forward."""
    return run_check("EncoderLayer", encoder_layer_stages, EncoderLayer, wiring=POST_LN)


def check_decoder_layer(DecoderLayer: type[nn.Module]) -> CheckResult:
    """Check ``DecoderLayer(d_model, num_heads, d_ff, dropout)``: masked self-attention, cross-attention, feed-forward."""
    return run_check("DecoderLayer", decoder_layer_stages, DecoderLayer, wiring=POST_LN)


@dataclasses.dataclass(frozen=True)
class Wiring:
    """How a layer joins its sublayers, LayerNorms and residuals: what the layer stages read, the rest is shared."""

    norm_first: bool  # the twins' norm_first: pre-LN, each LayerNorm opens its sublayer
    names: dict[str, str]  # "encoder" / "decoder" -> the exercise's name
    sublayer: str  # one sublayer, as the messages write it: "LayerNorm(x + dropout(sublayer(x)))"
    self_attn: str  # the self-attention's call, with the mask's name left as "{mask}"
    cross_attn: str  # the cross-attention's call
    hints: dict[str, str]  # kind -> what PyTorch's layer computes (shown with a value mismatch)
    variants: dict[str, Callable[["Pieces"], list]]  # kind -> known wrong layers: [(cause, thunk)], tried in order
    whose: str  # "paper's": whose sublayer it is ("The paper's sublayer: ...")
    reads: str  # what a sublayer's input is, where dropout does not belong
    names_why: str  # why the LayerNorms' order is part of the exercise
    read_note: str  # what each sublayer reads, for a sublayer fed the wrong tensor
    residual_note: str  # what each residual adds back ("{norm}" and "{sub}" filled in)
    wired: str  # what the hooks saw, when it is right
    misplaced: str = ""  # a sublayer's dropout that is not exact: the message ("{name}" filled in), or "": the values judge


def _check_feed_forward(check: Check, FeedForward: type[nn.Module]) -> None:
    check.callable_(FeedForward, "FeedForward", want_class=True)
    g = generator(0)
    ff = stages.is_module(check, check.build(FeedForward, _D_MODEL, _D_FF, 0.0), "FeedForward")
    stages.contract_parts(check, ff, "FeedForward", {"d_model": _D_MODEL, "d_ff": _D_FF, "dropout": 0.0})
    ff.eval()
    x = torch.randn(3, 5, _D_MODEL, generator=g)
    out = check.call(ff, x, what="FeedForward.forward")
    hint = ""
    if isinstance(out, torch.Tensor) and out.shape[-1:] == (_D_FF,):
        hint = (
            f"The last dimension is d_ff = {_D_FF}: the second linear layer, nn.Linear(d_ff, d_model), "
            f"which maps back to d_model, seems to be missing."
        )
    out = check.tensor(out, "the output of FeedForward(16, 24)", shape=(3, 5, _D_MODEL), dtype=torch.float32, shape_hint=hint)
    check.ok("returns a (batch, length, d_model) tensor")

    perm = torch.tensor([3, 0, 4, 1, 2])
    moved = check.tensor(check.call(ff, x[:, perm], what="FeedForward.forward"), "the output", shape=(3, 5, _D_MODEL))
    changed = x.clone()
    changed[:, 2] = torch.randn(3, _D_MODEL, generator=g)
    local = check.tensor(check.call(ff, changed, what="FeedForward.forward"), "the output", shape=(3, 5, _D_MODEL))
    others = [0, 1, 3, 4]
    if not close_enough(moved, out[:, perm], _ATOL, _RTOL) or not close_enough(local[:, others], out[:, others], _ATOL, _RTOL):
        check.fail(
            "Your FeedForward mixes positions: changing or shuffling some positions of the input changed "
            "the outputs at other positions.\n"
            "The network is position-wise: the same two linear layers act on each position's d_model "
            "vector on its own, so apply them along the last dimension only (no reshaping across positions)."
        )
    check.ok("processes each position independently (position-wise)")
    _check_ffn_values(check, ff, x, out)
    stages.every_parameter_learns(check, ff, check.call(ff, x, what="FeedForward.forward"), "FeedForward", why=(
        "Both linear layers run, so the gradient is cut on the way: a `.detach()`, `.data` or `torch.no_grad()` "
        "between them (or around the first) keeps it from reaching linear1. Keep the whole computation in the graph."))
    _check_ffn_dropout(check, FeedForward, x)
    stages.module_on_gpu(check, ff, x, what="FeedForward")
    stages.state_dict_round_trip(check, lambda: check.build(FeedForward, _D_MODEL, _D_FF, 0.0), lambda m: m(x),
                                 "FeedForward")
    stages.contract_defaults(check, FeedForward, "FeedForward")


_HOOKS_SEEN = ("lesson 06's cross-attention plot catches what `cross_attn` receives with a forward hook, as the "
               "checkers' own measurements of each sublayer do")


def encoder_layer_stages(check: Check, cls: type[nn.Module], wiring: Wiring) -> None:
    """The encoder layer checker's body, for either wiring (lesson 05's EncoderLayer, lesson 09's pre-LN one)."""
    name = wiring.names["encoder"]
    check.callable_(cls, name, want_class=True)
    g = generator(1)
    B, L = 2, 5
    build = _builder(check, cls, name)
    layer = build(0.0)
    _layer_contract(check, layer, "encoder", wiring)
    layer.eval()
    x = torch.randn(B, L, _D_MODEL, generator=g)
    keep = torch.ones(B, 1, 1, L, dtype=torch.bool)
    keep[1, ..., 3:] = False  # the last two positions of sentence 1 are padding

    def run(layer_, x_, mask_=None):
        out_ = stages.one_tensor(check, check.call(layer_, x_, mask_, what=f"{name}.forward"), name)
        if mask_ is not None:
            _nan_with_mask(check, out_, name)
        return check.tensor(out_, f"the output of {name}", shape=(B, L, _D_MODEL), dtype=torch.float32)

    plain = run(layer, x)
    check.ok("returns a (batch, length, d_model) tensor")
    _allow_all_is_no_mask(check, run(layer, x, torch.ones(B, 1, 1, L, dtype=torch.bool)), plain, name, "a mask")
    out = run(layer, x, keep)
    check.ok("runs with and without a mask (mask=None)")
    stages.called_as_modules(check, layer, ["self_attn", "feed_forward"], (x, keep), name, _HOOKS_SEEN)
    _encoder_properties(check, run, layer, x, keep, plain, out, g, name, wiring)
    layout = _values(check, layer, "encoder", wiring, out, lambda layer_: run(layer_, x, keep), g, x,
                     masks=(twins.torch_mask(keep, B, _NUM_HEADS, L, L), None))
    _layer_dropout(check, build, lambda layer_: run(layer_, x, keep), (x, keep), "encoder", wiring)
    if name == "EncoderLayer":  # what lesson 07 does to the post-LN layers
        stages.replaced_parts_used(check, build(0.0).eval(), ["self_attn"], (x, keep), name,
                                   "Lesson 07's with_fused_attention")
    stages.dropout_set_through(check, build, ["dropout"], (x, keep), name, "to the sublayers' outputs",
                               sublayers=["self_attn", "feed_forward"])  # lesson 08 sets `.p`
    stages.module_on_gpu(check, layer, x, keep, what=name, also=[(x,)])
    stages.in_16_bits_module(check, layer, (x, keep), name)
    stages.state_dict_round_trip(check, lambda: build(0.0), lambda m: m(x, keep), name)
    _check_layer_sizes(check, build, "encoder", wiring)
    stages.contract_defaults(check, cls, name)
    if layout.missing:
        check.ok(_layout_unused(layout, name))


def decoder_layer_stages(check: Check, cls: type[nn.Module], wiring: Wiring) -> None:
    """The decoder layer checker's body, for either wiring (lesson 05's DecoderLayer, lesson 09's pre-LN one)."""
    name = wiring.names["decoder"]
    check.callable_(cls, name, want_class=True)
    g = generator(2)
    B, T, S = 2, 4, 6  # target length T differs from memory length S
    build = _builder(check, cls, name)
    layer = build(0.0)
    _layer_contract(check, layer, "decoder", wiring)
    layer.eval()
    x = torch.randn(B, T, _D_MODEL, generator=g)
    memory = torch.randn(B, S, _D_MODEL, generator=g)
    src_keep = torch.ones(B, 1, 1, S, dtype=torch.bool)
    src_keep[1, ..., 4:] = False  # the last two memory positions of sentence 1 are padding
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool)).expand(B, 1, T, T).clone()

    def run(layer_, x_, memory_, src_mask_=None, tgt_mask_=None):
        out_ = Raised(None, "")
        if src_mask_ is not None and tgt_mask_ is not None:  # which mask went where names a crash's usual cause
            out_ = check.attempt(layer_, x_, memory_, src_mask_, tgt_mask_, what=f"{name}.forward")
            if isinstance(out_, Raised):
                _masks_where_they_belong(check, layer_, name, wiring, x_, memory_, src_mask_, tgt_mask_)
        if isinstance(out_, Raised):
            out_ = check.call(layer_, x_, memory_, src_mask_, tgt_mask_, what=f"{name}.forward", hint=(
                f"x has {T} positions and memory {S}: where a size does not match, check which tensor each "
                f"attention reads. The cross-attention's queries come from the decoder (x), its keys and values "
                f"from memory: {wiring.cross_attn}."))
        out_ = stages.one_tensor(check, out_, name)
        hint = ""
        if isinstance(out_, torch.Tensor) and out_.dim() == 3 and out_.shape[1] == S:
            hint = (
                "The output has one row per memory position: in cross-attention the queries come from the "
                f"decoder (x), the keys and values from memory: {wiring.cross_attn}."
            )
        if (src_mask_ is not None or tgt_mask_ is not None) and not hint:
            _nan_with_mask(check, out_, name)
        return check.tensor(out_, f"the output of {name}", shape=(B, T, _D_MODEL), dtype=torch.float32, shape_hint=hint)

    plain = run(layer, x, memory)
    check.ok("returns a (batch, target length, d_model) tensor when memory has another length")
    allow_src = torch.ones(B, 1, 1, S, dtype=torch.bool)
    allow_tgt = torch.ones(B, 1, T, T, dtype=torch.bool)
    masked = run(layer, x, memory, allow_src, allow_tgt)
    if not close_enough(masked, plain, _ATOL, _RTOL) and close_enough(masked, run(layer, x, memory, None, causal), _ATOL, _RTOL):
        check.fail(
            f"With a tgt_mask that allows every position (all True), your {name} still hides the future: it "
            f"combines the tgt_mask it is given with a causal mask of its own. Use the mask it is given as it is, "
            f"{wiring.self_attn.format(mask='tgt_mask')}: the model builds tgt_mask (padding AND causal) with "
            f"make_target_mask, and lesson 07's one-token-at-a-time decoding passes a mask that is not square."
        )
    if not close_enough(masked, plain, _ATOL, _RTOL) and close_enough(plain, run(layer, x, memory, None, causal), _ATOL, _RTOL):
        check.fail(
            f"Called with tgt_mask=None, your {name} still hides the future: it builds a causal mask of its own when "
            f"none is given. None means 'hide nothing': use the masks it is given as they are, and nothing when "
            f"they are None. The model passes tgt_mask itself (make_target_mask), and lesson 07's decoding of one "
            f"token at a time calls the layer with a mask that is not square."
        )
    _allow_all_is_no_mask(check, masked, plain, name, "masks")
    out = run(layer, x, memory, src_keep, causal)
    check.ok("runs with and without masks (src_mask=None, tgt_mask=None)")
    stages.called_as_modules(check, layer, ["self_attn", "cross_attn", "feed_forward"], (x, memory, src_keep, causal),
                             name, _HOOKS_SEEN)
    _decoder_properties(check, run, layer, x, memory, src_keep, causal, plain, out, g, name, wiring)
    _memory_learns(check, run, layer, x, memory, src_keep, causal, name)
    layout = _values(check, layer, "decoder", wiring, out, lambda layer_: run(layer_, x, memory, src_keep, causal), g,
                     x, memory, (twins.torch_mask(causal, B, _NUM_HEADS, T, T), twins.torch_mask(src_keep, B, _NUM_HEADS, T, S)))
    _layer_dropout(check, build, lambda layer_: run(layer_, x, memory, src_keep, causal), (x, memory, src_keep, causal),
             "decoder", wiring)
    inputs = (x, memory, src_keep, causal)
    if name == "DecoderLayer":  # what lesson 07 does to the post-LN layers
        stages.replaced_parts_used(check, build(0.0).eval(), ["self_attn", "cross_attn"], inputs, name,
                                   "Lesson 07's with_fused_attention")
    stages.dropout_set_through(check, build, ["dropout"], inputs, name, "to the sublayers' outputs",
                               sublayers=["self_attn", "cross_attn", "feed_forward"])  # lesson 08 sets `.p`
    stages.module_on_gpu(check, layer, x, memory, src_keep, causal, what=name, also=[(x, memory)])
    stages.in_16_bits_module(check, layer, inputs, name)
    stages.state_dict_round_trip(check, lambda: build(0.0), lambda m: m(*inputs), name)
    stages.contract_defaults(check, cls, name)
    _check_layer_sizes(check, build, "decoder", wiring)
    if layout.missing:
        check.ok(_layout_unused(layout, name))


def _memory_learns(check: Check, run: Callable, layer: nn.Module, x: torch.Tensor, memory: torch.Tensor,
                   src_keep: torch.Tensor, causal: torch.Tensor, name: str) -> None:
    """The loss reaches memory through the cross-attention: the encoder learns from the decoder's loss."""
    memory = memory.clone().requires_grad_(True)
    out = run(layer, x, memory, src_keep, causal)
    # a random weighting, not out.sum(): the sum of a layer-normed row is the sum of its shifts, whatever memory is,
    # so its gradient is zero up to rounding (and exactly zero on some inputs)
    weights = torch.randn(out.shape, generator=generator(19), dtype=out.dtype) if isinstance(out, torch.Tensor) else None
    grad = torch.autograd.grad((out * weights).sum(), memory, allow_unused=True)[0] if out.requires_grad else None
    if grad is None or not bool(grad.abs().sum() > 0):
        check.fail(
            f"No gradient reaches `memory` through your {name}: it is detached on the way (`.detach()`, "
            f"`.data`, a copy under torch.no_grad()). The encoder then never learns from the translation's loss, "
            f"which reaches it only through the cross-attention's keys and values. Pass memory to cross_attn as it is."
        )
    check.ok("gradients reach memory (the encoder learns through the cross-attention)")


# --------------------------------------------------------------------------
# The layers' properties: contract, masks, causality, memory.

_NORMS = {"encoder": ("norm1", "norm2"), "decoder": ("norm1", "norm2", "norm3")}
_ATTENTIONS = {"encoder": ("self_attn",), "decoder": ("self_attn", "cross_attn")}
_SUBLAYERS = {"encoder": (("self_attn", "norm1"), ("feed_forward", "norm2")),
              "decoder": (("self_attn", "norm1"), ("cross_attn", "norm2"), ("feed_forward", "norm3"))}
_ROLES = {("encoder", "self_attn"): "self-attention", ("decoder", "self_attn"): "the masked self-attention",
          ("decoder", "cross_attn"): "the cross-attention", ("encoder", "feed_forward"): "the feed-forward network",
          ("decoder", "feed_forward"): "the feed-forward network"}


def _builder(check: Check, cls: type[nn.Module], name: str) -> Callable[..., nn.Module]:
    def build(dropout: float, d_model: int = _D_MODEL, num_heads: int = _NUM_HEADS, d_ff: int = _D_FF) -> nn.Module:
        return stages.is_module(check, check.build(cls, d_model, num_heads, d_ff, dropout), name)

    return build


def _layer_contract(check: Check, layer: nn.Module, kind: str, wiring: Wiring) -> None:
    """The submodules later code reads, the components' own checkers, their kinds and sizes; norms over d_model."""
    from .multi_head import check_multi_head_attention

    name = wiring.names[kind]
    wanted = {"self_attn": (check_multi_head_attention, "MultiHeadAttention"),
              "feed_forward": (check_feed_forward, "FeedForward")}
    if kind == "decoder":
        wanted["cross_attn"] = wanted["self_attn"]
    sizes = {"d_model": _D_MODEL, "num_heads": _NUM_HEADS, "d_ff": _D_FF, "dropout": 0.0}
    stages.contract_parts(check, layer, name, sizes, components=stages.submodule_parts(layer, wanted))
    _check_norms(check, layer, kind, name)
    if not any(_D_FF in p.shape for p in layer.parameters()):
        check.fail(
            f"None of the weights of {name}(d_model={_D_MODEL}, num_heads={_NUM_HEADS}, d_ff={_D_FF}) has a "
            f"dimension of size d_ff = {_D_FF}: the feed-forward sublayer is missing, or it ignores d_ff.\n"
            f"The last sublayer is {wiring.sublayer.replace('sublayer', 'ffn')} with FeedForward(d_model, d_ff, dropout)."
        )
    check.ok("has a feed-forward network of hidden size d_ff")


def _check_norms(check: Check, layer: nn.Module, kind: str, name: str) -> None:
    """Each normN, freshly built, gives each position's d_model features (the last axis) mean 0 and variance 1."""
    z = 3.0 * torch.randn(2, 5, _D_MODEL, generator=generator(13)) + 1.5
    for norm_name in _NORMS[kind]:
        out = check.attempt(getattr(layer, norm_name), z, what=f"{name}.{norm_name}")
        if not isinstance(out, torch.Tensor) or out.shape != z.shape or _is_normalised(out, atol=1e-2):
            continue
        for dim, axis in ((1, "the positions (dim 1)"), (0, "the batch (dim 0)")):
            if _is_normalised(out, dim, atol=1e-2):
                check.fail(f"`{norm_name}` of your {name} normalises over {axis}, not over the last axis: each "
                           f"position's d_model features must get mean 0 and variance 1 on their own "
                           f"(`x.mean(-1, keepdim=True)`, or nn.LayerNorm(d_model)).")
        check.fail(f"`{norm_name}` of your {name}, freshly built, is not a layer normalisation: its output is not "
                   f"layer-normalised (mean 0 and variance 1 over each position's d_model features). RMSNorm "
                   f"rescales without centring; BatchNorm normalises over the batch. Use nn.LayerNorm(d_model).")


def _is_normalised(out: torch.Tensor, dim: int = -1, atol: float = 1e-3) -> bool:
    """Every vector along ``dim`` has mean 0 and standard deviation 1, as a fresh LayerNorm leaves it."""
    o = out.detach().double()
    return bool((o.mean(dim).abs() < atol).all() and ((o.std(dim, unbiased=False) - 1).abs() < 0.05).all())


def _allow_all_is_no_mask(check: Check, masked: torch.Tensor, plain: torch.Tensor, name: str, masks: str) -> None:
    """A mask that allows everything must change nothing: the polarity test."""
    if not close_enough(masked, plain, _ATOL, _RTOL):
        check.fail(
            f"With {masks} that allow{'s' if masks.startswith('a ') else ''} every position (all True), the "
            f"output of your {name} differs from the output without {'a mask' if masks.startswith('a ') else 'masks'}: "
            f"True is treated as 'hidden'.\n"
            f"In this course True means 'may attend' (as in F.scaled_dot_product_attention): scores are filled "
            f"with -inf where the mask is False (masked_fill(~mask, ...) or masked_fill(mask == 0, ...)). "
            f"nn.MultiheadAttention uses the opposite convention: pass it ~mask."
        )
    check.ok("treats True in a mask as 'may attend' (an all-True mask changes nothing)")


def _nan_with_mask(check: Check, out, name: str) -> None:
    if isinstance(out, torch.Tensor) and out.is_floating_point() and not bool(torch.isfinite(out.detach()).all()):
        check.fail(
            f"The output of your {name} contains NaN or infinite values when a mask is given (without a mask it "
            f"is finite): some row of the attention has every key hidden.\n"
            f"Is the mask used as it is given, True = 'may attend', on the key axis (the last one)? Scores are "
            f"filled with -inf where the mask is False: masked_fill(~mask, float('-inf')) or "
            f"masked_fill(mask == 0, ...); a transposed mask hides queries instead of keys. For "
            f"nn.MultiheadAttention, which blocks where True, pass ~mask."
        )


def _encoder_properties(check: Check, run: Callable, layer: nn.Module, x: torch.Tensor, keep: torch.Tensor,
                        plain: torch.Tensor, out: torch.Tensor, g: torch.Generator, name: str, wiring: Wiring) -> None:
    """Positions are mixed, in both directions (no causal mask), and the mask hides the padded positions."""
    call = wiring.self_attn.format(mask="mask")
    later = x.clone()
    later[1, 3:] = torch.randn(2, _D_MODEL, generator=g)
    if close_enough(run(layer, later)[1, :3], plain[1, :3], _ATOL, _RTOL):
        earlier = x.clone()
        earlier[:, :2] = torch.randn(x.shape[0], 2, x.shape[2], generator=g)
        if not close_enough(run(layer, earlier)[:, 2:], plain[:, 2:], _ATOL, _RTOL):
            check.fail(
                f"Your {name} lets each position see only the positions before it (a causal mask): changing later "
                f"positions never changes earlier outputs, but changing earlier positions changes later ones.\n"
                f"The encoder reads the whole source sentence at once: use only the padding mask it is given, "
                f"{call}. The causal mask belongs to the decoder's self-attention."
            )
        check.fail(
            f"Without a mask, changing some positions of x did not change the outputs at the other "
            f"positions: your {name} does not mix information between positions.\n"
            f"Its first sublayer is self-attention over the whole sequence: {call}."
        )
    if not close_enough(run(layer, later, keep)[1, :3], out[1, :3], _ATOL, _RTOL):
        check.fail(
            "Positions hidden by the mask still influence the outputs: changing padded positions of x "
            f"changed the outputs at the real positions.\n"
            f"Pass the mask to the self-attention as it is: {call}. Its shape (batch, 1, 1, "
            "length) hides keys (the last axis); transposing it would hide queries instead."
        )
    check.ok("honours the mask: hidden positions do not influence the others")


def _decoder_properties(check: Check, run: Callable, layer: nn.Module, x, memory, src_keep, causal,
                        plain: torch.Tensor, out: torch.Tensor, g: torch.Generator, name: str, wiring: Wiring) -> None:
    """Memory is used, src_mask hides memory positions, tgt_mask (and only it) makes the layer causal."""
    B, T = x.shape[:2]
    self_call, cross_call = wiring.self_attn.format(mask="tgt_mask"), wiring.cross_attn
    other = memory.clone()
    other[:, :4] = torch.randn(B, 4, _D_MODEL, generator=g)
    if close_enough(run(layer, x, other, src_keep, causal), out, _ATOL, _RTOL):
        check.fail(
            f"Changing memory (the encoder output) does not change the output of your {name}: the "
            f"cross-attention does not use it.\n"
            f"In cross-attention the queries come from the decoder and the keys and values from memory: "
            f"{cross_call}, not cross_attn(x, x, x, ...)."
        )
    check.ok("uses memory (changing the encoder output changes the result)")
    hidden = memory.clone()
    hidden[1, 4:] = torch.randn(2, _D_MODEL, generator=g)
    if not close_enough(run(layer, x, hidden, src_keep, causal), out, _ATOL, _RTOL):
        check.fail(
            "Memory positions hidden by src_mask still influence the output: changing padded positions of "
            "memory changed the result.\n"
            f"Pass src_mask to the cross-attention: {cross_call}."
        )
    check.ok("honours src_mask in the cross-attention")
    later = x.clone()
    later[:, 2:] = torch.randn(B, T - 2, _D_MODEL, generator=g)
    if close_enough(run(layer, later, memory)[:, :2], plain[:, :2], _ATOL, _RTOL):
        check.fail(
            "Without a target mask (tgt_mask=None), changing later target positions did not change earlier "
            f"outputs: either your {name} does not mix information between target positions, or it "
            "builds a causal mask of its own instead of using tgt_mask.\n"
            "Its first sublayer is self-attention over the target with the mask it is given: "
            f"{self_call}. (The model builds tgt_mask, padding included.)"
        )
    if not close_enough(run(layer, later, memory, src_keep, causal)[:, :2], out[:, :2], _ATOL, _RTOL):
        check.fail(
            "With a causal tgt_mask, changing target positions 2 and 3 changed the outputs at positions 0 "
            "and 1: the decoder can see the future.\n"
            f"Pass tgt_mask to the (first) self-attention: {self_call}."
        )
    check.ok("is causal with a causal tgt_mask (the future does not influence the past)")


def _masks_where_they_belong(check: Check, layer: nn.Module, name: str, wiring: Wiring, x, memory, src_mask,
                             tgt_mask) -> None:
    """Which mask each attention received (seen by pre-hooks, even when the call then crashes): name a misplaced one."""
    received: dict[str, list] = {}

    def hook(sub):
        def remember(_module, args, kwargs):
            received.setdefault(sub, []).append(args[3] if len(args) > 3 else kwargs.get("mask"))
        return remember

    handles = [getattr(layer, sub).register_forward_pre_hook(hook(sub), with_kwargs=True)
               for sub in ("self_attn", "cross_attn") if isinstance(getattr(layer, sub, None), nn.Module)]
    try:
        out = check.attempt(layer, x, memory, src_mask, tgt_mask, what=f"{name}.forward")
    finally:
        for handle in handles:
            handle.remove()
    crashed = f"\n\n{out.message}" if isinstance(out, Raised) else ""
    self_call, cross_call = wiring.self_attn.format(mask="tgt_mask"), wiring.cross_attn
    if received.get("cross_attn", [None])[0] is tgt_mask and len(received["cross_attn"]) == 1:
        check.fail(
            f"Your {name} gives tgt_mask to the cross-attention: its scores are (target length x memory length), "
            "so the target mask does not fit them (it crashes when the lengths differ) and the source padding is "
            f"never hidden. The cross-attention takes the source mask: {cross_call}; the target mask belongs to the "
            f"masked self-attention, {self_call}." + crashed
        )
    if received.get("self_attn", [None])[0] is src_mask and len(received["self_attn"]) == 1:
        check.fail(
            f"Your {name} uses the two masks the wrong way round: the self-attention receives src_mask. The "
            f"target mask (B, 1, L_tgt, L_tgt) goes to the masked self-attention, {self_call}; the source mask "
            f"(B, 1, 1, L_src) to the cross-attention, {cross_call}. Check the order of forward's parameters too: "
            "forward(self, x, memory, src_mask=None, tgt_mask=None)." + crashed
        )


def _check_layer_sizes(check: Check, build: Callable[..., nn.Module], kind: str, wiring: Wiring) -> None:
    """One head, d_model = 20 (not a power of two), lesson 06's sentence length (64; memory of 70), against the twin."""
    D, H, d_ff, L, S = 20, 1, 36, 64, 70
    name = wiring.names[kind]
    layer = build(0.0, D, H, d_ff).eval()
    for sub in _ATTENTIONS[kind]:
        heads = getattr(getattr(layer, sub), "num_heads", None)
        if heads != H:
            check.fail(f"{name}(d_model={D}, num_heads={H}, d_ff={d_ff}) builds `{sub}` with num_heads = "
                       f"{describe(heads)}: pass the layer's own num_heads on, "
                       f"MultiHeadAttention(d_model, num_heads, dropout).")
    g = generator(17)
    x = torch.randn(2, L, D, generator=g)
    keep = torch.ones(2, 1, 1, S if kind == "decoder" else L, dtype=torch.bool)
    keep[1, ..., -5:] = False
    causal = torch.ones(L, L, dtype=torch.bool).tril().expand(2, 1, L, L)
    memory = torch.randn(2, S, D, generator=g) if kind == "decoder" else None
    args = (x, keep) if kind == "encoder" else (x, memory, keep, causal)
    what = f"{name}(d_model={D}, num_heads={H}, d_ff={d_ff}) on sentences of {L} tokens"
    out = check.call(layer, *args, what=f"{name}.forward", hint=(
        f"It works for the small sizes but not for {what}: is a size fixed somewhere?"))
    out = check.tensor(out, f"the output of {what}", shape=(2, L, D), dtype=torch.float32)
    layout = twins.LayerLayout(layer, kind, D, H, d_ff, norm_first=wiring.norm_first)
    if layout.missing and not wiring.norm_first and not _is_normalised(out):
        check.fail(f"The output of {what} is not layer-normalised, although it is with d_model=16 and 4 heads: "
                   f"does your class use the d_model and num_heads it is given?")
    if not layout.missing:
        pieces = Pieces(layout, x, memory, twins.torch_mask(causal if memory is not None else keep, 2, H, L, L),
                        twins.torch_mask(keep, 2, H, L, S) if memory is not None else None)
        with torch.no_grad():
            if not any(close_enough(out, pieces.bind(twin).out(), _ATOL, _RTOL) for twin, _, _ in layout.twins()):
                check.fail(f"The output of {what} differs from PyTorch's {_label(wiring)} layer with your weights, "
                           f"although it matches for d_model=16 and 4 heads: does your class use the d_model, "
                           f"num_heads and d_ff it is given?")
    check.ok(f"works with num_heads=1, d_model={D} (not a power of two) and sentences of {L} tokens")


# --------------------------------------------------------------------------
# The values against PyTorch's layer carrying the learner's weights, and the known wrong wirings.

_GIVEN = object()  # a Pieces attention's default mask: the one the checker gave (None: no mask)


class Pieces:
    """A PyTorch twin's parts in float64, bound to the checker's inputs: what the known wrong wirings are built of."""

    def __init__(self, layout: twins.LayerLayout, x: torch.Tensor, memory: torch.Tensor | None = None,
                 self_mask: torch.Tensor | None = None, cross_mask: torch.Tensor | None = None):
        self.x, self.memory = x.double(), None if memory is None else memory.double()
        self.self_mask, self.cross_mask = self_mask, cross_mask  # PyTorch's masks, True = blocked
        self.norms = [twins.prepared_norm(n, layout.d_model) for n in layout.norms]  # the learner's own, any slot

    def bind(self, twin: nn.Module) -> "Pieces":
        self.t, self.n1, self.n2, self.n3 = twin, twin.norm1, twin.norm2, getattr(twin, "norm3", None)
        return self

    def out(self) -> torch.Tensor:
        """The twin's output: the right answer."""
        if self.memory is None:
            return twins.run_twin(self.t, self.x, src_mask=self.self_mask)
        return twins.run_twin(self.t, self.x, self.memory, src_mask=self.cross_mask, tgt_mask=self.self_mask)

    def sa(self, q: torch.Tensor, kv: torch.Tensor | None = None, m=_GIVEN) -> torch.Tensor:
        kv = q if kv is None else kv
        return self.t.self_attn(q, kv, kv, attn_mask=self.self_mask if m is _GIVEN else m, need_weights=False)[0]

    def ca(self, q: torch.Tensor, kv: torch.Tensor | None = None, m=_GIVEN) -> torch.Tensor:
        kv = self.memory if kv is None else kv
        return self.t.multihead_attn(q, kv, kv, attn_mask=self.cross_mask if m is _GIVEN else m, need_weights=False)[0]

    def ff(self, y: torch.Tensor, act: Callable = torch.relu) -> torch.Tensor:
        return self.t.linear2(act(self.t.linear1(y)))


def _label(wiring: Wiring) -> str:
    return "pre-LN" if wiring.norm_first else "post-LN"


def _twin_name(kind: str, wiring: Wiring) -> str:
    cls = "nn.TransformerEncoderLayer" if kind == "encoder" else "nn.TransformerDecoderLayer"
    return f"{cls}(..., norm_first=True)" if wiring.norm_first else f"{cls} (post-LN)"


def _values(check: Check, layer: nn.Module, kind: str, wiring: Wiring, out: torch.Tensor, run: Callable,
            g: torch.Generator, x: torch.Tensor, memory: torch.Tensor | None = None, masks: tuple = (None, None)
            ) -> twins.LayerLayout:
    """Compare with PyTorch's layer where the parts are found (else: a post-LN output is normalised, and every
    parameter learns), then count the parameters."""
    name = wiring.names[kind]
    normalised = _is_normalised(out)
    layout = twins.LayerLayout(layer, kind, _D_MODEL, _NUM_HEADS, _D_FF, norm_first=wiring.norm_first)
    if layout.missing:
        if not wiring.norm_first:
            if not normalised:
                check.fail(_norm_message(name))
            check.ok("ends with a LayerNorm (post-LN)")
        stages.every_parameter_learns(check, layer, run(layer), name)
    else:
        twins.randomise_norms(layout.norms, g)  # so that which LayerNorm sits where shows in the values
        _compare(check, layout, kind, wiring, run, Pieces(layout, x, memory, *masks), x, memory, normalised)
    _parameters(check, layer, layout, kind, name)
    return layout


def _compare(check: Check, layout: twins.LayerLayout, kind: str, wiring: Wiring, run: Callable, pieces: Pieces,
             x: torch.Tensor, memory: torch.Tensor | None, normalised: bool) -> None:
    """The learner's output against every plausible twin; a known wrong wiring, or the hooks, name the cause."""
    name = wiring.names[kind]
    out = run(layout.layer).double()
    matched, cause = _best_match(layout, out, pieces, wiring.variants[kind])
    if matched is None:
        if cause:
            check.fail(f"The output of your {name} has the wrong values: {cause}.")
        _check_wiring(check, layout.layer, kind, wiring, run, x, memory)
        stages.every_parameter_learns(check, layout.layer, run(layout.layer), name)
        if not wiring.norm_first and not normalised:
            check.fail(_norm_message(name))
        with torch.no_grad():
            expected = pieces.bind(next(layout.twins())[0]).out()
        check.close(out, expected, f"the output of {name}", atol=_ATOL, rtol=_RTOL, hint=wiring.hints[kind])
    _check_norm_use(check, name, layout, matched[1])
    _check_norm_order(check, name, kind, wiring, layout.layer, matched[1])
    stages.every_parameter_learns(check, layout.layer, run(layout.layer), name)
    check.ok(f"matches {_twin_name(kind, wiring)} carrying your weights")


def _best_match(layout: twins.LayerLayout, out: torch.Tensor, pieces: Pieces, variants: Callable) -> tuple:
    """(matched assignment or None, the cause of the first known wrong wiring that matches or None)."""
    for twin, attentions, norms in layout.twins():
        with torch.no_grad():
            if close_enough(out, pieces.bind(twin).out(), _ATOL, _RTOL):
                return (attentions, norms), None
    for twin, _, norms in layout.twins():
        if len({id(n) for n in norms}) < len(norms) <= len(layout.norms):
            continue  # a variant is looked for with one LayerNorm per sublayer only
        with torch.no_grad():
            for cause, variant in variants(pieces.bind(twin)):
                try:
                    expected = variant()
                except Exception:  # a wiring that does not fit these sizes
                    continue
                if close_enough(out, expected, _ATOL, _RTOL):
                    return None, cause
    return None, None


def _norm_message(name: str) -> str:
    return (
        f"The output of your {name} is not layer-normalised: with freshly created LayerNorms every "
        f"output row should have mean 0 and standard deviation 1.\n"
        f"The paper's layers are post-LN: each sublayer ends with LayerNorm(x + dropout(sublayer(x))). "
        f"Did you forget a LayerNorm, use pre-LN (x + sublayer(LayerNorm(x))), or another normalisation "
        f"(RMSNorm, BatchNorm)?"
    )


def _parameters(check: Check, layer: nn.Module, layout: twins.LayerLayout, kind: str, name: str) -> None:
    """The paper's layer: attention(s) with biases, the feed-forward network, one LayerNorm (gain and bias) per sublayer."""
    bare = [n for n in layout.norms if anatomy.norm_without_affine(n)]
    if bare:
        check.fail(
            f"{len(bare)} of the LayerNorms in your {name} ha{'s' if len(bare) == 1 else 've'} no learned gain and "
            f"bias (elementwise_affine=False or bias=False).\n"
            f"The paper's layer normalisation has both; nn.LayerNorm(d_model) creates them by default."
        )
    d, n_attn = _D_MODEL, len(_ATTENTIONS[kind])
    attention, ffn, norm = 4 * (d * d + d), d * _D_FF + _D_FF + _D_FF * d + d, 2 * d
    expected = n_attn * attention + ffn + (n_attn + 1) * norm
    actual = anatomy.count_parameters(layer)
    shared = getattr(layer, "cross_attn", None)
    if actual != expected and shared is not None and shared is getattr(layer, "self_attn", None):
        check.fail(f"In your {name}, `cross_attn` and `self_attn` are one and the same module, so the two attentions "
                   f"share their weights ({attention:,} parameters fewer than the paper's layer). Build each with "
                   f"its own `MultiHeadAttention(d_model, num_heads, dropout)`.")
    if actual != expected:
        check.fail(
            f"Your {name}(d_model={d}, num_heads={_NUM_HEADS}, d_ff={_D_FF}) has {actual:,} parameters; the "
            f"paper's layer has {expected:,}: {n_attn} attention module{'s' if n_attn > 1 else ''} x {attention:,} "
            f"(W_q, W_k, W_v, W_o with biases; {4 * d:,} fewer each without), the feed-forward network {ffn:,}, "
            f"and {n_attn + 1} LayerNorms x "
            f"{norm} (gain and bias).\n"
            f"Likely causes: a LayerNorm without gain or bias, a LayerNorm shared between sublayers, an extra or "
            f"missing module."
        )
    check.ok(f"has the number of parameters the paper's layout gives at these sizes ({expected:,})")


def _check_norm_use(check: Check, name: str, layout: twins.LayerLayout, used: tuple) -> None:
    """Each sublayer must have its own LayerNorm (its own learned gain and bias)."""
    distinct = len({id(n) for n in used})
    if distinct == len(used):
        return
    if len(layout.norms) < layout.slots:
        check.fail(
            f"Your {name} has {len(layout.norms)} LayerNorm{'s' if len(layout.norms) != 1 else ''} for its "
            f"{layout.slots} sublayers: one LayerNorm is shared between sublayers.\n"
            f"Each sublayer needs its own nn.LayerNorm(d_model), with its own learned gain and bias "
            f"(after training they differ)."
        )
    check.fail(
        f"Your {name} uses the same LayerNorm for two sublayers although it creates {len(layout.norms)}: "
        f"a copy-paste slip such as norm1 where norm2 was meant?\n"
        f"Each sublayer has its own LayerNorm, with its own learned gain and bias."
    )


def _check_norm_order(check: Check, name: str, kind: str, wiring: Wiring, layer: nn.Module, used: tuple) -> None:
    """norm1 belongs to the first sublayer, norm2 to the second (and norm3 to the third): code reads them by name."""
    if all(a is b for a, b in zip(used, [getattr(layer, n) for n in _NORMS[kind]])):
        return
    names = {id(m): n for n, m in layer.named_children()}
    order = ", ".join(f"`{names.get(id(n), '?')}`" for n in used)
    check.fail(f"Your {name} {'opens' if wiring.norm_first else 'closes'} its sublayers with {order}, in that order: "
               f"the names are part of the exercise, and norm1 belongs to the first sublayer, norm2 to the second"
               + (", norm3 to the third" if kind == "decoder" else "") + wiring.names_why)


def _layout_unused(layout: twins.LayerLayout, name: str) -> str:
    return (
        f"only the properties above were checked: your {name}'s layout could not be matched to PyTorch's layer "
        f"({layout.missing}), so its exact values were not compared"
    )


# --------------------------------------------------------------------------
# The wiring and the dropout, seen by hooks on the checker's own instances.


@dataclasses.dataclass
class _Step:
    """What one sublayer saw in a traced call of a layer (float64, detached)."""

    sub: str  # the sublayer's name: self_attn, cross_attn, feed_forward
    norm: str  # the name of its LayerNorm
    norm_in: torch.Tensor
    norm_out: torch.Tensor
    sub_in: torch.Tensor  # the sublayer's first argument (the query, for attention)
    sub_out: torch.Tensor
    args: tuple  # every argument it received


def _trace(layer: nn.Module, kind: str, run: Callable) -> tuple[list[_Step], torch.Tensor] | None:
    """Per sublayer: its LayerNorm's input and output, the sublayer's first input, output and arguments; None when
    a sublayer is called twice or not at all (then the values alone judge)."""
    names = [n for pair in _SUBLAYERS[kind] for n in pair]
    with Recorder(layer, names) as rec:
        out = run(layer)
    steps = []
    for sub, norm in _SUBLAYERS[kind]:
        seen = (*_norm_call(rec.calls[norm]), rec.first_input(sub), rec.output(sub))
        if any(t is None for t in seen):
            return None
        args, kwargs, _ = rec.only(sub)
        steps.append(_Step(sub, norm, *(t.detach().double() for t in seen), args + tuple(kwargs.values())))
    return steps, out.detach().double()


def _norm_call(calls: list) -> tuple:
    """(input, output) of a LayerNorm called once, or several times on the same tensor (norm1(x) three times)."""
    found = [(args[0] if args else next(iter(kwargs.values()), None), out) for args, kwargs, out in calls]
    if not found or not all(isinstance(t, torch.Tensor) for pair in found for t in pair):
        return None, None
    if any(not close_enough(z, found[0][0], 0.0, 0.0) for z, _ in found[1:]):
        return None, None  # one norm used on two different tensors: judged by values only
    return found[0]


def _which(value: torch.Tensor, known: dict) -> str:
    return next((label for label, t in known.items() if close_enough(value, t, atol=1e-4, rtol=1e-4)), "")


def _check_wiring(check: Check, layer: nn.Module, kind: str, wiring: Wiring, run: Callable, x: torch.Tensor,
                  memory: torch.Tensor | None) -> None:
    """In eval mode, sublayer by sublayer: the LayerNorm reads the stream (pre-LN), each residual adds back the
    stream, the sublayer reads the stream (post-LN) or its LayerNorm's output (pre-LN), memory as it is given."""
    traced = _trace(layer, kind, run)
    if traced is None:
        return
    steps, out = traced
    name, pre = wiring.names[kind], wiring.norm_first
    current, label = x.double(), "x, the layer's input"
    known = {label: current}
    for i, step in enumerate(steps):
        role, norm, sub = _ROLES[(kind, step.sub)], step.norm, step.sub
        if pre and not close_enough(step.norm_in, current, atol=1e-4, rtol=1e-4):
            which = _which(step.norm_in, known)
            if which:
                check.fail(f"In your {name}, `{norm}` normalises {which} instead of {label}: each LayerNorm reads "
                           f"the residual stream as it stands when its sublayer begins.")
            return
        total = (steps[i + 1].norm_in if i + 1 < len(steps) else out) if pre else step.norm_in  # stream + sublayer
        if not close_enough(total - step.sub_out, current, atol=1e-4, rtol=1e-4):
            mistaken = ({f"the normalised stream (the output of `{norm}`)": step.norm_out} if pre else
                        {"the sublayer's own output a second time": step.sub_out})
            which = _which(total - step.sub_out, dict(known, **{"nothing (the residual is missing)": torch.zeros_like(current)},
                                                   **mistaken))
            if which:
                check.fail(f"The residual connection around {role} in your {name} adds {which} instead of {label}: "
                           + wiring.residual_note.format(norm=norm, sub=sub))
            return
        read, read_label = (step.norm_out, f"the output of `{norm}`") if pre else (current, label)
        if not close_enough(step.sub_in, read, atol=1e-4, rtol=1e-4):
            which = _which(step.sub_in, known)
            if which:
                check.fail(f"In your {name}, {role} receives {which} instead of {read_label}: {wiring.read_note}")
            return
        if sub == "cross_attn" and any(isinstance(t, torch.Tensor) and t.shape == memory.shape
                                       and not close_enough(t, memory) for t in step.args[1:3]):
            check.fail(f"In your {name}, the cross-attention does not read memory as it is given: its keys and "
                       f"values are memory itself, {wiring.cross_attn}.")
        current = total if pre else step.norm_out
        label = f"the stream after {role}" if pre else f"the output of `{norm}` (the previous sublayer)"
        known[label] = current
    check.ok(wiring.wired.format(norms=", ".join(_NORMS[kind])) + " (seen on the submodules' inputs and outputs)")


def _layer_dropout(check: Check, build: Callable[..., nn.Module], run: Callable, args: tuple, kind: str,
             wiring: Wiring) -> None:
    """Eval mode deterministic, train mode random; the rate measured on each sublayer's output (before the residual
    addition) and inside the attentions, nowhere else; with dropout=1.0 only the residual path is left."""
    name = wiring.names[kind]
    layer = build(0.5)
    stages.eval_deterministic(check, layer, run, name, 0.5)
    first = stages.train_random(check, layer, run, name, 0.5, fix=(
        f"Create nn.Dropout(dropout) in __init__ and apply it to the output of each sublayer: {wiring.sublayer}."))
    if not wiring.norm_first:
        _dropped_before_the_norm(check, first, name)
    feed_forward = getattr(layer, "feed_forward", None)
    if isinstance(feed_forward, nn.Module):  # built with the layer's rate, as the exercise says
        stages.train_random(check, feed_forward, lambda ff: check.call(ff, args[0], what=f"{name}.feed_forward"),
                            f"{name}(dropout=0.5)'s feed_forward", 0.5, fix=(
                                "Pass the layer's rate on: `self.feed_forward = FeedForward(d_model, d_ff, dropout)`; "
                                "its dropout on the hidden activations is one of the paper's."))
    _layer_dropout_measured(check, build(0.5), run, kind, wiring, args[0], args[1] if kind == "decoder" else None)
    _layer_everything_dropped(check, build, args, kind, wiring)


def _dropped_before_the_norm(check: Check, first: torch.Tensor, name: str) -> None:
    """Post-LN: a fresh LayerNorm has gain 1 and bias 0, so the pattern a dropout after it leaves shows in the output."""
    rows = first.detach().double().reshape(-1, first.shape[-1])
    zeros = float((rows == 0).double().mean())
    repeats = 0
    for row in rows:
        counts = torch.unique(row.round(decimals=6), return_counts=True)[1]
        repeats += int(counts.max() >= 3)
    if zeros > 0.2:
        check.fail(
            f"In training mode {round(zeros * 100)}% of your {name}'s outputs are exactly 0: dropout is "
            f"applied after the LayerNorm, to the layer's output.\n"
            f"Dropout belongs on the sublayer's output, before the residual addition: "
            f"LayerNorm(x + dropout(sublayer(x)))."
        )
    if repeats > rows.shape[0] // 2:
        check.fail(
            f"In training mode many values in each output row of your {name} are identical: dropout zeroes "
            f"entries of the sum x + sublayer(x) before the LayerNorm, which drops the residual too.\n"
            f"Apply dropout to the sublayer's output only, then add: LayerNorm(x + dropout(sublayer(x))), "
            f"not LayerNorm(dropout(x + sublayer(x)))."
        )
    check.ok("applies dropout to the sublayer outputs, not to the residual or to the normalised output")


def _layer_dropout_measured(check: Check, layer: nn.Module, run: Callable, kind: str, wiring: Wiring, x: torch.Tensor,
                      memory: torch.Tensor | None, p: float = 0.5) -> None:
    """Train mode: rate p on each sublayer's output before the residual and inside each attention (on its
    weights), nowhere else (memory untouched), fresh masks, global RNG."""
    from .stages import attention_dropout

    name, pre = wiring.names[kind], wiring.norm_first
    for sub in _ATTENTIONS[kind]:
        attention_dropout(check, getattr(layer, sub), _D_MODEL, _NUM_HEADS, p, f"`{sub}` of your {name}",
                          fix=f"Pass the rate on: `self.{sub} = MultiHeadAttention(d_model, num_heads, dropout)`.")
    layer.train()

    def sites() -> list[stages.Site] | None:
        traced = _trace(layer, kind, run)
        if traced is None:
            return None
        steps, out = traced
        found, current = [], x.double()
        for i, step in enumerate(steps):
            role = _ROLES[(kind, step.sub)]
            read = step.norm_out if pre else current
            if not close_enough(step.sub_in, read):
                fed = drop_pattern(step.sub_in, read)
                if fed.exact and fed.rate > 0:
                    check.fail(f"In training mode your {name} applies dropout to the input of {role} (to "
                               f"{wiring.reads}). The paper drops the sublayer's output instead: {wiring.sublayer}.")
                return None  # something else: the checks above have judged it
            if step.sub == "cross_attn" and memory is not None:
                _memory_untouched(check, step.args, memory, name, wiring)
            if pre and not close_enough(step.norm_in, current):
                return None
            total = (steps[i + 1].norm_in if i + 1 < len(steps) else out) if pre else step.norm_in
            found.append(stages.Site(f"the output of {role} (before the residual addition)", total - current,
                                     step.sub_out, {"position": 1, "sentence of the batch": 0, "feature": 2}))
            current = total if pre else step.norm_out
        if not pre and not torch.equal(out, steps[-1].norm_out):
            check.fail(f"In training mode the output of your {name} is not the output of its last LayerNorm: "
                       f"something (a dropout?) acts after `{steps[-1]['norm']}`.")
        return found

    stages.dropout_measured(check, sites, p, name, fix=f"The {wiring.whose} sublayer: {wiring.sublayer}, with "
                            f"nn.Dropout(dropout), once per sublayer.", not_exact=wiring.misplaced.format(name=name))


def _memory_untouched(check: Check, args: tuple, memory: torch.Tensor, name: str, wiring: Wiring) -> None:
    """The cross-attention's keys and values are memory as given (the encoder's output is not dropped again)."""
    for given in args[1:3]:
        if isinstance(given, torch.Tensor) and given.shape == memory.shape and not close_enough(given, memory):
            pattern = drop_pattern(given, memory)
            cause = (f"drops {round(100 * pattern.rate)}% of its entries" if pattern.exact and pattern.rate > 0
                     else "changes it")
            check.fail(f"In training mode your {name} {cause} before the cross-attention reads memory. memory "
                       f"is the encoder's output, already regularised inside the encoder: use it as it is, "
                       f"{wiring.cross_attn}. Dropout belongs on each sublayer's output.")


def _layer_everything_dropped(check: Check, build: Callable[..., nn.Module], args: tuple, kind: str, wiring: Wiring) -> None:
    """With dropout=1.0 in training every sublayer's output is dropped: only the residual path is left, x itself
    (pre-LN) or LayerNorm(...LayerNorm(x)), each row of x centred and rescaled by the fresh LayerNorms (post-LN).

    A sublayer whose output skips dropout (dropout only on the attention weights, say) leaves its trace.
    """
    name, x = wiring.names[kind], args[0].double()
    try:
        layer = build(1.0)
        layer.train()
        o = layer(*args).detach().double()
    except Exception:  # a layer that refuses p = 1 (a hand-written dropout, an assertion): not judged here
        return
    if not bool(torch.isfinite(o).all()):
        return  # a hand-written dropout dividing by 1 - p
    if wiring.norm_first:
        kept = close_enough(o, x, 1e-5, 1e-5)
    else:
        xc, oc = x - x.mean(-1, keepdim=True), o - o.mean(-1, keepdim=True)
        kept = not bool(((xc * oc).sum(-1) / (xc.norm(dim=-1) * oc.norm(dim=-1)).clamp_min(1e-12) < 1 - 1e-4).any())
    if kept:
        return check.ok("drops each sublayer's output in training (dropout=1.0 leaves "
                        + ("the input as it is)" if wiring.norm_first else "just the normalised input)"))
    if wiring.norm_first and close_enough(o, torch.zeros_like(o), 1e-6, 1e-6):
        check.fail(f"Built with dropout=1.0 and in training mode, your {name} returns zeros: dropout acts on the "
                   f"residual stream itself (on x + sublayer(...), or on the output). Drop only what each sublayer "
                   f"adds: {wiring.sublayer}, so that with every sublayer dropped the layer hands back x.")
    check.fail(
        f"Built with dropout=1.0 and in training mode, your {name} should drop every sublayer's output, so that "
        + ("it hands back its input x unchanged. Yours does not" if wiring.norm_first else "it reduces to "
           "LayerNorm(x + 0) for each sublayer: every output row would be its input row, normalised. Yours is not")
        + ": something reaches the output without going through a dropout.\n"
        f"Apply dropout to the output of each sublayer, before the residual addition: {wiring.sublayer}. Dropout on "
        f"the attention weights or inside FeedForward does not replace it, and the residual input x itself is not "
        f"dropped."
    )


# --------------------------------------------------------------------------
# FeedForward


def _ffn_candidates(module: nn.Module, d_model: int, d_ff: int) -> list[tuple]:
    """Every (A, b1, B, b2) drawn from the module's parameters with x @ A: d_model -> d_ff, h @ B: d_ff -> d_model."""
    params = [p for p in module.parameters()]
    firsts, seconds = [], []
    for p in params:
        if p.dim() == 3 and p.shape[-1] == 1:  # nn.Conv1d(kernel_size=1): the paper's "two convolutions"
            p = p.reshape(p.shape[0], p.shape[1])
        if p.dim() != 2:
            continue
        if tuple(p.shape) == (d_ff, d_model):
            firsts.append((p, p.detach().double().T))
            seconds.append((p, p.detach().double()))
        if tuple(p.shape) == (d_model, d_ff):
            firsts.append((p, p.detach().double()))
            seconds.append((p, p.detach().double().T))
    biases1 = [p.detach().double() for p in params if tuple(p.shape) == (d_ff,)] or [None]
    biases2 = [p.detach().double() for p in params if tuple(p.shape) == (d_model,)] or [None]
    found = []
    for p1, a in firsts:
        for p2, b in seconds:
            if p1 is p2 or (p1.shape == p2.shape and p1.data_ptr() == p2.data_ptr()):
                continue
            found += [(a, b1, b, b2) for b1 in biases1 for b2 in biases2]
    return found


def _ffn_value(x: torch.Tensor, cand: tuple, act: Callable = torch.relu, after: bool = False) -> torch.Tensor:
    a, b1, b, b2 = cand
    h = x.double() @ a + (0 if b1 is None else b1)
    y = act(h) @ b + (0 if b2 is None else b2)
    return torch.relu(y) if after else y


def _check_ffn_values(check: Check, ff: nn.Module, x: torch.Tensor, out: torch.Tensor) -> None:
    """relu(x W1 + b1) W2 + b2 with the module's own two matrices; named causes otherwise."""
    candidates = _ffn_candidates(ff, _D_MODEL, _D_FF)
    if not candidates:
        sizes = sorted({tuple(p.shape) for p in ff.parameters() if p.dim() == 2})
        check.fail(
            f"Could not find the two weight matrices of FeedForward(d_model={_D_MODEL}, d_ff={_D_FF}): "
            f"one mapping d_model -> d_ff, one mapping d_ff -> d_model. Your weight matrices have shapes "
            f"{', '.join(str(s) for s in sizes) or 'none'}.\n"
            f"Use nn.Linear(d_model, d_ff) then nn.Linear(d_ff, d_model): is the hidden size d_ff, and is the "
            f"second linear layer there?"
        )
    match = next((c for c in candidates if close_enough(out, _ffn_value(x, c), _ATOL, _RTOL)), None)
    if match is None:
        variants = {
            "no activation": (
                lambda c: _ffn_value(x, c, act=lambda h: h),
                "there is no ReLU between the two linear layers: FFN(x) = max(0, x W1 + b1) W2 + b2.",
            ),
            "gelu": (
                lambda c: _ffn_value(x, c, act=F.gelu),
                "you used GELU: the paper's feed-forward network uses ReLU, max(0, x W1 + b1).",
            ),
            "gelu tanh": (
                lambda c: _ffn_value(x, c, act=lambda h: F.gelu(h, approximate="tanh")),
                "you used GELU: the paper's feed-forward network uses ReLU, max(0, x W1 + b1).",
            ),
            "leaky relu": (
                lambda c: _ffn_value(x, c, act=F.leaky_relu),
                "you used LeakyReLU (negative values scaled by 0.01, not set to 0): the paper's feed-forward "
                "network uses ReLU, max(0, x W1 + b1).",
            ),
            "silu": (
                lambda c: _ffn_value(x, c, act=F.silu),
                "you used SiLU (Swish): the paper's feed-forward network uses ReLU, max(0, x W1 + b1).",
            ),
            "relu before": (
                lambda c: _ffn_value(torch.relu(x), c),
                "a ReLU is applied to the input too, before the first linear layer: only the hidden layer has a "
                "ReLU; the input (the output of a LayerNorm, with negative values) goes into linear1 as it is.",
            ),
            "relu after": (
                lambda c: _ffn_value(x, c, after=True),
                "a ReLU is applied after the second linear layer too: only the hidden layer has a ReLU, "
                "the output of linear2 is returned as it is (it must be able to go negative).",
            ),
            "relu moved after": (
                lambda c: _ffn_value(x, c, act=lambda h: h, after=True),
                "the ReLU is applied after the second linear layer instead of between the two: the hidden layer "
                "is relu(linear1(x)), and the output of linear2 is returned as it is (it must be able to go "
                "negative). Without a ReLU between them, the two linear layers amount to a single one.",
            ),
            "b1 unused": (
                lambda c: _ffn_value(x, (c[0], None, c[2], c[3])),
                "the first layer's bias b1 is never added: the hidden layer is max(0, x W1 + b1). A matrix "
                "product with `linear1.weight` alone leaves b1 out; call `self.linear1(x)` instead.",
            ),
            "b2 unused": (
                lambda c: _ffn_value(x, (c[0], c[1], c[2], None)),
                "the second layer's bias b2 is never added: the output is max(0, x W1 + b1) W2 + b2. A matrix "
                "product with `linear2.weight` alone leaves b2 out; call `self.linear2(h)` instead.",
            ),
            "residual": (
                lambda c: x.double() + _ffn_value(x, c),
                "the input is added to the output (a residual connection): the residual and the LayerNorm "
                "belong in the encoder/decoder layer, not inside FeedForward.",
            ),
            "residual and norm": (
                lambda c: F.layer_norm(x.double() + _ffn_value(x, c), (_D_MODEL,)),
                "the output is LayerNorm(x + ffn(x)): the residual connection and the LayerNorm belong in the "
                "encoder/decoder layer; FeedForward returns linear2(dropout(relu(linear1(x)))) only.",
            ),
        }
        for _, (value, cause) in variants.items():
            if any(close_enough(out, value(c), _ATOL, _RTOL) for c in candidates):
                check.fail(f"The output of FeedForward has the wrong values: {cause}")
        expected = _ffn_value(x, candidates[0])
        if bool((out >= 0).all()) and bool((expected < -_ATOL).any()):
            check.fail("The output of FeedForward has no negative entry, where relu(x W1 + b1) W2 + b2 has many: "
                       "something that cannot go negative (a ReLU, a softmax, an absolute value) is applied to the "
                       "output of linear2. Only the hidden layer has a ReLU; return linear2's output as it is.")
        check.close(
            out, expected, "the output of FeedForward",
            atol=_ATOL, rtol=_RTOL,
            hint="Expected relu(x W1^T + b1) W2^T + b2 with your two linear layers (in eval mode).",
        )
    if match[1] is None or match[3] is None:
        missing = " and ".join(b for b, m in (("b1", match[1]), ("b2", match[3])) if m is None)
        check.fail(
            f"Your FeedForward computes {'relu(x W1)' if match[1] is None else 'relu(x W1 + b1)'} "
            f"{'W2' if match[3] is None else 'W2 + b2'}: without {missing}. The paper's network has both biases: "
            f"FFN(x) = max(0, x W1 + b1) W2 + b2; nn.Linear includes a bias by default."
        )
    big = 40.0 * x  # large hidden activations: ReLU and its bounded or smooth look-alikes part ways
    out_big = check.tensor(check.call(ff, big, what="FeedForward.forward"), "the output", shape=(3, 5, _D_MODEL))
    if not close_enough(out_big, _ffn_value(big, match), atol=1e-3, rtol=_RTOL):
        check.fail(
            "For inputs of large magnitude (x * 40) the output of your FeedForward is no longer "
            "relu(x W1 + b1) W2 + b2, although it is for ordinary inputs: the activation is not exactly ReLU.\n"
            "Is it bounded (ReLU6, a clamp with a maximum) or a look-alike (softplus, leaky ReLU)? "
            "Use torch.relu (or nn.ReLU()): max(0, x W1 + b1)."
        )
    check.ok("computes relu(x W1 + b1) W2 + b2 with its two linear layers")


def _check_ffn_dropout(check: Check, FeedForward, x: torch.Tensor) -> None:
    """Dropout: off in eval mode, on the hidden activations in train mode (rate, scale, fresh masks)."""
    def build(d_ff: int, p: float) -> nn.Module:
        return stages.is_module(check, check.build(FeedForward, _D_MODEL, d_ff, p), "FeedForward")

    def run(module: nn.Module) -> torch.Tensor:
        return check.call(module, x, what="FeedForward.forward")

    stages.eval_deterministic(check, build(_D_FF, 0.5), run, f"FeedForward({_D_MODEL}, {_D_FF}, dropout=0.5)", 0.5)
    # With d_ff < d_model the hidden vector can be recovered from the output, so dropout's footprint on it is visible.
    p, small = 0.3, 8
    ffs = build(small, p).eval()
    base = run(ffs)
    cand = next((c for c in _ffn_candidates(ffs, _D_MODEL, small) if close_enough(base, _ffn_value(x, c), _ATOL, _RTOL)), None)
    if cand is None:
        check.fail(
            "FeedForward(16, 8, dropout=0.3) in eval mode does not compute relu(x W1 + b1) W2 + b2, although "
            "FeedForward(16, 24) does. Does your class use its d_ff argument (and no fixed size)?"
        )
    where = "linear2(dropout(relu(linear1(x))))"
    stages.train_random(check, ffs, run, f"FeedForward(16, 8, dropout={p})", p,
                        fix=f"Apply nn.Dropout(dropout) to the hidden activations: {where}.")
    a, b1, b, b2 = cand
    h = torch.relu(x.double() @ a + b1)  # (B, L, small): the hidden vector without dropout

    def sites() -> list[stages.Site]:
        rows = (run(ffs).detach().double() - b2).reshape(-1, _D_MODEL)
        hidden = torch.linalg.lstsq(b.T, rows.T).solution.T  # (B * L, small): the vector linear2 received
        if not close_enough(hidden @ b, rows, _ATOL, _RTOL):
            check.fail(
                "In training mode the output of your FeedForward is not linear2 of anything: dropout is applied "
                f"after the second linear layer.\nDropout sits on the hidden activations: {where}; the layer that "
                f"uses FeedForward applies its own dropout to the sublayer's output."
            )
        return [stages.Site("the hidden activations", hidden.reshape(h.shape), h,
                            {"position": 1, "sentence of the batch": 0})]

    stages.dropout_measured(
        check, sites, p, "FeedForward", fix=f"Use one nn.Dropout(dropout) on the hidden activations: {where}.",
        not_exact="In training mode the hidden vector of your FeedForward is not relu(linear1(x)) with some units "
                  "zeroed and the rest scaled by 1 / (1 - p): dropout is in the wrong place (on the input, or "
                  f"before the ReLU?).\nUse {where}.")
    ffs.eval()




# --------------------------------------------------------------------------
# Post-LN, the paper's wiring: what the layer stages of lesson 05 read.

_GELU_CAUSE = ("the feed-forward network uses GELU: the paper's uses ReLU, "
               "FFN(x) = max(0, x W1 + b1) W2 + b2")


def _post_ln_encoder(p: Pieces) -> list:
    """Known wrong post-LN encoder layers, as functions of a twin's pieces: (cause, variant)."""
    x, sa, ff, n1, n2 = p.x, p.sa, p.ff, p.n1, p.n2

    def post(ffn=True, res1=True, res2=True, m=_GIVEN, act=torch.relu):
        y = n1((x if res1 else 0) + sa(x, m=m))
        return n2((y if res2 else 0) + ff(y, act)) if ffn else y

    return [
        ("the residual connection around self-attention is missing: LayerNorm(x + dropout(self_attn(x))) "
         "adds the sublayer's input x back", lambda: post(res1=False)),
        ("the residual connection around the feed-forward network is missing: LayerNorm(y + dropout(ffn(y))) "
         "adds the sublayer's input y back", lambda: post(res2=False)),
        ("the residual connections are missing: each sublayer output is added to its input before "
         "the LayerNorm", lambda: post(res1=False, res2=False)),
        ("the mask is not used by the self-attention", lambda: post(m=None)),
        ("the feed-forward sublayer is missing: after self-attention comes LayerNorm(y + dropout(ffn(y)))",
         lambda: post(ffn=False)),
        ("this is pre-LN, x + sublayer(LayerNorm(x)); the paper (and this course) use post-LN: "
         "LayerNorm(x + dropout(sublayer(x)))", lambda: (lambda y: y + ff(n2(y)))(x + sa(n1(x)))),
        ("there is no LayerNorm: each sublayer is LayerNorm(x + dropout(sublayer(x)))",
         lambda: (lambda y: y + ff(y))(x + sa(x))),
        ("the LayerNorm is applied to the sublayer's output before the residual addition; it normalises the "
         "sum: LayerNorm(x + dropout(sublayer(x)))", lambda: (lambda y: y + n2(ff(y)))(x + n1(sa(x)))),
        ("the sublayers are in the wrong order: self-attention comes first, then the feed-forward network",
         lambda: (lambda y: n2(y + sa(y)))(n1(x + ff(x)))),
        (_GELU_CAUSE, lambda: post(act=F.gelu)),
        (_GELU_CAUSE, lambda: post(act=lambda h: F.gelu(h, approximate="tanh"))),
        (_one_pre_ln("self_attn", "norm1"), lambda: (lambda y: n2(y + ff(y)))(x + sa(n1(x)))),
        (_one_pre_ln("feed_forward", "norm2"), lambda: (lambda y: y + ff(n2(y)))(n1(x + sa(x)))),
    ]


def _one_pre_ln(sublayer: str, norm: str) -> str:
    return (f"the {sublayer} sublayer is pre-LN, y + dropout({sublayer}({norm}(y))), while the rest of the layer is "
            f"post-LN. The paper's layer normalises every sublayer's sum: {norm}(y + dropout({sublayer}(y)))")


def _post_ln_decoder(p: Pieces) -> list:
    """Known wrong post-LN decoder layers, as functions of a twin's pieces: (cause, variant)."""
    x, memory, sa, ca, ff, n1, n2, n3 = p.x, p.memory, p.sa, p.ca, p.ff, p.n1, p.n2, p.n3

    def one_pre(i: int) -> torch.Tensor:  # sublayer i pre-LN, the others post-LN
        y1 = x + sa(n1(x)) if i == 0 else n1(x + sa(x))
        y2 = y1 + ca(n2(y1), memory) if i == 1 else n2(y1 + ca(y1, memory))
        return y2 + ff(n3(y2)) if i == 2 else n3(y2 + ff(y2))

    def post(res=(1, 1, 1), tm=_GIVEN, sm=_GIVEN, own_kv=False, query_x=False, ffn=True, act=torch.relu, kv=None):
        y1 = n1((x if res[0] else 0) + sa(x, m=tm))
        y2 = n2((y1 if res[1] else 0) + ca(x if query_x else y1, kv if kv is not None else y1 if own_kv else memory, sm))
        return n3((y2 if res[2] else 0) + ff(y2, act)) if ffn else y2

    return [
        ("the target mask is not used by the self-attention: self_attn(x, x, x, tgt_mask)", lambda: post(tm=None)),
        ("the source mask is not used by the cross-attention: cross_attn(x, memory, memory, src_mask)",
         lambda: post(sm=None)),
        ("the cross-attention takes its keys and values from the decoder's own states instead of memory: "
         "cross_attn(x, memory, memory, src_mask)", lambda: post(own_kv=True, sm=p.self_mask)),
        *[(f"memory goes through {name} before the cross-attention reads it: the encoder's output is already "
           f"normalised (each encoder layer ends with a LayerNorm), so use it as it is: "
           f"cross_attn(x, memory, memory, src_mask)", (lambda norm=norm: post(kv=norm(memory))))
          for name, norm in (("norm1", n1), ("norm2", n2), ("norm3", n3))],
        ("the cross-attention query is the layer's input instead of the output of the first sublayer "
         "(the query must be the result of the masked self-attention sublayer)", lambda: post(query_x=True)),
        ("the residual connection around the masked self-attention is missing", lambda: post(res=(0, 1, 1))),
        ("the residual connection around the cross-attention is missing", lambda: post(res=(1, 0, 1))),
        ("the residual connection around the feed-forward network is missing", lambda: post(res=(1, 1, 0))),
        ("the residual connections are missing: each sublayer output is added to its input before the "
         "LayerNorm", lambda: post(res=(0, 0, 0))),
        ("the feed-forward sublayer is missing: the third sublayer is LayerNorm(y + dropout(ffn(y)))",
         lambda: post(ffn=False)),
        ("this is pre-LN, x + sublayer(LayerNorm(x)); the paper (and this course) use post-LN: "
         "LayerNorm(x + dropout(sublayer(x)))",
         lambda: (lambda y2: y2 + ff(n3(y2)))((lambda y1: y1 + ca(n2(y1)))(x + sa(n1(x))))),
        ("there is no LayerNorm: each sublayer is LayerNorm(x + dropout(sublayer(x)))",
         lambda: (lambda y2: y2 + ff(y2))((lambda y1: y1 + ca(y1))(x + sa(x)))),
        ("the LayerNorm is applied to the sublayer's output before the residual addition; it normalises the "
         "sum: LayerNorm(x + dropout(sublayer(x)))",
         lambda: (lambda y2: y2 + n3(ff(y2)))((lambda y1: y1 + n2(ca(y1)))(x + n1(sa(x))))),
        ("the sublayers are in the wrong order: masked self-attention first, then cross-attention, then the "
         "feed-forward network", lambda: (lambda y2: n3(y2 + ff(y2)))((lambda y1: n2(y1 + sa(y1)))(n1(x + ca(x))))),
        (_GELU_CAUSE, lambda: post(act=F.gelu)),
        (_GELU_CAUSE, lambda: post(act=lambda h: F.gelu(h, approximate="tanh"))),
        *[(_one_pre_ln(name, norm), lambda i=i: one_pre(i)) for i, (name, norm) in
          enumerate((("self_attn", "norm1"), ("cross_attn", "norm2"), ("feed_forward", "norm3")))],
    ]


POST_LN = Wiring(
    norm_first=False, names={"encoder": "EncoderLayer", "decoder": "DecoderLayer"},
    sublayer="LayerNorm(x + dropout(sublayer(x)))", self_attn="self_attn(x, x, x, {mask})",
    cross_attn="cross_attn(x, memory, memory, src_mask)",
    hints={"encoder": "Expected nn.TransformerEncoderLayer (post-LN, ReLU) with your weights: "
                      "y = LayerNorm(x + dropout(self_attn(x, x, x, mask))), out = LayerNorm(y + dropout(ffn(y))).",
           "decoder": "Expected nn.TransformerDecoderLayer (post-LN, ReLU) with your weights: "
                      "y1 = LayerNorm(x + self_attn(x, x, x, tgt_mask)), y2 = LayerNorm(y1 + cross_attn(y1, memory, "
                      "memory, src_mask)), out = LayerNorm(y2 + ffn(y2)) (dropout on each sublayer output)."},
    variants={"encoder": _post_ln_encoder, "decoder": _post_ln_decoder},
    whose="paper's", reads="x before the sublayer reads it", names_why=". Lesson 07 copies each LayerNorm by its name.",
    read_note="each sublayer works on the output of the previous one.",
    residual_note="{norm}(y + dropout({sub}(y, ...))) adds back the very tensor the sublayer received.",
    wired="{norms} close the sublayers in order, each residual adds back the sublayer's own input")
