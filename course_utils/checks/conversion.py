"""Checker for lesson 07's to_torch_transformer: the learner's weights in PyTorch's own nn.Transformer.

The copy must compute the model's logits with ``nn.Transformer``'s layers (the same values in eval mode, the
same dropout rate in training mode), share no tensor with the learner's model, and leave it as it was. When the
logits differ, the layers are compared one by one and the first that departs is named, with the weight that
was copied wrongly where it can be told.

Known slips are records (:data:`SLIPS`): each a mutant of what the copy should hold or pass (in_proj_weight's
blocks transposed or in another order, out_proj transposed, a norm holding another, an inverted mask), matched
on the copy's own tensors; the sizes, rates and options read off the copy are named by their own checks.
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any, Callable

import torch
from torch import nn

from . import stages
from ._core import Check, CheckResult, close_enough, describe, fmt_values, generator
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip
from .stages.measuring import drop_pattern, dropout_problem
from .stages.standins import DROPOUT, LAYERS, SRC_VOCAB, TGT_VOCAB, CourseTransformer


_PAD = 0  # the padding id of the checker's model


def check_to_torch_transformer(to_torch_transformer: Callable) -> CheckResult:
    """Check that ``to_torch_transformer(model)`` computes the model's logits with nn.Transformer's layers."""
    return TO_TORCH_TRANSFORMER.check(to_torch_transformer)


def _same_values(a, b) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and tuple(a.shape) == tuple(b.shape) and \
        torch.allclose(a.detach().double(), b.detach().double(), atol=1e-6, rtol=0)


def _attention_problem(where: str, ours: nn.Module, theirs: nn.MultiheadAttention) -> str | None:
    """Names how the fused projection of a PyTorch attention differs from W_q, W_k, W_v, W_o."""
    w = [getattr(ours, n).weight for n in ("W_q", "W_k", "W_v")]
    b = [getattr(ours, n).bias for n in ("W_q", "W_k", "W_v")]
    if getattr(theirs, "num_heads", None) != ours.num_heads:
        return (f"{where} has num_heads = {theirs.num_heads}, where your attention has num_heads = {ours.num_heads}: "
                f"read it from `self_attn.num_heads` (d_k = d_model // num_heads is another number).")
    fused = theirs.in_proj_weight
    if fused is None:
        return f"{where} has separate q/k/v projection weights: build it with kdim = vdim = d_model (the default)."
    if not _same_values(fused, torch.cat(w)):
        slip = matching_slip(_FUSED_SLIPS, lambda s: s.replay(None, w), lambda wrong: _same_values(fused, wrong))
        cause = slip.says if slip is not None else \
            "it should be torch.cat([W_q.weight, W_k.weight, W_v.weight]) (rows: queries, then keys, then values)."
        return f"{where}.in_proj_weight does not hold your W_q, W_k, W_v: {cause}"
    if theirs.in_proj_bias is not None and not _same_values(theirs.in_proj_bias, torch.cat(b)):
        return f"{where}.in_proj_bias should be torch.cat([W_q.bias, W_k.bias, W_v.bias])."
    if not _same_values(theirs.out_proj.weight, ours.W_o.weight) or not _same_values(theirs.out_proj.bias, ours.W_o.bias):
        return f"{where}.out_proj should hold your W_o (weight and bias){_transposed(theirs.out_proj, ours.W_o)}."
    return None


def _transposed(theirs: nn.Module, ours: nn.Module) -> str:
    """Names a weight copied transposed (possible only for a square one), else nothing."""
    slip = matching_slip(_COPIED_SLIPS, lambda s: s.replay(None, ours.weight),
                         lambda wrong: _same_values(theirs.weight, wrong) and not _same_values(theirs.weight, ours.weight))
    return f": {slip.says}" if slip is not None else ""


def _layer_problem(where: str, ours: nn.Module, theirs: nn.Module, attentions: list[str], norms: int,
                   rate: float) -> str | None:
    dropout = getattr(getattr(theirs, "dropout", None), "p", rate)
    if dropout != rate:
        return (f"{where} is built with dropout={dropout}, where your model's rate is {rate} "
                f"(`model.positional_encoding.dropout.p`, which the exercise's contract names): build nn.Transformer "
                f"with it; lesson 07 trains the copy to time its steps.")
    for name in attentions:
        torch_name = "multihead_attn" if name == "cross_attn" else "self_attn"
        problem = _attention_problem(f"{where}.{torch_name}", getattr(ours, name), getattr(theirs, torch_name))
        if problem:
            return problem
    for lin in ("linear1", "linear2"):
        mine, yours = getattr(ours.feed_forward, lin), getattr(theirs, lin)
        if not (_same_values(yours.weight, mine.weight) and _same_values(yours.bias, mine.bias)):
            return f"{where}.{lin} should hold your feed_forward.{lin} (weight and bias){_transposed(yours, mine)}."
    for i in range(1, norms + 1):
        mine, yours = getattr(ours, f"norm{i}"), getattr(theirs, f"norm{i}")
        if not (_same_values(yours.weight, mine.weight) and _same_values(yours.bias, mine.bias)):
            slip = matching_slip(_NORM_SLIPS[:norms], lambda s: s.replay(None, ours),
                                 lambda norm: _same_values(yours.weight, norm.weight))
            if slip is not None:
                return f"{where}.norm{i} should hold your norm{i} ({slip.says.cause}): {slip.says.fix}."
            return f"{where}.norm{i} should hold your norm{i}: each sublayer has its own LayerNorm."
        eps, want = getattr(yours, "eps", None), getattr(mine, "eps", 1e-5)
        # within a factor of 10 (1e-5 against a hand-written norm's 1e-6) the logits agree to the checker's 1e-5
        if isinstance(eps, float) and isinstance(want, float) and eps > 0 and want > 0 and \
                max(eps / want, want / eps) > 10 + 1e-9:
            return (f"{where}.norm{i} has eps = {eps:g}, where your norm{i} has {want:g}: build the layers with "
                    f"`layer_norm_eps` equal to your LayerNorms' eps (nn.Transformer's default is 1e-5).")
    if getattr(theirs, "norm_first", False):
        return (f"{where} has norm_first=True, the pre-LN variant. The paper's layers (and yours) are post-LN: "
                f"build PyTorch's layers with norm_first=False (the default).")
    activation = getattr(theirs, "activation", None)
    if activation is not None and not _computes_relu(activation):
        return f"{where} uses the activation {getattr(activation, '__name__', type(activation).__name__)}; yours is ReLU."
    return None


def _computes_relu(activation: Any) -> bool:
    """Whether ``activation`` is ReLU by what it computes (F.relu, nn.ReLU(), a lambda around either...)."""
    probe = torch.linspace(-3.0, 3.0, 13)
    try:
        out = activation(probe.clone())
    except Exception:  # noqa: BLE001  (a string such as "relu" is not called by nn.Transformer either)
        return activation == "relu"
    return isinstance(out, torch.Tensor) and out.shape == probe.shape and torch.equal(out, probe.clamp(min=0))


def _dense(out):
    """A layer's output as a dense (B, L, d) tensor (PyTorch's encoder runs its layers on nested tensors in eval)."""
    if isinstance(out, torch.Tensor) and out.is_nested:
        return out.to_padded_tensor(0.0)
    return out


def _real(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The values of x (B, L', d) at the real positions of ``real`` (B, L), L' <= L padded with zeros."""
    if x.dim() == 3 and x.shape[1] < real.shape[1]:
        x = torch.cat([x, x.new_zeros(x.shape[0], real.shape[1] - x.shape[1], x.shape[2])], dim=1)
    return x[real]


