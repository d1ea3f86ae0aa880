"""The layer stages: an encoder or decoder layer checked whatever its wiring, post-LN (lesson 05) or pre-LN (lesson 09).

A checker of a layer is :func:`encoder_layer_stages` or :func:`decoder_layer_stages` run with a :class:`Wiring`:
how the layer joins its sublayers, LayerNorms and residuals (PyTorch's twins' ``norm_first``, the formula and the
calls its messages show), the components its contract names (with their own checkers), and its known slips: wrong
layers written as mutants of the right one over a twin's :class:`Pieces`, matched by :func:`~..slips.matching_slip`.
Every stage is shared: the contract, what the layer must do (mix positions, honour masks, be causal), the values
against ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` carrying the learner's weights, the wiring
and the dropout seen by hooks on the sublayers, other sizes.

:func:`slipped_layer` makes a slip into a learner's layer (for the generated catalogue tests): the course's own
components (from the solutions folder), wired as the slip says.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch
from torch import nn

from .._core import Check, Raised, close_enough, describe, generator
from ..slips import Diagnosis, Slip, matching_slip, same_tensor
from . import anatomy, twins
from .contract import called_as_modules, contract_defaults, contract_parts, is_module, one_tensor, \
    replaced_parts_used, submodule_parts
from .devices import module_on_gpu
from .dropout import Site, attention_dropout, dropout_measured, dropout_set_through, eval_deterministic, train_random
from .hooks import Recorder
from .measuring import drop_pattern
from .precision import in_16_bits_module
from .state import state_dict_round_trip
from .values import every_parameter_learns

#: the checker's layers: d_model, heads and d_ff all differ, so a size read from the wrong argument shows
D_MODEL, NUM_HEADS, D_FF = 16, 4, 24
_ATOL, _RTOL = 1e-4, 1e-4  # layers compare float32 stacks with float64 twins

#: a decoder layer's missing residuals, post-LN or pre-LN alike: the flag ``res`` keeps (1) or drops (0) the
#: residual around self-attention, cross-attention and the feed-forward network
DECODER_RESIDUAL_SLIPS = (
    Slip("no residual around self-attention",
         Diagnosis("the residual connection around the masked self-attention is missing"), dict(res=(0, 1, 1))),
    Slip("no residual around cross-attention",
         Diagnosis("the residual connection around the cross-attention is missing"), dict(res=(1, 0, 1))),
    Slip("no residual around feed-forward",
         Diagnosis("the residual connection around the feed-forward network is missing"), dict(res=(1, 1, 0))),
)


@dataclasses.dataclass(frozen=True)
class Wiring:
    """How a layer joins its sublayers, LayerNorms and residuals: what the layer stages read, the rest is shared."""

    norm_first: bool  # the twins' norm_first: pre-LN, each LayerNorm opens its sublayer
    names: dict[str, str]  # "encoder" / "decoder" -> the exercise's name
    sublayer: str  # one sublayer, as the messages write it: "LayerNorm(x + dropout(sublayer(x)))"
    self_attn: str  # the self-attention's call, with the mask's name left as "{mask}"
    cross_attn: str  # the cross-attention's call
    hints: dict[str, str]  # kind -> what PyTorch's layer computes (shown with a value mismatch)
    slips: dict[str, Sequence[Slip]]  # kind -> the known wrong layers, tried in order once the values differ
    wrong: dict[str, Callable[..., torch.Tensor]]  # kind -> the layer with flags, wrong(pieces, **flags): slips' oracle
    components: Callable[[], dict[str, tuple[Callable, str]]]  # submodule -> (its checker, its exercise), components first
    own_norm: Callable[[nn.Module, str, Any], str]  # a LayerNorm of the learner's own class: what is wrong ('' if right)
    whose: str  # "paper's": whose sublayer it is ("The paper's sublayer: ...")
    reads: str  # what a sublayer's input is, where dropout does not belong
    names_why: str  # why the LayerNorms' order is part of the exercise
    read_note: str  # what each sublayer reads, for a sublayer fed the wrong tensor
    residual_note: str  # what each residual adds back ("{norm}" and "{sub}" filled in)
    wired: str  # what the hooks saw, when it is right
    misplaced: str = ""  # a sublayer's dropout that is not exact: the message ("{name}" filled in), or "": the values judge

    def replay(self, kind: str, slip: Slip, pieces: "Pieces") -> torch.Tensor:
        """What the layer with this slip computes on the pieces' inputs."""
        return slip.replay(self.wrong[kind], pieces)


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
    x = torch.randn(B, L, D_MODEL, generator=g)
    keep = torch.ones(B, 1, 1, L, dtype=torch.bool)
    keep[1, ..., 3:] = False  # the last two positions of sentence 1 are padding

    def run(layer_, x_, mask_=None):
        out_ = one_tensor(check, check.call(layer_, x_, mask_, what=f"{name}.forward"), name)
        if mask_ is not None:
            _nan_with_mask(check, out_, name)
        return check.tensor(out_, f"the output of {name}", shape=(B, L, D_MODEL), dtype=torch.float32)

    plain = run(layer, x)
    check.ok("returns a (batch, length, d_model) tensor")
    _allow_all_is_no_mask(check, run(layer, x, torch.ones(B, 1, 1, L, dtype=torch.bool)), plain, name, "a mask")
    out = run(layer, x, keep)
    check.ok("runs with and without a mask (mask=None)")
    called_as_modules(check, layer, ["self_attn", "feed_forward"], (x, keep), name, _HOOKS_SEEN)
    _encoder_properties(check, run, layer, x, keep, plain, out, g, name, wiring)
    layout = _values(check, layer, "encoder", wiring, out, lambda layer_: run(layer_, x, keep), g, x,
                     masks=(twins.torch_mask(keep, B, NUM_HEADS, L, L), None))
    _layer_dropout(check, build, lambda layer_: run(layer_, x, keep), (x, keep), "encoder", wiring)
    if name == "EncoderLayer":  # what lesson 07 does to the post-LN layers
        replaced_parts_used(check, build(0.0).eval(), ["self_attn"], (x, keep), name,
                                   "Lesson 07's with_fused_attention")
    dropout_set_through(check, build, ["dropout"], (x, keep), name, "to the sublayers' outputs",
                               sublayers=["self_attn", "feed_forward"])  # lesson 08 sets `.p`
    module_on_gpu(check, layer, x, keep, what=name, also=[(x,)])
    in_16_bits_module(check, layer, (x, keep), name)
    state_dict_round_trip(check, lambda: build(0.0), lambda m: m(x, keep), name)
    _check_layer_sizes(check, build, "encoder", wiring)
    contract_defaults(check, cls, name)
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
    x = torch.randn(B, T, D_MODEL, generator=g)
    memory = torch.randn(B, S, D_MODEL, generator=g)
    src_keep = torch.ones(B, 1, 1, S, dtype=torch.bool)
    src_keep[1, ..., 4:] = False  # the last two memory positions of sentence 1 are padding
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool)).expand(B, 1, T, T).clone()
    inputs = (x, memory, src_keep, causal)
    run = _decoder_runner(check, name, wiring, (B, T, S))
    plain = run(layer, x, memory)
    check.ok("returns a (batch, target length, d_model) tensor when memory has another length")
    _masks_as_given(check, run, layer, plain, inputs, name, wiring)
    out = run(layer, *inputs)
    check.ok("runs with and without masks (src_mask=None, tgt_mask=None)")
    called_as_modules(check, layer, ["self_attn", "cross_attn", "feed_forward"], inputs, name, _HOOKS_SEEN)
    _decoder_properties(check, run, layer, x, memory, src_keep, causal, plain, out, g, name, wiring)
    _memory_learns(check, run, layer, x, memory, src_keep, causal, name)
    layout = _values(check, layer, "decoder", wiring, out, lambda layer_: run(layer_, *inputs), g,
                     x, memory, (twins.torch_mask(causal, B, NUM_HEADS, T, T), twins.torch_mask(src_keep, B, NUM_HEADS, T, S)))
    _layer_dropout(check, build, lambda layer_: run(layer_, *inputs), inputs, "decoder", wiring)
    if name == "DecoderLayer":  # what lesson 07 does to the post-LN layers
        replaced_parts_used(check, build(0.0).eval(), ["self_attn", "cross_attn"], inputs, name,
                            "Lesson 07's with_fused_attention")
    dropout_set_through(check, build, ["dropout"], inputs, name, "to the sublayers' outputs",
                        sublayers=["self_attn", "cross_attn", "feed_forward"])  # lesson 08 sets `.p`
    module_on_gpu(check, layer, *inputs, what=name, also=[(x, memory)])
    in_16_bits_module(check, layer, inputs, name)
    state_dict_round_trip(check, lambda: build(0.0), lambda m: m(*inputs), name)
    contract_defaults(check, cls, name)
    _check_layer_sizes(check, build, "decoder", wiring)
    if layout.missing:
        check.ok(_layout_unused(layout, name))


