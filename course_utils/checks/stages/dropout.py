"""Stages about dropout: off in eval mode, on in training mode, measured at each place it belongs, and settable
through the contract's dropout modules.
"""


from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch
from torch import nn

from .._core import RTOL, Check, Raised, close_enough
from .measuring import drop_pattern, dropout_problem, mask_problems, seeded


def dropout_set_through(check: Check, build: Callable[[float], nn.Module], paths: Sequence[str], inputs: tuple,
                        owner: str, where: str, sublayers: Sequence[str] = ()) -> None:
    """Built with dropout 0.0, then `.p` set on the named Dropout modules: training must become random, and at
    `.p = 1` what those modules drop must no longer reach the output (``sublayers``: parts, or ``""`` for the
    input itself, whose contribution goes through them alone).

    Lesson 08 applies dropout only where the paper puts it this way (``inner_dropout=False``): it builds the
    model without dropout and sets the rate of the contract's ``dropout`` modules afterwards.
    """
    module = build(0.0)
    targets = [module.get_submodule(path) for path in paths]
    if not all(isinstance(t, nn.Dropout) for t in targets):
        return  # the contract's kinds are checked elsewhere
    shown = ", ".join(f"`{p}`" for p in paths)
    advice = (f"Lesson 08 builds your model without dropout and then sets `{paths[0]}.p`, to put dropout only where "
              f"the paper does. Apply `self.dropout` itself (or read its `.p`).")
    for target in targets:
        target.p = 0.5
    module.train()
    first = check.attempt(module, *inputs, what=f"{owner}.forward")
    second = check.attempt(module, *inputs, what=f"{owner}.forward")
    if isinstance(first, Raised) or isinstance(second, Raised):
        return
    first, second = (o[0] if isinstance(o, tuple) else o for o in (first, second))
    if isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor) and torch.equal(first, second):
        check.fail(
            f"Your {owner}, built with dropout=0.0, stays deterministic in training mode after the rate of {shown} "
            f"was set to 0.5: the dropout it applies {where} is not {shown if len(paths) == 1 else 'those modules'} "
            f"(another nn.Dropout, built with the rate of 0.0, does the work?). " + advice)
    for target in targets:  # at p = 1 each part's contribution is dropped whole: changing it changes nothing
        target.p = 1.0
    base = check.attempt(module, *inputs, what=f"{owner}.forward")
    base = base[0] if isinstance(base, tuple) else base
    for part in sublayers:
        changed = build(0.0)
        if isinstance(check.attempt(changed.load_state_dict, module.state_dict(), what=f"{owner}.load_state_dict"),
                      Raised):
            return  # a state that does not load back is not this stage's business
        for path in paths:
            changed.get_submodule(path).p = 1.0
        changed.train()
        moved = [x + 1.0 if part == "" and isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        with torch.no_grad():
            for parameter in (changed.get_submodule(part).parameters() if part else ()):
                parameter.add_(1.0)
        out = check.attempt(changed, *moved, what=f"{owner}.forward")
        out = out[0] if isinstance(out, tuple) else out
        if (isinstance(base, torch.Tensor) and isinstance(out, torch.Tensor) and base.shape == out.shape
                and not torch.allclose(base, out, atol=1e-5, equal_nan=True)):
            check.fail(
                f"Your {owner}, built with dropout=0.0 and then given a rate of 1 in {shown} (every entry dropped), "
                f"still passes " + (f"the output of `{part}`" if part else "its input") + " on in training mode: "
                f"some of the dropout it applies {where} is not {shown} (a second nn.Dropout, built with the rate "
                f"of 0.0, or F.dropout with a rate stored at construction?). " + advice)
    check.ok(f"applies its dropout through {shown}: a rate set there later takes effect (lesson 08 sets "
             f"the rates of lessons 03 and 05's modules so)")


def eval_deterministic(check: Check, module: nn.Module, run: Callable[[nn.Module], torch.Tensor], what: str,
                       p: float) -> torch.Tensor:
    """In eval mode two calls on the same input agree exactly; returns the output."""
    module.eval()
    first, second = run(module), run(module)
    if not close_enough(first, second, atol=0, rtol=RTOL):
        check.fail(
            f"In eval mode your {what} gives different outputs for the same input (built with dropout={p}): "
            f"dropout is still active, or something else random runs inside.\nDropout must switch off in eval "
            f"mode. Likely cause: `F.dropout(x, p)` without `training=self.training`, or a fixed rate; use an "
            f"nn.Dropout(dropout) module created in __init__ with the constructor's `dropout` argument."
        )
    check.ok("is deterministic in eval mode")
    return first


def train_random(check: Check, module: nn.Module, run: Callable[[nn.Module], torch.Tensor], what: str, p: float,
                 fix: str = "Create nn.Dropout(dropout) in __init__ and apply it where the exercise says.") -> torch.Tensor:
    """In training mode two calls on the same input differ (dropout acts); returns the first output."""
    module.train()
    first, second = run(module), run(module)
    if close_enough(first, second, atol=0, rtol=RTOL):
        check.fail(f"In training mode your {what} gives the same output twice for the same input, although it was "
                   f"built with dropout={p}: dropout is not applied.\n{fix}")
    _backward_runs(check, module, first, what)
    check.ok("applies dropout in training mode, and a training step's backward pass runs through it")
    return first


def _backward_runs(check: Check, module: nn.Module, out: Any, what: str) -> None:
    """A loss on a training-mode output can be backpropagated (an in-place dropout or ReLU breaks autograd)."""
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        return
    done = check.attempt(lambda: out.sum().backward(), what=f"the backward pass through your {what}")
    module.zero_grad(set_to_none=True)
    if isinstance(done, Raised):
        text = str(done.exception).strip().splitlines()
        inplace = any(word in str(done.exception) for word in ("inplace", "in-place"))
        check.fail(f"In training mode, a loss on the output of your {what} cannot be backpropagated: "
                   f"{type(done.exception).__name__}: {text[0] if text else ''}\n"
                   + ("Likely cause: an in-place operation on a tensor that autograd keeps for the backward pass: "
                      "`nn.Dropout(..., inplace=True)` or `nn.ReLU(inplace=True)`, `.relu_()`, `x += ...` or "
                      "`x[...] = ...` on an intermediate result. Use the ordinary, out-of-place versions."
                      if inplace else "Training would stop at its first step: it must run in training mode too."))


@dataclasses.dataclass
class Site:
    """A place where the exercise applies dropout, observed in one training-mode call."""

    where: str  # "the attention weights"
    observed: torch.Tensor  # the tensor as it came out of the dropout
    reference: torch.Tensor  # the same tensor without dropout
    axes: dict[str, int] = dataclasses.field(default_factory=dict)  # named axes, for a mask shared along one


def dropout_measured(check: Check, observe: Callable[[], list[Site] | None], p: float, what: str, fix: str = "",
                     not_exact: str | Callable[[list[Site]], None] = "") -> bool:
    """Measure the dropout at each site over three calls (seeded, unseeded, seeded again); fail on what is wrong.

    ``observe()`` runs the learner's module once in training mode and returns its sites (None: the layout
    could not be observed, nothing is judged, and the PASSED list says so). A site whose observed tensor is not its reference with
    entries zeroed and the rest rescaled fails with ``not_exact`` when it is a message; a callable gets the
    sites to name the cause; else the stage ends silently (the values were judged elsewhere). Returns whether
    the dropout was measured.
    """
    runs = [seeded(seed, observe) for seed in (21, None, 21)]
    if any(r is None for r in runs):  # said, not dropped silently: a PASSED list shows what was not measured
        check.ok(f"(the dropout of {what} could not be followed place by place in a traced call, so it was not "
                 f"measured there; the other dropout checks judged it as a whole)")
        return False
    measured = []
    for sites in runs:
        patterns = [drop_pattern(site.observed, site.reference) for site in sites]
        if not all(pattern.exact for pattern in patterns):
            if callable(not_exact):
                not_exact(sites)
            elif not_exact:
                check.fail(not_exact)
            return False
        measured.append([(pattern, site.axes, site.where) for pattern, site in zip(patterns, sites)])
        for pattern, site in zip(patterns, sites):
            problem = dropout_problem(pattern, p, site.where, what)
            if problem:
                check.fail(problem + (f"\n{fix}" if fix else ""))
    problem = mask_problems(measured, what)
    if problem:
        check.fail(problem)
    places = " and ".join(dict.fromkeys(site.where for site in runs[0]))
    check.ok(f"in training mode drops about {round(100 * p)}% of {places} (measured) and rescales the rest by "
             f"1 / (1 - p), with a fresh mask for every entry and every call, drawn from torch's global generator")
    return True


# --------------------------------------------------------------------------
# An attention module's dropout, measured on its weights (moved here from the multi-head checker, issue 30).

import math  # noqa: E402  (kept with the stage it serves)

from .._core import generator  # noqa: E402

_LOOSE = {"atol": 1e-4, "rtol": 1e-3}  # the designed values read the weights back in float32
_PROJECTIONS = ("W_q", "W_k", "W_v", "W_o")


def random_attention_weights(g: torch.Generator, d_model: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(weight, bias) for each of lesson 04's projections, drawn from ``g``: scores of a useful spread."""
    scale = 1.5 / math.sqrt(d_model)
    return {name: (torch.randn(d_model, d_model, generator=g) * scale, torch.randn(d_model, generator=g) * 0.2)
            for name in _PROJECTIONS}


def attention_weights_oracle(weights: dict, num_heads: int, query: torch.Tensor, key: torch.Tensor,
                             mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-head attention weights (B, H, L_q, L_k) of nn.MultiheadAttention carrying ``weights``, in float64;
    ``mask`` in the course's convention (True = may attend), (B, 1, 1 or L_q, L_k)."""
    d_model = query.shape[-1]
    mha = nn.MultiheadAttention(d_model, num_heads, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([weights[n][0] for n in ("W_q", "W_k", "W_v")]))
        mha.in_proj_bias.copy_(torch.cat([weights[n][1] for n in ("W_q", "W_k", "W_v")]))
        kwargs: dict[str, Any] = {}
        if mask is not None:
            full = mask[:, 0].expand(query.shape[0], query.shape[1], key.shape[1])
            kwargs["attn_mask"] = (~full).repeat_interleave(num_heads, dim=0)
        _, attn = mha.eval()(query.double(), key.double(), key.double(), need_weights=True,
                             average_attn_weights=False, **kwargs)
    return attn


def designed_values(B: int, L_k: int, D: int, H: int) -> torch.Tensor:
    """Values whose projection (W_v = identity) gives head h, key k the vector e_k + e_{L_k}: the output reads the weights."""
    d_k = D // H
    v = torch.zeros(B, L_k, H, d_k)
    v[:, torch.arange(L_k), :, torch.arange(L_k)] = 1.0
    v[..., L_k] = 1.0
    return v.reshape(B, L_k, D)


def read_weights(out: torch.Tensor, L_k: int, H: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From an output computed with the designed values: (weights (B, H, L_q, L_k), their row sums, the rest)."""
    B, L_q, D = out.shape
    heads = out.detach().double().reshape(B, L_q, H, D // H).transpose(1, 2)  # (B, H, L_q, d_k)
    return heads[..., :L_k], heads[..., L_k], heads[..., L_k + 1:]


def weights_read_back(dropped: torch.Tensor, sums: torch.Tensor, rest: torch.Tensor) -> bool:
    """Whether the output was the designed values averaged by the (dropped) weights, and nothing else."""
    return close_enough(sums, dropped.sum(-1), **_LOOSE) and close_enough(rest, torch.zeros_like(rest), **_LOOSE)


def _designed_state(attention: nn.Module, d_model: int, g: torch.Generator) -> tuple[dict, dict]:
    """Weights that make the attention's output read its weights back: (state for functional_call, float64 copies)."""
    weights = random_attention_weights(g, d_model)
    identity = (torch.eye(d_model), torch.zeros(d_model))
    weights["W_q"] = (weights["W_q"][0] * 0.5, weights["W_q"][1])
    weights["W_v"], weights["W_o"] = identity, identity
    state, used = {}, {}
    for name, (w, b) in weights.items():
        layer = getattr(attention, name)
        state[f"{name}.weight"] = w
        if layer.bias is not None:
            state[f"{name}.bias"] = b
        used[name] = (w.double(), b.double() if layer.bias is not None else torch.zeros(d_model, dtype=torch.float64))
    return state, used


def attention_dropout(check: Check, attention: nn.Module, d_model: int, num_heads: int, p: float, owner: str,
                      fix: str) -> None:
    """The rate at which an attention module (that passes check_multi_head_attention) drops its weights in training.

    For the layers, which pass their ``dropout`` on to their attention: measured through ``functional_call``
    with designed weights (the values spell out each key's weight), on the layer's own module (left as it was).
    """
    g = generator(31)
    L_k = d_model // num_heads - 1  # the designed values spell out each key's weight in one feature of the head
    B, L_q = 16, 12
    state, used = _designed_state(attention, d_model, g)
    if L_k < 2:
        return
    q, k = torch.randn(B, L_q, d_model, generator=g), torch.randn(B, L_k, d_model, generator=g)
    v = designed_values(B, L_k, d_model, num_heads)
    was = attention.training
    attention.train()
    out = check.attempt(lambda: torch.func.functional_call(attention, state, (q, k, v)), what=owner)
    attention.train(was)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (B, L_q, d_model):
        return  # judged by its own checker
    dropped, sums, rest = read_weights(out, L_k, num_heads)
    if not weights_read_back(dropped, sums, rest):
        return
    pattern = drop_pattern(dropped, attention_weights_oracle(used, num_heads, q, k))
    if not pattern.exact:
        return
    if pattern.rate == 0:
        check.fail(f"In training mode (built with dropout={p}) {owner} never drops its attention weights: it was "
                   f"built without the dropout rate. {fix}")
    problem = dropout_problem(pattern, p, "its attention weights", owner)
    if problem:
        check.fail(f"{problem}\n{fix}")
    check.ok(f"{owner} drops its attention weights at the rate the layer was built with")