# --------------------------------------------------------------------------
# The known slips of a copy: one record each, a mutant of what the copy should hold or pass, and its message


#: in_proj_weight from W_q, W_k, W_v's weights ``w``: the right one is torch.cat(w)
_FUSED_SLIPS = (
    Slip("qkv transposed", Diagnosis("each block is transposed.",
                                     "nn.Linear already stores (out_features, in_features): copy it as it is."),
         lambda w: torch.cat([x.t() for x in w])),
    *(Slip(f"qkv order {''.join('qkv'[i] for i in order)}", Diagnosis(
        "the three blocks are in the wrong order.", "It must stack W_q, W_k, W_v, in this order."),
        lambda w, order=order: torch.cat([w[i] for i in order]))
      for order in [(0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]),
)

#: a square weight (out_proj) from the learner's: the right one is the weight itself
_COPIED_SLIPS = (
    Slip("copied transposed", Diagnosis(
        "it holds the transpose of your weight.", "nn.Linear stores (out_features, in_features) in both models, so "
        "copy the weight as it is, without `.T`"), lambda weight: weight.t()),
)

#: the norm a copied norm holds, from the learner's layer: the right one is the norm of the same number
_NORM_SLIPS = tuple(Slip(f"holds norm{j}", Diagnosis(f"it holds your norm{j}", "each sublayer has its own LayerNorm"),
                         lambda layer, j=j: getattr(layer, f"norm{j}")) for j in (1, 2, 3))


def _causal_hidden(length: int) -> torch.Tensor:
    return torch.ones(length, length, dtype=torch.bool).triu(1)  # (L, L): PyTorch's causal mask, True = hidden


#: the masks decoder layer 0 receives, in PyTorch's convention (True = hidden), from src, the target length and
#: the pad id: the right ones are ``_pytorch_masks``'
_MASK_SLIPS = (
    Slip("causal inverted", Diagnosis(
        "its tgt_mask hides the past and shows the future: PyTorch's masks are the opposite of ours, True (or -inf) "
        "means HIDDEN.", "Pass a mask that is True ABOVE the diagonal: ~your_causal_mask, or "
        "nn.Transformer.generate_square_subsequent_mask(L)."),
        lambda src, length, pad: {"tgt_mask": ~_causal_hidden(length)}),
    Slip("memory padding inverted", Diagnosis(
        "its memory_key_padding_mask hides the real source positions and shows the padding: in PyTorch True means "
        "HIDDEN.", "Pass (src == pad_id)."), lambda src, length, pad: {"memory_key_padding_mask": src != pad}),
)

SLIPS = (*_FUSED_SLIPS, *_COPIED_SLIPS, *_NORM_SLIPS, *_MASK_SLIPS)


def _pytorch_masks(src: torch.Tensor, length: int, pad: int) -> dict[str, torch.Tensor]:
    return {"tgt_mask": _causal_hidden(length).to(src.device), "memory_key_padding_mask": src == pad}


class _TorchCopy(nn.Module):
    """A copy into nn.Transformer, right or making one known slip (the slips' answers, for the generated tests)."""

    def __init__(self, model: nn.Module, slip: Slip | None = None):
        super().__init__()
        self.d_model, self.pad_id, self.slip = model.d_model, model.pad_id, slip
        for part in ("src_embed", "tgt_embed", "positional_encoding", "generator"):  # the parts around the stacks
            setattr(self, part, copy.deepcopy(getattr(model, part)))
        layer = model.encoder_layers[0]
        self.core = nn.Transformer(model.d_model, layer.self_attn.num_heads, len(model.encoder_layers),
                                   len(model.decoder_layers), layer.feed_forward.linear1.out_features,
                                   batch_first=True, dropout=model.positional_encoding.dropout.p)
        self.core.encoder.norm = self.core.decoder.norm = None
        with torch.no_grad():
            for ours, theirs in zip(model.encoder_layers, self.core.encoder.layers):
                self._fill(ours, theirs, {"self_attn": "self_attn"}, 2)
            for ours, theirs in zip(model.decoder_layers, self.core.decoder.layers):
                self._fill(ours, theirs, {"self_attn": "self_attn", "cross_attn": "multihead_attn"}, 3)

    def _slipped(self, table: tuple, right: Any, *inputs: Any) -> Any:
        return self.slip.replay(None, *inputs) if self.slip in table else right

    def _fill(self, ours: nn.Module, theirs: nn.Module, attentions: dict[str, str], norms: int) -> None:
        for mine, torch_name in attentions.items():
            a, t = getattr(ours, mine), getattr(theirs, torch_name)
            w = [getattr(a, n).weight for n in ("W_q", "W_k", "W_v")]
            t.in_proj_weight.copy_(self._slipped(_FUSED_SLIPS, torch.cat(w), w))
            t.in_proj_bias.copy_(torch.cat([getattr(a, n).bias for n in ("W_q", "W_k", "W_v")]))
            t.out_proj.weight.copy_(self._slipped(_COPIED_SLIPS, a.W_o.weight, a.W_o.weight))
            t.out_proj.bias.copy_(a.W_o.bias)
        for lin in ("linear1", "linear2"):
            getattr(theirs, lin).load_state_dict(getattr(ours.feed_forward, lin).state_dict())
        held = {i: getattr(ours, f"norm{i}") for i in range(1, norms + 1)}
        if self.slip in _NORM_SLIPS:  # the first other norm holds the slip's
            j = int(self.slip.name[-1])
            if j <= norms:
                held[1 if j != 1 else 2] = self.slip.replay(None, ours)
        for i, norm in held.items():
            getattr(theirs, f"norm{i}").load_state_dict(norm.state_dict())

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        scale = math.sqrt(self.d_model)
        x = self.positional_encoding(self.src_embed(src) * scale)  # (B, L_src, d_model)
        y = self.positional_encoding(self.tgt_embed(tgt) * scale)  # (B, L_tgt, d_model)
        right = _pytorch_masks(src, tgt.size(1), self.pad_id)
        masks = {**right, **self._slipped(_MASK_SLIPS, {}, src, tgt.size(1), self.pad_id)}
        out = self.core(x, y, src_key_padding_mask=src == self.pad_id, tgt_key_padding_mask=tgt == self.pad_id,
                        **masks)
        return self.generator(out)


def _as_answer(slip: Slip) -> Callable:
    """The slip made into a learner's to_torch_transformer (for the generated catalogue tests)."""
    def slipped_to_torch_transformer(model: nn.Module) -> nn.Module:
        return _TorchCopy(model, slip)

    return slipped_to_torch_transformer


def _check_to_torch_transformer(check: Check, to_torch_transformer: Callable) -> None:
    check.callable_(to_torch_transformer, "to_torch_transformer")
    model = CourseTransformer(11, _PAD)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    modes = [m.training for m in model.modules()]
    theirs = check.call(to_torch_transformer, model, what="to_torch_transformer", hint=(
        "If a copy fails on a size, build nn.Transformer with your model's own sizes, read from it: "
        "d_model=model.d_model, nhead=your attention's num_heads, dim_feedforward=your "
        "feed_forward.linear1.out_features (d_ff), the numbers of encoder and decoder layers, batch_first=True."))
    if [m.training for m in model.modules()] != modes:
        check.fail("to_torch_transformer changed the mode of your model (model.train() or model.eval() on it): "
                   "leave your model as it was given, and set the mode of the new module only.")
    if not isinstance(theirs, nn.Module):
        check.fail(f"to_torch_transformer should return an nn.Module, but it returned {describe(theirs)}.")
    if any(not torch.equal(before[k], v) for k, v in model.state_dict().items()):
        check.fail("to_torch_transformer changed the weights of your model: copy them into the new module "
                   "(`.copy_()` on the NEW parameters, inside torch.no_grad()), never the other way round.")

    check.ok("returns an nn.Module and leaves your model unchanged")

    enc, dec = _copied_layers(check, model, theirs)
    _shares_nothing(check, model, theirs)
    src, tgt, expected, got, inputs, seen = _traced_run(check, model, theirs, enc, dec)
    if (len(seen["their_enc"]), len(seen["their_dec"])) != (LAYERS, LAYERS):
        check.fail(
            f"The module's forward does not compute with the PyTorch layers it holds: in one call its "
            f"nn.TransformerEncoderLayers ran {len(seen['their_enc'])} times and its nn.TransformerDecoderLayers "
            f"{len(seen['their_dec'])} times, where each of the {LAYERS} + {LAYERS} should run once. Run the "
            f"embeddings and positional encoding, then nn.Transformer, then your generator; not a copy of your model."
        )
    _first_mismatch(check, src, tgt, expected, got, inputs, seen)
    _input_dropout(check, theirs, enc[0], dec[0])
    _layers_drop(check, theirs, enc, dec)
    _trainable(check, theirs, src, tgt)
    stages.module_on_gpu(check, theirs.eval(), src, tgt, what="to_torch_transformer module", advice=(
        "Create the masks on the device of the tokens: `nn.Transformer.generate_square_subsequent_mask(L, "
        "device=tgt.device)`, `torch.ones(L, L, dtype=torch.bool, device=tgt.device)`."))


_BATCH_FIRST = ("Our tensors are (B, L, d_model): build nn.Transformer with batch_first=True, or it reads the first "
                "axis as the positions.")


def _input_dropout(check: Check, theirs: nn.Module, first_enc: nn.Module, first_dec: nn.Module) -> None:
    """In training mode the first layers' inputs show the positional encoding's dropout, at the model's rate."""
    g = generator(9)
    src = torch.randint(1, SRC_VOCAB, (16, 12), generator=g)  # no padding: every entry counts
    tgt = torch.randint(1, TGT_VOCAB, (16, 10), generator=g)
    inputs: dict[bool, dict[str, torch.Tensor]] = {True: {}, False: {}}  # training? -> side -> first layer's input
    for training in (False, True):
        def remember(module, args, key, seen=inputs[training]):  # returns None: the layer's inputs stay as they are
            seen.setdefault(key, _dense(args[0]))

        handles = [layer.register_forward_pre_hook(lambda m, args, key=key: remember(m, args, key))
                   for key, layer in (("encoder", first_enc), ("decoder", first_dec))]
        try:
            theirs.train(training)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*nested tensors.*")
                check.call(theirs, src, tgt, hint=_BATCH_FIRST,
                           what="to_torch_transformer module's forward(src, tgt)" + ", in training mode" * training)
        finally:
            theirs.eval()
            for h in handles:
                h.remove()
    for side in ("encoder", "decoder"):
        dropped, plain = inputs[True].get(side), inputs[False].get(side)
        if not (isinstance(dropped, torch.Tensor) and isinstance(plain, torch.Tensor) and dropped.shape == plain.shape):
            continue
        where = f"the embeddings plus positions (the input of the first {side} layer)"
        pattern = drop_pattern(dropped, plain)
        problem = dropout_problem(pattern, DROPOUT, where, "copy") if pattern.exact else (
            f"In training mode something other than a dropout changes {where} in your copy.")
        if problem:
            check.fail(f"{problem}\nThe positional encoding's dropout (`model.positional_encoding.dropout`, "
                       f"p={DROPOUT} here) must act on the embeddings plus positions in the copy too: reuse a copy of "
                       f"your model's positional_encoding module (its dropout comes with it), rather than adding `pe` "
                       f"by hand or building a new nn.Dropout.")
    check.ok(f"in training mode, the embeddings plus positions are dropped at your model's rate ({DROPOUT})")


def _layers_drop(check: Check, theirs: nn.Module, enc: list, dec: list) -> None:
    """In training mode every dropout of the nn.Transformer layers runs and drops at the model's rate (measured
    on its input and output): a copy whose forward switches its layers to eval mode trains without it."""
    g = generator(10)
    src = torch.randint(1, SRC_VOCAB, (16, 12), generator=g)  # no padding: every entry counts
    tgt = torch.randint(1, TGT_VOCAB, (16, 10), generator=g)
    places = [(f"the {side} layer {i}'s `{name}`", module) for side, layers in (("encoder", enc), ("decoder", dec))
              for i, layer in enumerate(layers) for name, module in layer.named_modules()
              if isinstance(module, nn.Dropout)]
    seen: dict[str, tuple] = {}

    def remember(module: nn.Module, args: tuple, out: Any, key: str) -> None:  # None: the output stays as it is
        seen.setdefault(key, (module.training, _dense(args[0]).detach().clone(), _dense(out).detach().clone()))

    handles = [module.register_forward_hook(lambda m, args, out, key=key: remember(m, args, out, key))
               for key, module in places]
    try:
        theirs.train()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*nested tensors.*")
            check.call(theirs, src, tgt, hint=_BATCH_FIRST, what="to_torch_transformer module's forward(src, tgt), "
                                                                "in training mode")
    finally:
        theirs.eval()
        for h in handles:
            h.remove()
    fix = ("Lesson 07 trains the copy (its training steps are timed against your model's), so in training mode its "
           "layers must drop as your model's do. Leave the mode to the caller: no `.eval()` or `.train(False)` "
           "inside forward.")
    for where, _ in places:
        if where not in seen or not seen[where][0]:
            check.fail(f"In training mode (`copy.train()`), {where} does not run as a training-mode dropout: your "
                       f"copy's forward switches its nn.Transformer layers to eval mode (or skips them). {fix}")
        _, before, after = seen[where]
        pattern = drop_pattern(after, before) if before.shape == after.shape else None
        problem = dropout_problem(pattern, DROPOUT, where, "copy") if pattern is not None and pattern.exact else ""
        if problem:
            check.fail(f"{problem}\n{fix}")
    if places:
        check.ok(f"in training mode, the dropouts of the nn.Transformer layers drop at your model's rate ({DROPOUT})")


def _shares_nothing(check: Check, model: nn.Module, theirs: nn.Module) -> None:
    """The returned module holds copies: no parameter or buffer shares memory with the learner's model."""
    ours = {t.untyped_storage().data_ptr(): name for name, t in (*model.named_parameters(), *model.named_buffers())}
    shared = [ours[t.untyped_storage().data_ptr()] for _, t in (*theirs.named_parameters(), *theirs.named_buffers())
              if t.untyped_storage().data_ptr() in ours]
    if shared:
        shown = ", ".join(f"`{n}`" for n in dict.fromkeys(shared[:4]))
        check.fail(f"The module shares {len(set(shared))} tensor{'s' * (len(set(shared)) > 1)} with your model ({shown}...): it holds your model's "
                   f"own tensors, not copies, so one optimizer step on it would change your model too. Copy them: "
                   f"`copy.deepcopy(model.src_embed)` for the modules you keep around nn.Transformer, and `.copy_()` "
                   f"into PyTorch's own parameters.")
    check.ok("holds copies of your tensors: none is shared with your model")


def _trainable(check: Check, theirs: nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> None:
    """Lesson 07 trains the copy (it times training steps of it): a backward pass gives every parameter a gradient."""
    frozen = [name for name, p in theirs.named_parameters() if not p.requires_grad]
    if frozen:
        check.fail(f"{len(frozen)} parameters of the module do not require gradients ({', '.join(frozen[:3])}...): "
                   f"lesson 07 trains the copy (its training steps are timed against your model's), and an "
                   f"optimizer would never change these. Leave requires_grad as it is (no `requires_grad_(False)`).")
    was = theirs.training
    theirs.eval()  # the same values every time; gradients flow in eval mode too
    try:
        with torch.enable_grad():
            out = check.call(theirs, src, tgt, what="the module's forward")
            logits = out[0] if isinstance(out, tuple) else out
            if not isinstance(logits, torch.Tensor) or not logits.requires_grad:
                check.fail("With gradients on, the module's logits do not require gradients: its forward runs under "
                           "torch.no_grad() (or detaches its result). Lesson 07 trains the copy, which needs a "
                           "backward pass through it: compute the logits with gradients, as your model does.")
            params = [p for p in theirs.parameters() if p.requires_grad]
            grads = torch.autograd.grad(logits.float().square().mean(), params, allow_unused=True)
    finally:
        theirs.train(was)
    unused = [name for (name, p), g in zip(((n, p) for n, p in theirs.named_parameters() if p.requires_grad), grads)
              if g is None]
    if unused:
        check.fail(f"No gradient reaches {len(unused)} parameters of the module ({', '.join(unused[:3])}...): its "
                   f"forward does not compute with them. Lesson 07 trains the copy, so every parameter it holds "
                   f"should take part in computing the logits.")
    check.ok("can be trained: a backward pass through it gives every parameter a gradient (lesson 07 trains it)")


def _copied_layers(check: Check, model: nn.Module, theirs: nn.Module) -> tuple[list, list]:
    """PyTorch's own layers, each holding the weights of the learner's layer; no extra final norms."""
    enc = [m for m in theirs.modules() if isinstance(m, nn.TransformerEncoderLayer)]
    dec = [m for m in theirs.modules() if isinstance(m, nn.TransformerDecoderLayer)]
    if len(enc) != LAYERS or len(dec) != LAYERS:
        check.fail(
            f"The module should compute with PyTorch's own layers: {LAYERS} nn.TransformerEncoderLayer and "
            f"{LAYERS} nn.TransformerDecoderLayer for a model of {LAYERS} + {LAYERS} layers (nn.Transformer "
            f"holds them); it has {len(enc)} and {len(dec)}."
        )
    for i, (ours, yours) in enumerate(zip(model.encoder_layers, enc)):
        problem = _layer_problem(f"encoder layer {i}", ours, yours, ["self_attn"], 2, DROPOUT)
        if problem:
            check.fail(f"Encoder layer {i} of the copy differs from your model's: {problem}")
    for i, (ours, yours) in enumerate(zip(model.decoder_layers, dec)):
        problem = _layer_problem(f"decoder layer {i}", ours, yours, ["self_attn", "cross_attn"], 3, DROPOUT)
        if problem:
            check.fail(f"Decoder layer {i} of the copy differs from your model's: {problem}")
    check.ok("each PyTorch layer holds the weights of your layer (fused in_proj_weight = [W_q; W_k; W_v])")
    for stack in [m for m in theirs.modules() if isinstance(m, (nn.TransformerEncoder, nn.TransformerDecoder))]:
        if isinstance(stack.norm, nn.LayerNorm):
            which = "encoder" if isinstance(stack, nn.TransformerEncoder) else "decoder"
            check.fail(
                f"The {which} stack of your module ends with a final LayerNorm: nn.Transformer adds one to each "
                f"stack (for pre-LN models). The paper's post-LN layers end with their own LayerNorm, and your "
                f"model has no final one: set `transformer.encoder.norm = None` and `transformer.decoder.norm = None`."
            )
    return enc, dec


def _traced_run(check: Check, model: nn.Module, theirs: nn.Module, enc: list, dec: list) -> tuple:
    """Both models on a padded batch, with every layer's input and output recorded."""
    g = generator(5)
    src = torch.randint(1, SRC_VOCAB, (3, 6), generator=g)
    src[1, 4:], src[2, 2:] = _PAD, _PAD
    tgt = torch.randint(1, TGT_VOCAB, (3, 5), generator=g)
    tgt[0, 3:] = _PAD
    seen: dict[str, list[torch.Tensor]] = {"ours_enc": [], "ours_dec": [], "their_enc": [], "their_dec": []}
    handles = []
    inputs: dict[str, Any] = {}  # each first layer's input; their_dec_masks: the masks decoder layer 0 received
    masks: dict[str, Any] = {}
    for key, layer in (("ours_enc", model.encoder_layers[0]), ("their_enc", enc[0]), ("ours_dec", model.decoder_layers[0]),
                       ("their_dec", dec[0])):
        def remember(module, args, key=key):
            if args and key not in inputs:
                inputs[key] = _dense(args[0])  # (returns None: the layer's inputs stay as they are)

        handles.append(layer.register_forward_pre_hook(remember))

    def masks_of(module, args, kwargs):  # the masks decoder layer 0 receives, by keyword (returns None)
        masks.update(kwargs)

    handles.append(dec[0].register_forward_pre_hook(masks_of, with_kwargs=True))
    for key, layers in (("ours_enc", model.encoder_layers), ("ours_dec", model.decoder_layers),
                        ("their_enc", enc), ("their_dec", dec)):
        for layer in layers:
            handles.append(layer.register_forward_hook(lambda m, a, out, key=key: seen[key].append(_dense(out))))
    try:
        theirs.eval()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*nested tensors.*")  # PyTorch's note on its fast path
            expected = model(src, tgt)  # (B, L_tgt, V)
            got = check.call(theirs, src, tgt, what="to_torch_transformer module's forward(src, tgt)", hint=_BATCH_FIRST)
    finally:
        for h in handles:
            h.remove()
    got = check.tensor(got, "the logits of the module", shape=tuple(expected.shape), finite=False)
    inputs["their_dec_masks"] = masks
    return src, tgt, expected, got, inputs, seen


def _hidden(mask: Any) -> torch.Tensor | None:
    """Where a PyTorch attention mask hides (True for bool masks, -inf for float ones); None when absent."""
    if not isinstance(mask, torch.Tensor):
        return None
    return mask if mask.dtype == torch.bool else mask.detach() < -1e4


def _mask_problem(kwargs: dict, src: torch.Tensor, length: int) -> str:
    """Names the mask that decoder layer 0 received wrongly (PyTorch's convention: True or -inf means hidden)."""
    future = _causal_hidden(length)
    tgt_mask = _hidden(kwargs.get("tgt_mask"))
    if tgt_mask is None and not kwargs.get("tgt_is_causal"):
        return ("it receives no tgt_mask, so every target position sees the future. Pass a causal mask: "
                "tgt_mask = nn.Transformer.generate_square_subsequent_mask(L) (or a bool mask True above the diagonal).")
    received = {"tgt_mask": tgt_mask, "memory_key_padding_mask": _hidden(kwargs.get("memory_key_padding_mask"))}
    slip = matching_slip(_MASK_SLIPS, lambda s: s.replay(None, src, length, _PAD),
                         lambda wrong: all(_same_mask(received[key], mask) for key, mask in wrong.items()))
    if slip is not None:
        return str(slip.says)
    if tgt_mask is not None and tgt_mask.shape[-2:] == future.shape and \
            not torch.equal(tgt_mask.reshape(-1, length, length)[0], future):
        return "its tgt_mask is not the causal mask: it should hide exactly the positions above the diagonal."
    if received["memory_key_padding_mask"] is None:
        return ("it receives no memory_key_padding_mask, so the cross-attention reads the source's padding. Pass "
                "memory_key_padding_mask = (src == pad_id), as for the encoder's src_key_padding_mask.")
    return ""


def _same_mask(received: torch.Tensor | None, mask: torch.Tensor) -> bool:
    """A mask PyTorch received (True = hidden) hides what ``mask`` hides: (L, L), (B * H, L, L) or (B, L_src)."""
    if received is None or received.shape[-mask.dim():] != mask.shape:
        return False
    return torch.equal(received.reshape(-1, *mask.shape)[0] if mask.dim() == 2 and received.dim() > 2 else received,
                       mask)


def _first_mismatch(check: Check, src: torch.Tensor, tgt: torch.Tensor, expected: torch.Tensor, got: torch.Tensor,
                    inputs: dict, seen: dict) -> None:
    """Equal logits pass; otherwise name the first piece (input, encoder, decoder, final norm) that differs."""
    real_src, real_tgt = src != _PAD, tgt != _PAD
    if close_enough(got[real_tgt], expected[real_tgt]):
        check.ok("its logits equal your model's to 1e-5 (eval mode, padded source and target)")
        return
    polarity = ("PyTorch's masks are the opposite of ours: True means HIDDEN. Pass src_key_padding_mask = "
                "memory_key_padding_mask = (src == pad_id), and a causal tgt_mask that is True ABOVE the diagonal "
                "(or nn.Transformer.generate_square_subsequent_mask(L)).")
    for side, real in (("enc", real_src), ("dec", real_tgt)):
        a, b = inputs.get(f"ours_{side}"), inputs.get(f"their_{side}")
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and not close_enough(_real(b, real), a[real]):
            which = "source" if side == "enc" else "target"
            check.fail(
                f"The input of the first {'encoder' if side == 'enc' else 'decoder'} layer differs from yours: "
                f"it should be the {which} embeddings times sqrt(d_model), plus the positional encoding (use your "
                f"model's own embeddings and positional_encoding).\n"
                f"  expected (first values): {fmt_values(a[real])}\n  actual   (first values): {fmt_values(_real(b, real))}"
            )
    for i, (a, b) in enumerate(zip(seen["ours_enc"], seen["their_enc"])):
        if isinstance(b, torch.Tensor) and close_enough(_real(b, real_src), a[real_src]):
            continue
        if i == 0 and seen["their_enc"] and not bool(torch.isfinite(seen["their_enc"][0]).all()):
            check.fail(f"Encoder layer 0 gives NaN: every key of some sentence is hidden. {polarity}")
        check.fail(
            f"The output of encoder layer {i} differs from yours (at the real source positions), although its "
            f"weights and its input match: check the source padding mask. {polarity}"
        )
    if seen["their_enc"] and len(seen["their_dec"]) and not close_enough(
            _real(seen["their_dec"][0], real_tgt), seen["ours_dec"][0][real_tgt]):
        named = _mask_problem(inputs.get("their_dec_masks") or {}, src, tgt.shape[1])
        if named:
            check.fail(f"The encoder and the decoder's input agree with yours, but decoder layer 0 does not: {named}")
        check.fail(
            "The encoder and the decoder's input agree with yours, but decoder layer 0 does not: check the "
            "memory it receives (the encoder's output) and the masks: the causal tgt_mask, and "
            "memory_key_padding_mask for the source. " + polarity
        )
    for i, (a, b) in enumerate(zip(seen["ours_dec"], seen["their_dec"])):
        if not close_enough(_real(b, real_tgt), a[real_tgt]):
            check.fail(f"Decoder layer {i} differs from yours although decoder layer 0 agrees: check the memory and "
                       f"the masks it receives. " + polarity)
    check.fail(
        "Every layer agrees with yours, but the logits do not: check what comes after the last decoder layer. "
        "nn.Transformer's decoder ends with a LayerNorm of its own (set `transformer.decoder.norm = None`), and "
        "the output projection must be your generator.\n"
        f"  expected (first values): {fmt_values(expected[real_tgt])}\n  actual   (first values): "
        f"{fmt_values(got[real_tgt])}"
    )


TO_TORCH_TRANSFORMER = Exercise(
    "to_torch_transformer", _check_to_torch_transformer,
    oracle="the learner's own model (the checker's stand-in with lesson 05's layout), layer by layer through hooks",
    cases="a padded batch of 3 sources and targets in eval mode; batches without padding in training mode, to "
          "measure the dropouts; a backward pass; the copy on a pretend GPU",
    slips=SLIPS, answer=_as_answer)

__all__ = ["check_to_torch_transformer"]