def _decoder_runner(check: Check, name: str, wiring: Wiring, sizes: tuple[int, int, int]) -> Callable[..., torch.Tensor]:
    """``run(layer, x, memory, src_mask=None, tgt_mask=None)``: the layer's output, checked; a crash with both masks
    first asks which mask each attention received."""
    B, T, S = sizes

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
        out_ = one_tensor(check, out_, name)
        hint = ""
        if isinstance(out_, torch.Tensor) and out_.dim() == 3 and out_.shape[1] == S:
            hint = (
                "The output has one row per memory position: in cross-attention the queries come from the "
                f"decoder (x), the keys and values from memory: {wiring.cross_attn}."
            )
        if (src_mask_ is not None or tgt_mask_ is not None) and not hint:
            _nan_with_mask(check, out_, name)
        return check.tensor(out_, f"the output of {name}", shape=(B, T, D_MODEL), dtype=torch.float32, shape_hint=hint)

    return run


def _masks_as_given(check: Check, run: Callable, layer: nn.Module, plain: torch.Tensor, inputs: tuple, name: str,
                    wiring: Wiring) -> None:
    """Masks that allow everything change nothing: no causal mask of the layer's own, with a mask or without one."""
    x, memory, src_keep, causal = inputs
    B, S, T = x.shape[0], memory.shape[1], x.shape[1]
    masked = run(layer, x, memory, torch.ones(B, 1, 1, S, dtype=torch.bool), torch.ones(B, 1, T, T, dtype=torch.bool))
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
    def build(dropout: float, d_model: int = D_MODEL, num_heads: int = NUM_HEADS, d_ff: int = D_FF) -> nn.Module:
        return is_module(check, check.build(cls, d_model, num_heads, d_ff, dropout), name)

    return build


def _layer_contract(check: Check, layer: nn.Module, kind: str, wiring: Wiring) -> None:
    """The submodules later code reads, the components' own checkers, their kinds and sizes; norms over d_model."""
    name = wiring.names[kind]
    wanted = {sub: part for sub, part in wiring.components().items() if sub in (*_ATTENTIONS[kind], "feed_forward")}
    sizes = {"d_model": D_MODEL, "num_heads": NUM_HEADS, "d_ff": D_FF, "dropout": 0.0}
    contract_parts(check, layer, name, sizes, components=submodule_parts(layer, wanted),
                   own_kinds={"LayerNorm": wiring.own_norm})
    _check_norms(check, layer, kind, name)
    if not any(D_FF in p.shape for p in layer.parameters()):
        check.fail(
            f"None of the weights of {name}(d_model={D_MODEL}, num_heads={NUM_HEADS}, d_ff={D_FF}) has a "
            f"dimension of size d_ff = {D_FF}: the feed-forward sublayer is missing, or it ignores d_ff.\n"
            f"The last sublayer is {wiring.sublayer.replace('sublayer', 'ffn')} with FeedForward(d_model, d_ff, dropout)."
        )
    check.ok("has a feed-forward network of hidden size d_ff")


def _check_norms(check: Check, layer: nn.Module, kind: str, name: str) -> None:
    """Each normN, freshly built, gives each position's d_model features (the last axis) mean 0 and variance 1."""
    z = 3.0 * torch.randn(2, 5, D_MODEL, generator=generator(13)) + 1.5
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
    later[1, 3:] = torch.randn(2, D_MODEL, generator=g)
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
    other[:, :4] = torch.randn(B, 4, D_MODEL, generator=g)
    if close_enough(run(layer, x, other, src_keep, causal), out, _ATOL, _RTOL):
        check.fail(
            f"Changing memory (the encoder output) does not change the output of your {name}: the "
            f"cross-attention does not use it.\n"
            f"In cross-attention the queries come from the decoder and the keys and values from memory: "
            f"{cross_call}, not cross_attn(x, x, x, ...)."
        )
    check.ok("uses memory (changing the encoder output changes the result)")
    hidden = memory.clone()
    hidden[1, 4:] = torch.randn(2, D_MODEL, generator=g)
    if not close_enough(run(layer, x, hidden, src_keep, causal), out, _ATOL, _RTOL):
        check.fail(
            "Memory positions hidden by src_mask still influence the output: changing padded positions of "
            "memory changed the result.\n"
            f"Pass src_mask to the cross-attention: {cross_call}."
        )
    check.ok("honours src_mask in the cross-attention")
    later = x.clone()
    later[:, 2:] = torch.randn(B, T - 2, D_MODEL, generator=g)
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

GIVEN = object()  # a Pieces attention's default mask: the one the checker gave (None: no mask)


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

    def sa(self, q: torch.Tensor, kv: torch.Tensor | None = None, m=GIVEN) -> torch.Tensor:
        kv = q if kv is None else kv
        return self.t.self_attn(q, kv, kv, attn_mask=self.self_mask if m is GIVEN else m, need_weights=False)[0]

    def ca(self, q: torch.Tensor, kv: torch.Tensor | None = None, m=GIVEN) -> torch.Tensor:
        kv = self.memory if kv is None else kv
        return self.t.multihead_attn(q, kv, kv, attn_mask=self.cross_mask if m is GIVEN else m, need_weights=False)[0]

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
    layout = twins.LayerLayout(layer, kind, D_MODEL, NUM_HEADS, D_FF, norm_first=wiring.norm_first)
    if layout.missing:
        if not wiring.norm_first:
            if not normalised:
                check.fail(_norm_message(name))
            check.ok("ends with a LayerNorm (post-LN)")
        every_parameter_learns(check, layer, run(layer), name)
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
    matched, slip = _best_match(layout, out, pieces, kind, wiring)
    if matched is None:
        if slip is not None:
            check.fail(f"The output of your {name} has the wrong values: {slip.says}.")
        _check_wiring(check, layout.layer, kind, wiring, run, x, memory)
        every_parameter_learns(check, layout.layer, run(layout.layer), name)
        if not wiring.norm_first and not normalised:
            check.fail(_norm_message(name))
        with torch.no_grad():
            expected = pieces.bind(next(layout.twins())[0]).out()
        check.close(out, expected, f"the output of {name}", atol=_ATOL, rtol=_RTOL, hint=wiring.hints[kind])
    _check_norm_use(check, name, layout, matched[1])
    _check_norm_order(check, name, kind, wiring, layout.layer, matched[1])
    every_parameter_learns(check, layout.layer, run(layout.layer), name)
    check.ok(f"matches {_twin_name(kind, wiring)} carrying your weights")


def _best_match(layout: twins.LayerLayout, out: torch.Tensor, pieces: Pieces, kind: str, wiring: Wiring) -> tuple:
    """(matched assignment or None, the first known slip whose wrong layer gives the learner's output, or None)."""
    for twin, attentions, norms in layout.twins():
        with torch.no_grad():
            if close_enough(out, pieces.bind(twin).out(), _ATOL, _RTOL):
                return (attentions, norms), None
    for twin, _, norms in layout.twins():
        if len({id(n) for n in norms}) < len(norms) <= len(layout.norms):
            continue  # a slip is looked for with one LayerNorm per sublayer only
        bound = pieces.bind(twin)
        with torch.no_grad():
            slip = matching_slip(wiring.slips[kind], lambda s: wiring.replay(kind, s, bound),
                                 same_tensor(out, _ATOL, _RTOL))
        if slip is not None:
            return None, slip
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
    d, n_attn = D_MODEL, len(_ATTENTIONS[kind])
    attention, ffn, norm = 4 * (d * d + d), d * D_FF + D_FF + D_FF * d + d, 2 * d
    expected = n_attn * attention + ffn + (n_attn + 1) * norm
    actual = anatomy.count_parameters(layer)
    shared = getattr(layer, "cross_attn", None)
    if actual != expected and shared is not None and shared is getattr(layer, "self_attn", None):
        check.fail(f"In your {name}, `cross_attn` and `self_attn` are one and the same module, so the two attentions "
                   f"share their weights ({attention:,} parameters fewer than the paper's layer). Build each with "
                   f"its own `MultiHeadAttention(d_model, num_heads, dropout)`.")
    if actual != expected:
        check.fail(
            f"Your {name}(d_model={d}, num_heads={NUM_HEADS}, d_ff={D_FF}) has {actual:,} parameters; the "
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
    eval_deterministic(check, layer, run, name, 0.5)
    first = train_random(check, layer, run, name, 0.5, fix=(
        f"Create nn.Dropout(dropout) in __init__ and apply it to the output of each sublayer: {wiring.sublayer}."))
    if not wiring.norm_first:
        _dropped_before_the_norm(check, first, name)
    feed_forward = getattr(layer, "feed_forward", None)
    if isinstance(feed_forward, nn.Module):  # built with the layer's rate, as the exercise says
        train_random(check, feed_forward, lambda ff: check.call(ff, args[0], what=f"{name}.feed_forward"),
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
    name, pre = wiring.names[kind], wiring.norm_first
    for sub in _ATTENTIONS[kind]:
        attention_dropout(check, getattr(layer, sub), D_MODEL, NUM_HEADS, p, f"`{sub}` of your {name}",
                          fix=f"Pass the rate on: `self.{sub} = MultiHeadAttention(d_model, num_heads, dropout)`.")
    layer.train()

    def sites() -> list[Site] | None:
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
            found.append(Site(f"the output of {role} (before the residual addition)", total - current,
                                     step.sub_out, {"position": 1, "sentence of the batch": 0, "feature": 2}))
            current = total if pre else step.norm_out
        if not pre and not torch.equal(out, steps[-1].norm_out):
            check.fail(f"In training mode the output of your {name} is not the output of its last LayerNorm: "
                       f"something (a dropout?) acts after `{steps[-1].norm}`.")
        return found

    dropout_measured(check, sites, p, name, fix=f"The {wiring.whose} sublayer: {wiring.sublayer}, with "
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
# A slip made into a learner's layer: the generated catalogue tests' answers.


class LayerPieces(Pieces):
    """A layer's own parts, bound to one call of its forward: a slip's wrong layer run as the learner's would be.

    Each sublayer is called as a module (hooks see it) and its output goes through the layer's dropout; the masks
    are the course's (True = may attend), as the layer received them.
    """

    def __init__(self, layer: nn.Module, x: torch.Tensor, memory: torch.Tensor | None = None,
                 self_mask: torch.Tensor | None = None, cross_mask: torch.Tensor | None = None):
        self.layer, self.x, self.memory = layer, x, memory
        self.self_mask, self.cross_mask = self_mask, cross_mask
        self.norms = [m for m in layer.children() if isinstance(m, nn.LayerNorm)]  # in order, as a layout finds them
        self.n1, self.n2, self.n3 = (getattr(layer, n, None) for n in ("norm1", "norm2", "norm3"))

    def sa(self, q: torch.Tensor, kv: torch.Tensor | None = None, m=GIVEN) -> torch.Tensor:
        kv = q if kv is None else kv
        return self.layer.dropout(self.layer.self_attn(q, kv, kv, self.self_mask if m is GIVEN else m))

    def ca(self, q: torch.Tensor, kv: torch.Tensor | None = None, m=GIVEN) -> torch.Tensor:
        kv = self.memory if kv is None else kv
        return self.layer.dropout(self.layer.cross_attn(q, kv, kv, self.cross_mask if m is GIVEN else m))

    def ff(self, y: torch.Tensor, act: Callable = torch.relu) -> torch.Tensor:
        ffn = self.layer.feed_forward
        out = ffn(y)  # called as a module, as the exercise asks, even where the slip then computes another activation
        if act is not torch.relu:
            out = ffn.linear2(ffn.dropout(act(ffn.linear1(y))))
        return self.layer.dropout(out)


def course_components() -> dict[str, type[nn.Module]]:
    """The course's own MultiHeadAttention and FeedForward, loaded from the solutions folder (for slipped layers)."""
    if not _COMPONENTS:
        from ...notebook import load_exercises
        from ...solutions import find_solutions_dir

        folder, namespace = find_solutions_dir(), {}
        load_exercises(folder / "01_attention.ipynb", ["scaled_dot_product_attention"], namespace)
        _COMPONENTS.update(load_exercises(folder / "04_multi_head_attention.ipynb", ["MultiHeadAttention"], namespace))
        _COMPONENTS.update(load_exercises(folder / "05_transformer.ipynb", ["FeedForward"], namespace))
    return _COMPONENTS


_COMPONENTS: dict[str, type[nn.Module]] = {}


def slipped_layer(wiring: Wiring, kind: str, slip: Slip) -> type[nn.Module]:
    """A learner's layer class with this slip: the course's components, wired as the slip's wrong layer says."""
    parts = course_components()
    attention, feed_forward = parts["MultiHeadAttention"], parts["FeedForward"]

    class SlippedLayer(nn.Module):
        def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0):
            super().__init__()
            self.self_attn = attention(d_model, num_heads, dropout)
            if kind == "decoder":
                self.cross_attn = attention(d_model, num_heads, dropout)
            self.feed_forward = feed_forward(d_model, d_ff, dropout)
            for norm in _NORMS[kind]:
                setattr(self, norm, nn.LayerNorm(d_model))
            if getattr(slip.mutant, "norms", 0) > len(_NORMS[kind]):  # a slip that needs a LayerNorm of its own
                self.norm_out = nn.LayerNorm(d_model)
            self.dropout = nn.Dropout(p=dropout)

    def encoder_forward(self, x, mask=None):
        return wiring.replay(kind, slip, LayerPieces(self, x, None, mask))

    def decoder_forward(self, x, memory, src_mask=None, tgt_mask=None):
        return wiring.replay(kind, slip, LayerPieces(self, x, memory, tgt_mask, src_mask))

    SlippedLayer.forward = encoder_forward if kind == "encoder" else decoder_forward
    SlippedLayer.__name__ = SlippedLayer.__qualname__ = f"Slipped{wiring.names[kind]}"
    return SlippedLayer


__all__ = ["D_FF", "D_MODEL", "GIVEN", "LayerPieces", "NUM_HEADS", "Pieces", "Wiring", "course_components",
           "decoder_layer_stages", "encoder_layer_stages", "slipped_layer"]
