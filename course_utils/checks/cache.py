"""Checker for lesson 07's decode_step: one step of incremental decoding with a key/value cache.

``decode_step(model, y_last, memory, src, cache) -> (logits, cache)`` is compared with full recomputation on
the checker's own model, with the course's layout (lesson 05's names, lesson 04's W_q/W_k/W_v/W_o, lesson 03's
positional_encoding.pe), its recomputation written with PyTorch's own F.scaled_dot_product_attention. Forward
hooks on every projection count the positions each one sees per step, so that a cache that is not used, or a
projection run again over the whole prefix, is named. Caches are reordered between steps, as beam search does.

Known slips are one table of records, :data:`SLIPS`: each a flag of ``_slipped_step`` (decode_step written out,
with that slip made) and the message that names it. When a step's logits differ, every slip is replayed on the
same inputs and named if it gives the learner's logits; else the first linear map whose input departs from
model.decode's is found, and a slip that feeds it the learner's input is named, or where it goes wrong is said.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any, Callable

import torch
from torch import nn

from . import stages
from .stages import gpu as _gpu
from ._core import Check, CheckResult, Raised, close_enough, describe, fmt_shape, fmt_values, generator
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip, same_tensor
from .stages.hooks import WeightUses
from .stages.standins import D_MODEL, LAYERS, SRC_VOCAB, TGT_VOCAB, CourseTransformer, select_rows


def check_decode_step(decode_step: Callable) -> CheckResult:
    """Check ``decode_step(model, y_last, memory, src, cache) -> (logits, cache)`` against full recomputation."""
    return DECODE_STEP.check(decode_step)


_CACHE_PAD = 2  # not 0: decode_step must read the model's pad_id, not assume one
_SOURCE_LENGTHS = (5, 2, 4)  # the check's batch: its sentences' real lengths, padded to 5
_ROWS = len(_SOURCE_LENGTHS)


def _cache_case(seed: int):
    """A model, a padded source batch with its memory, and the target tokens to feed (no padding among them)."""
    model = CourseTransformer(seed, _CACHE_PAD)
    g = generator(seed + 1)
    src = torch.full((_ROWS, max(_SOURCE_LENGTHS)), _CACHE_PAD, dtype=torch.long)
    for b, n in enumerate(_SOURCE_LENGTHS):
        src[b, :n] = torch.randint(_CACHE_PAD + 1, SRC_VOCAB, (n,), generator=g)
    memory = torch.randn(*src.shape, D_MODEL, generator=g)  # (B, L_src, d_model): the encoder is not under test
    tgt = torch.randint(_CACHE_PAD + 1, TGT_VOCAB, (_ROWS, 7), generator=g)  # (B, T): <bos> and six more tokens, no padding
    return model, src, memory, tgt


def _linear_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """The decoder's linear maps by name, in the order one step uses them (cross-attention keys and values: step 0)."""
    weights = {}
    for i, layer in enumerate(model.decoder_layers):
        for attn in ("self_attn", "cross_attn"):
            for proj in ("W_q", "W_k", "W_v", "W_o"):
                weights[f"decoder_layers[{i}].{attn}.{proj}"] = getattr(getattr(layer, attn), proj).weight
        for lin in ("linear1", "linear2"):
            weights[f"decoder_layers[{i}].feed_forward.{lin}"] = getattr(layer.feed_forward, lin).weight
    weights["generator"] = model.generator.weight
    return weights


def _positions_seen(calls: list) -> dict[str, list[int]]:
    """For each linear map used in a step, how many positions each use covered."""
    seen: dict[str, list[int]] = {}
    for name, applied, _ in calls:
        seen.setdefault(name, []).append(int(applied.shape[-2]) if applied.dim() >= 3 else 1)
    return seen


def _crash_hint(exc: BaseException, t: int, max_len: int) -> str:
    step = f"(step {t}: y_last is token {t} of each sentence, after <bos> at step 0.) "
    sizes = re.findall(r"size of tensor \w \((\d+)\)", str(exc))
    if str(max_len) in sizes:
        return (f"{step}A size of {max_len} is the length of the positional table, `pe` of shape (max_len, d_model) "
                f"= ({max_len}, {D_MODEL}): its row for position t is `pe[t]` (or `pe[t : t + 1]`); `pe[:, t]` is a "
                f"column, one feature at every position (that layout belongs to a table with a batch axis first, "
                f"(1, max_len, d_model)).")
    if isinstance(exc, KeyError):
        return (
            f"{step}decode_step read {exc.args[0] if exc.args else 'a key'!r} from a dict that does not hold it. At "
            f"step 0 the cache is the empty dict you are given, and each decoder layer needs entries of its own: "
            f"its self-attention's keys and values, and its own cross-attention's keys and values (each layer "
            f"projects memory with its own W_k and W_v). Store each before its first read, one set per layer "
            f"(for example a list with one dict per layer, or keys that hold the layer's index)."
        )
    return (
        f"{step}Where a size does not match inside the attention, check the layout: heads are split as "
        f"`.view(B, L, num_heads, d_k).transpose(1, 2)`, giving (B, num_heads, L, d_k), and the cache grows along "
        f"the positions, `torch.cat([cached, new], dim=2)`."
    )


def _step(check: Check, decode_step: Callable, model, y_last, memory, src, cache, t: int):
    out = check.call(decode_step, model, y_last, memory, src, cache, what="decode_step", may_change=(cache,),
                     hint=lambda exc: _crash_hint(exc, t, model.positional_encoding.pe.shape[0]))
    out = check.unpack(out, ["logits", "cache"], "decode_step")
    logits = check.tensor(out[0], f"the logits of decode_step at step {t}")
    B = y_last.shape[0]
    if tuple(logits.shape) == (B, 1, TGT_VOCAB):
        check.fail(f"decode_step returns logits of shape {fmt_shape(logits.shape)}; they should be (B, V) = "
                   f"{fmt_shape((B, TGT_VOCAB))}, the scores of the next token: take `[:, -1]` (or squeeze dim 1).")
    check.tensor(logits, f"the logits of decode_step at step {t}", shape=(B, TGT_VOCAB))
    return logits, out[1]


def _check_decode_step(check: Check, decode_step: Callable) -> None:
    check.callable_(decode_step, "decode_step")
    model, src, memory, tgt = _cache_case(7)
    right, trace = _cache_oracles(model, src, memory, tgt)
    _cache_steps(check, decode_step, model, src, memory, tgt, right, trace)
    _cache_reorder(check, decode_step, model, src, memory, tgt)
    _caches_interleaved(check, decode_step, model, src, memory, tgt)
    _dropouts_applied(check, decode_step, model, src, memory, tgt)
    _cache_on_gpu(check, decode_step, model, src, memory, tgt)


def _cache_on_gpu(check: Check, decode_step: Callable, model: nn.Module, src: torch.Tensor, memory: torch.Tensor,
                  tgt: torch.Tensor) -> None:
    """Three steps with the model, memory, src and the tokens on a pretend GPU: nothing is created on the CPU."""
    from torch.nn.utils.stateless import _reparametrize_module  # what torch.func.functional_call runs a module in

    def run() -> Any:
        cache: object = {}
        with torch.no_grad(), _gpu.elsewhere(), _reparametrize_module(model, _gpu.module_state(model)):
            for t in range(3):
                logits, cache = decode_step(model, _gpu.on_device(tgt[:, t : t + 1]), _gpu.on_device(memory),
                                            _gpu.on_device(src), cache)
        return logits

    result = check.attempt(run, what="decode_step")
    inputs = "the model, memory, src and y_last"
    stages.mixed_devices(check, result, "decode_step", inputs, advice=(
        "Create every tensor on the device of the inputs: an empty cache as `torch.empty(B, H, 0, d_k, "
        "device=y_last.device)`, positions with `torch.arange(..., device=y_last.device)`, masks with "
        "`device=src.device`."))
    if not isinstance(result, Raised):
        stages.left_on_cpu(check, {"its logits": result}, "decode_step", inputs)

    def on_cpu() -> Any:  # the same three steps on the CPU, on a machine that says it has a GPU
        cache: object = {}
        with torch.no_grad():
            for t in range(3):
                logits, cache = decode_step(model, tgt[:, t : t + 1], memory, src, cache)
        return logits

    stages.fixed_device(check, on_cpu, "decode_step", inputs, advice=(
        "Create every tensor on the device of the inputs (`device=y_last.device`, `device=src.device`), never on a "
        "device chosen by asking `torch.cuda.is_available()`."), code=decode_step)
    check.ok("creates its tensors on the device of its inputs (tried on a pretend GPU)")


def _caches_interleaved(check: Check, decode_step: Callable, model: nn.Module, src: torch.Tensor,
                        memory: torch.Tensor, tgt: torch.Tensor) -> None:
    """Two searches at once (two batches, two caches, stepped in turn) must not disturb each other: all that a
    step needs is in its own cache, as lesson 07's wrapper assumes."""
    halves = [slice(0, 1), slice(1, None)]
    caches: list[dict] = [{}, {}]
    with torch.no_grad():
        for t in range(3):
            for i, rows in enumerate(halves):
                expected = model.decode(tgt[rows, : t + 1], memory[rows], src[rows])[:, -1]
                out = check.attempt(decode_step, model, tgt[rows, t : t + 1], memory[rows], src[rows], caches[i],
                                    what="decode_step")
                logits = out[0] if isinstance(out, (tuple, list)) and len(out) == 2 else out
                if isinstance(out, Raised) or not isinstance(logits, torch.Tensor) or not close_enough(logits, expected):
                    check.fail(
                        f"Two decodings at once go wrong: with two caches stepped in turn (sentence 0 in one, the "
                        f"others in the other, as when two batches are translated side by side), step {t} of the "
                        f"{'first' if i == 0 else 'second'} differs from model.decode on its whole prefix. Something a "
                        f"step needs lives outside its cache (a step counter on the model, keys and values in a "
                        f"global or in a dict keyed by the memory tensor): keep all of it in the cache, which each "
                        f"decoding owns."
                    )
                caches[i] = out[1]
    check.ok("two decodings stepped in turn, each with its own cache, do not disturb each other")


def _cache_oracles(model: nn.Module, src: torch.Tensor, memory: torch.Tensor, tgt: torch.Tensor) -> tuple:
    """The full recomputation in float64 (position t predicts token t + 1), and its trace: each map once, on the
    whole prefix, with the float64 copy and memory that the slips are replayed on."""
    with torch.no_grad():
        double = copy.deepcopy(model).double()
        mem64 = memory.double()
        with WeightUses(_linear_weights(double)) as uses:
            right = double.decode(tgt, mem64, src).float()  # (B, T, V)
    trace = {name: (applied, out) for name, applied, out in uses.calls}
    trace["model"], trace["memory"] = double, mem64
    return right, trace


# --------------------------------------------------------------------------
# The known slips: one record each, a flag of the incremental step below and the message that names it


def _heads(x: torch.Tensor, attn: nn.Module) -> torch.Tensor:
    B, L, _ = x.shape
    return x.view(B, L, attn.num_heads, attn.d_k).transpose(1, 2)  # (B, H, L, d_k)


def _merge(x: torch.Tensor) -> torch.Tensor:
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d_k)  # (B, L, d_model)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor | None, scale: float,
            dim: int = -1) -> torch.Tensor:
    """softmax(q k^T * scale) v over ``dim``; ``visible`` True where a key may be attended."""
    scores = q @ k.transpose(-2, -1) * scale  # (B, H, 1, L_k)
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    return scores.softmax(dim) @ v


#: the right step: no flag set (every slip sets one)
_RIGHT = dict(position_zero=False, next_position=False, t_from_rows=False, unscaled=False, no_pe=False,
              use_cache=True, first_only=False, keep_newest=False, scores_over="d_k",
              softmax_dim=-1, one_cache=False, src_mask_off=False, no_norm=0, no_residual=0, no_relu=False)


def _slipped_step(model: nn.Module, y_last: torch.Tensor, memory: torch.Tensor, src: torch.Tensor, cache: dict,
                  **slip: Any) -> tuple[torch.Tensor, dict]:
    """decode_step written out, or with one known slip (a flag of ``_RIGHT``): the slips' replay and their answers."""
    s = {**_RIGHT, **slip}
    t = cache.get("length", 0)
    x = model.positional_encoding.dropout(_new_token(model, y_last, cache, t, s))  # (B, 1, d_model)
    per_layer = cache.setdefault("layers", [{} for _ in model.decoder_layers])
    visible = None if s["src_mask_off"] else (src != model.pad_id)[:, None, None, :]  # (B, 1, 1, L_src)
    for layer, kv in zip(model.decoder_layers, per_layer):
        own = cache.setdefault("shared", {}) if s["one_cache"] else kv
        x = _sublayer(layer.norm1, x, layer.dropout(_self_attention(layer.self_attn, x, own, s)), 1, s)
        c = layer.cross_attn
        if "mk" not in kv:  # memory's keys and values: once, at step 0
            kv["mk"], kv["mv"] = _heads(c.W_k(memory), c), _heads(c.W_v(memory), c)  # (B, H, L_src, d_k)
        cross = c.W_o(_merge(_attend(_heads(c.W_q(x), c), kv["mk"], kv["mv"], visible, c.d_k ** -0.5)))
        x = _sublayer(layer.norm2, x, layer.dropout(cross), 2, s)
        ff = layer.feed_forward
        hidden = ff.linear2(ff.dropout(ff.linear1(x))) if s["no_relu"] else ff(x)
        x = _sublayer(layer.norm3, x, layer.dropout(hidden), 3, s)
    cache["length"] = t + 1
    logits = model.generator(x)[:, -1]  # (B, V)
    return logits, cache


def _new_token(model: nn.Module, y_last: torch.Tensor, cache: dict, t: int, s: dict) -> torch.Tensor:
    """The new token's embedding times sqrt(d_model), plus the positional encoding of its position t."""
    position = 0 if s["position_zero"] else t + 1 if s["next_position"] else t
    if s["t_from_rows"] and cache.get("layers"):  # len() of a cached key: its rows, the batch size
        position = len(cache["layers"][0]["k"])
    scale = 1.0 if s["unscaled"] else math.sqrt(model.d_model)
    return model.tgt_embed(y_last) * scale + (0 if s["no_pe"] else model.positional_encoding.pe[position])


def _self_attention(a: nn.Module, x: torch.Tensor, kv: dict, s: dict) -> torch.Tensor:
    """The new token's self-attention over the cached keys and values and its own (the cache kept in ``kv``)."""
    k, v = _heads(a.W_k(x), a), _heads(a.W_v(x), a)  # (B, H, 1, d_k)
    if "k" in kv and s["use_cache"]:
        k, v = torch.cat([kv["k"], k], dim=2), torch.cat([kv["v"], v], dim=2)  # (B, H, t + 1, d_k)
    kv["k"], kv["v"] = (k[:, :, -1:], v[:, :, -1:]) if s["keep_newest"] else (k, v)
    L = k.size(2)
    visible = None
    if s["first_only"] and L > 1:  # the FIRST row of the causal mask (at step 1 the same as attending before
        # appending the new key: what "first only" says, so a slip of its own would never be told apart)
        visible = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()[:1]
    scale = {"d_k": a.d_k ** -0.5, "d_model": x.size(-1) ** -0.5, "nothing": 1.0}[s["scores_over"]]
    return a.W_o(_merge(_attend(_heads(a.W_q(x), a), k, v, visible, scale, s["softmax_dim"])))


def _sublayer(norm: nn.Module, x: torch.Tensor, out: torch.Tensor, which: int, s: dict) -> torch.Tensor:
    """norm(x + out), or with the residual (``no_residual``) or the LayerNorm (``no_norm``) of sublayer ``which`` left out."""
    total = out if s["no_residual"] == which else x + out
    return total if s["no_norm"] == which else norm(total)


#: The known slips, in the order they are tried: first on the logits of the step that differs, then on the input of
#: the first linear map that departs from model.decode's. Each says the cause, then the fix.
SLIPS = (
    Slip("position 0", Diagnosis(
        "the positional encoding of every new token is taken at position 0.",
        "The newest token sits at position t (the number of tokens already in the cache): add "
        "`model.positional_encoding.pe[t]`."), dict(position_zero=True)),
    Slip("self only", Diagnosis(
        "each new token attends to itself only: the cache grows, but its keys and values are not used.",
        "Concatenate the new key and value to the cached ones (`torch.cat([cached_k, k], dim=2)`) and attend over "
        "all of them."), dict(use_cache=False)),
    Slip("first only", Diagnosis(
        "the new token's self-attention sees position 0 only, not the later tokens and not itself.",
        "Either the causal mask is applied in the wrong orientation (its first row, which belongs to the first "
        "query: a single query, the newest token, may see every cached key, so no causal mask is needed at all, "
        "or its LAST row, `make_causal_mask(t + 1)[-1:]`), or, if it happens from step 1 on only, the new key and "
        "value are appended to the cache after attending instead of before (attend over positions 0 to t, itself "
        "included)."), dict(first_only=True)),
    Slip("newest two", Diagnosis(
        "the cache keeps only the newest key and value, so each new token sees itself and the token before it, "
        "nothing earlier: the cache is overwritten with the last position (`k[:, :, -1:]`) instead of growing.",
        "Store the whole concatenation, `cache_k = torch.cat([cache_k, k], dim=2)` (and the values likewise), and "
        "attend over all of it."), dict(keep_newest=True)),
    Slip("no src mask", Diagnosis(
        "the cross-attention does not hide the source padding: either no mask reaches it, or the mask is built "
        "with another pad id than the model's (a fixed 0?).",
        "Pass `make_padding_mask(src, model.pad_id)` to the cross-attention, as model.decode does."),
        dict(src_mask_off=True)),
    Slip("unscaled embedding", Diagnosis(
        "the new token's embedding is not multiplied by sqrt(d_model) before the positional encoding is added.",
        "Scale it: `model.tgt_embed(y_last) * math.sqrt(model.d_model)`."), dict(unscaled=True)),
    Slip("no positional encoding", Diagnosis(
        "no positional encoding is added to the new token's embedding.",
        "Add `model.positional_encoding.pe[t]`, the row of its position t (the number of tokens already in the "
        "cache)."), dict(no_pe=True)),
    Slip("position t + 1", Diagnosis(
        "the new token gets the positional encoding of position t + 1; its position is t, the number of tokens "
        "already in the cache.", "Add `pe[t]` (a step counter advanced inside the loop over the layers moves once "
        "per layer: advance it once per call, after the loop)."), dict(next_position=True)),
    Slip("position from the rows", Diagnosis(
        f"the new token gets the positional encoding of position {_ROWS}, the number of sentences in the batch.",
        "t is the number of tokens already in the cache, the length axis of a cached key, `k.size(2)` (`len(k)` "
        "counts its rows)."), dict(t_from_rows=True)),
    Slip("no norm3", Diagnosis("the third sublayer's LayerNorm is missing.",
                               "Wrap the sum: `x = layer.norm3(x + feed_forward(x))`."), dict(no_norm=3)),
    Slip("no residual 3", Diagnosis("the residual connection around the feed-forward network is missing.",
                                    "Add the sublayer's input back: `norm3(x + feed_forward(x))`."), dict(no_residual=3)),
    Slip("scores over sqrt(d_model)", Diagnosis(
        "the self-attention scores are divided by sqrt(d_model) instead of sqrt(d_k), the size of one head.",
        "Divide by `math.sqrt(attn.d_k)`."), dict(scores_over="d_model")),
    Slip("unscaled scores", Diagnosis("the self-attention scores are not divided by sqrt(d_k).",
                                      "Divide q k^T by `math.sqrt(attn.d_k)` before the softmax."),
         dict(scores_over="nothing")),
    Slip("softmax over queries", Diagnosis(
        "the softmax of the self-attention runs over the query axis (dim=-2), which holds the one new token: every "
        "weight is 1 and the values are summed.", "Normalise over the keys, `.softmax(dim=-1)`."),
        dict(softmax_dim=-2)),
    Slip("one cache", Diagnosis(
        "every layer reads and writes the same keys and values in the cache, so each layer after the first also "
        "attends over the keys of the layers before it.",
        "Keep one cache entry per layer (a list or a dict per layer, `cache['layers'][i]`)."), dict(one_cache=True)),
    Slip("no norm1", Diagnosis("the first sublayer's LayerNorm is missing.",
                               "Wrap the sum: `x = layer.norm1(x + self_attention_output)`."), dict(no_norm=1)),
    Slip("no residual 1", Diagnosis("the residual connection around the self-attention is missing.",
                                    "Add the sublayer's input back: `norm1(x + self_attention_output)`."), dict(no_residual=1)),
    Slip("no norm2", Diagnosis("the second sublayer's LayerNorm is missing.",
                               "Wrap the sum: `x = layer.norm2(x + cross_attention_output)`."), dict(no_norm=2)),
    Slip("no residual 2", Diagnosis("the residual connection around the cross-attention is missing.",
                                    "Add the sublayer's input back: `norm2(x + cross_attention_output)`."), dict(no_residual=2)),
    Slip("no relu", Diagnosis("the ReLU between the feed-forward network's two linear layers is missing.",
                              "Apply it to the first one's output: `linear2(relu(linear1(x)))`."), dict(no_relu=True)),
)


def _replayed(slip: Slip, trace: dict, src: torch.Tensor, tgt: torch.Tensor, t: int) -> tuple[torch.Tensor, list]:
    """Steps 0 to t of the slipped step on the check's inputs, in float64: step t's logits and its linear maps' uses."""
    model, memory, cache = trace["model"], trace["memory"], {}
    with torch.no_grad():
        for step in range(t):
            _, cache = slip.replay(_slipped_step, model, tgt[:, step : step + 1], memory, src, cache)
        with WeightUses(_linear_weights(model)) as uses:
            logits, _ = slip.replay(_slipped_step, model, tgt[:, t : t + 1], memory, src, cache)
    return logits.float(), uses.calls


def _as_answer(slip: Slip) -> Callable:
    """The slip made into a learner's decode_step (for the generated catalogue tests)."""
    def slipped_decode_step(model, y_last, memory, src, cache):
        return slip.replay(_slipped_step, model, y_last, memory, src, cache)

    return slipped_decode_step


def _row_that_differs(expected: torch.Tensor, actual: torch.Tensor) -> str:
    """Expected and actual logits of the sentence that differs most (the first rows may agree)."""
    b = int((expected.double() - actual.double()).abs().amax(dim=-1).argmax())
    return (f"\n  expected (sentence {b}, first values): {fmt_values(expected[b])}\n"
            f"  actual   (sentence {b}, first values): {fmt_values(actual[b])}")


def _cache_steps(check: Check, decode_step: Callable, model: nn.Module, src: torch.Tensor, memory: torch.Tensor,
                 tgt: torch.Tensor, right: torch.Tensor, trace: dict) -> None:
    """Steps 0..T-1 on the batch: logits equal the full recomputation, one new position per projection."""
    T = tgt.shape[1]
    with torch.no_grad():
        cache: object = {}
        for t in range(T):
            with WeightUses(_linear_weights(model)) as uses:
                logits, cache = _step(check, decode_step, model, tgt[:, t : t + 1], memory, src, cache, t)
            if not close_enough(logits, right[:, t]):
                check.fail(
                    f"At step {t} (the cache holds {t} token{'s' if t != 1 else ''}), the logits of decode_step "
                    f"differ from those of model.decode on the whole prefix (batch of {_ROWS} sentences of source "
                    f"lengths 5, 2 and 4, padded).\n"
                    + _why_the_step_differs(uses.calls, logits, trace, src, tgt, t)
                    + _row_that_differs(right[:, t], logits)
                )
            _positions(check, _positions_seen(uses.calls), t, memory.shape[1])
    check.ok("logits equal the full recomputation at every step (batch with source padding)")
    check.ok("every projection sees one new position per step; cross-attention keys and values are computed once")


def _why_the_step_differs(calls: list, logits: torch.Tensor, trace: dict, src: torch.Tensor, tgt: torch.Tensor,
                          t: int) -> str:
    """The known slip whose replay gives these logits; else where the step departs from model.decode."""
    replays: dict[str, tuple] = {}

    def replay(slip: Slip) -> tuple[torch.Tensor, list]:  # each slip replayed once, for both comparisons
        if slip.name not in replays:
            replays[slip.name] = _replayed(slip, trace, src, tgt, t)
        return replays[slip.name]

    slip = matching_slip(SLIPS, lambda s: replay(s)[0], same_tensor(logits))
    if slip is not None:
        return f"Likely cause: {slip.says}"
    return _where_it_departs(calls, trace, t, tgt[:, t : t + 1], replay) or (
        "Follow model.decode for one position: embedding * sqrt(d_model) + pe[t], then per layer self-attention "
        "over the cached keys and values plus the new ones, cross-attention to memory with the source padding mask, "
        "the feed-forward network, each wrapped with its residual and LayerNorm; then the generator.")


def _dropouts_applied(check: Check, decode_step: Callable, model: nn.Module, src: torch.Tensor,
                      memory: torch.Tensor, tgt: torch.Tensor) -> None:
    """In training mode, the contract's dropouts, one at a time at rate 1 (every entry dropped, no randomness)."""
    places = {"positional_encoding.dropout": "to the new token's embedding plus position, "
                                             "`model.positional_encoding.dropout(tgt_embed(y_last) * sqrt(d_model) "
                                             "+ pe[t])`, as the positional encoding does"}
    for i in range(len(model.decoder_layers)):
        places[f"decoder_layers.{i}.dropout"] = (
            "to each sublayer's output before its residual sum, as DecoderLayer does: norm1(x + dropout(self-"
            "attention)), norm2(x + dropout(cross-attention)), norm3(x + dropout(feed_forward(x)))")
    for place, where in {"": "", **places}.items():  # first every rate at 0: a control, nothing dropped
        dropped = copy.deepcopy(model).train()
        for module in dropped.modules():
            if isinstance(module, nn.Dropout):
                module.p = 1.0 if place and module is dropped.get_submodule(place) else 0.0
        with torch.no_grad():
            cache: object = {}
            for t in range(2):
                out = check.attempt(decode_step, dropped, tgt[:, t : t + 1], memory, src, cache, what="decode_step")
                if isinstance(out, Raised) or not (isinstance(out, (tuple, list)) and len(out) == 2):
                    return  # a crash in training mode is not this stage's business: the steps above ran
                logits, cache = out
                expected = dropped.decode(tgt[:, : t + 1], memory, src)[:, -1]
                if isinstance(logits, torch.Tensor) and not close_enough(logits, expected):
                    if not place:
                        return  # wrong without any dropout: not a dropout slip (the stages above name such)
                    check.fail(
                        f"In training mode your decode_step does not apply `model.{place}` as the model does. "
                        f"With that dropout's rate set to 1 (every entry dropped) and every other at 0, its "
                        f"logits at step {t} differ from model.decode's on the prefix.\n"
                        f"The contract says decode_step applies the model's dropout {where}. Lesson 07 decodes in "
                        f"eval mode, where dropout does nothing; in training mode it must give what decode gives.")
    check.ok("in training mode it applies the positional encoding's dropout and each layer's `dropout`, as decode does")


def _cache_reorder(check: Check, decode_step: Callable, model: nn.Module, src: torch.Tensor, memory: torch.Tensor,
                   tgt: torch.Tensor) -> None:
    """Beam search reorders the rows: the cache must follow (every tensor with the rows first)."""
    with torch.no_grad():
        rows = torch.tensor([2, 0, 0])  # (B,): beams reordered, one duplicated
        cache = {}
        for t in range(3):
            _, cache = _step(check, decode_step, model, tgt[:, t : t + 1], memory, src, cache, t)
        misfits = _not_rows_first(cache, tgt.shape[0])
        if misfits:
            path, shape = misfits[0]
            check.fail(
                f"Your cache holds `{path}`, a tensor of shape {fmt_shape(shape)}, whose first dimension is not the "
                f"batch's {tgt.shape[0]} rows. Beam search reorders the rows of every tensor in the cache along its "
                f"first dimension (lesson 07's reorder_cache), so each needs the rows first: (B, H, t, d_k) for keys "
                f"and values. Keep a step count as a plain Python int (or as a (B,) tensor, one per row)."
            )
        cache = select_rows(cache, rows)
        tgt2, memory2, src2 = tgt[rows], memory[rows], src[rows]
        expected = model.decode(tgt2[:, :4], memory2, src2)[:, -1]
        with WeightUses(_linear_weights(model)) as uses:
            out = check.attempt(decode_step, model, tgt2[:, 3:4], memory2, src2, cache, what="decode_step")
        again = sorted({name for name, *_ in uses.calls if ".cross_attn.W_k" in name or ".cross_attn.W_v" in name})
        logits = out[0] if isinstance(out, (tuple, list)) and len(out) == 2 else out
        if isinstance(out, Raised) or not isinstance(logits, torch.Tensor) or not close_enough(logits, expected):
            found = (f"decode_step raised {type(out.exception).__name__}: {str(out.exception).splitlines()[0]}"
                     if isinstance(out, Raised) else
                     f"expected (first values): {fmt_values(expected)}\n"
                     f"  actual   (first values): {fmt_values(logits) if isinstance(logits, torch.Tensor) else describe(logits)}")
            check.fail(
                "After the rows were reordered as beam search does (rows [2, 0, 0] of the batch, memory and src "
                "reordered the same way, and every tensor of the cache indexed along its first dimension), "
                "the next step goes wrong:\n"
                f"  {found}\n"
                "Keep everything a step needs inside the cache (not on the model or in a global), and give "
                "every tensor in it the rows as its first dimension, (B, H, t, d_k) for keys and values, so "
                "that reorder_cache can select rows."
            )
        if again and not isinstance(out, Raised):
            check.fail(
                f"After the rows were reordered as beam search does, decode_step projected memory again "
                f"({', '.join(again[:2])}): the reordered memory is a new tensor, and your step took that for a new "
                f"sentence. The cross-attention's keys and values are in the cache, reordered with it: compute them "
                f"at the first step only (when the cache is empty), whatever tensor memory is at later steps. "
                f"Lesson 07's wrapper reorders at every step of beam search, so this would recompute them every time."
            )
    check.ok("the cache follows the rows when beam search reorders them")


def _not_rows_first(cache: Any, rows: int, path: str = "cache") -> list[tuple[str, tuple]]:
    """(where, shape) of every tensor in ``cache`` whose first dimension is not ``rows``."""
    if isinstance(cache, torch.Tensor):
        return [] if cache.dim() and cache.shape[0] == rows else [(path, tuple(cache.shape))]
    if isinstance(cache, dict):
        return [m for key, value in cache.items() for m in _not_rows_first(value, rows, f"{path}[{key!r}]")]
    if isinstance(cache, (list, tuple)):
        return [m for i, value in enumerate(cache) for m in _not_rows_first(value, rows, f"{path}[{i}]")]
    return []


def _where_it_departs(calls: list, trace: dict, t: int, y_last: torch.Tensor, replay: Callable[[Slip], tuple]) -> str:
    """The first linear map of the step whose input differs from model.decode's: its cause, else where it is."""
    model = trace["model"]  # the float64 copy the trace comes from
    used = [name for name, _, _ in calls]
    unused = [n for n in _linear_weights(model) if n not in used and not (t > 0 and (".cross_attn.W_k" in n or
                                                                                  ".cross_attn.W_v" in n))]
    repeated = sorted({n for n in used if used.count(n) > 1})
    layers_unused = sorted({n.split(".")[0] for n in unused} - {n.split(".")[0] for n in used})
    shared = [n for n in unused if ".cross_attn.W_" in n]
    if t == 0 and shared and len(shared) == len(unused) and "decoder_layers[0].cross_attn.W_k" in used:
        return (f"Where it goes wrong: `{shared[0]}` was never called at step 0, although layer 0's cross-attention "
                f"projected memory: the later layers found keys and values in the cache already, layer 0's. Keep "
                f"one cache entry per layer (a list or a dict per layer, `cache['layers'][i]`), each with its own "
                f"keys and values.")
    if unused and repeated and unused[0].split(".")[0] == repeated[0].split(".")[0]:
        return (f"Where it goes wrong: `{unused[0]}` was never called, while `{repeated[0]}` ran "
                f"{used.count(repeated[0])} times in one step: each projection belongs to its own attention (the "
                f"cross-attention's keys and values come from its own W_k and W_v, applied to memory).")
    if unused and repeated:
        return (f"Where it goes wrong: `{unused[0]}` was never called, while `{repeated[0]}` ran "
                f"{used.count(repeated[0])} times in one step: every decoder layer must run with its own weights "
                f"(loop over `model.decoder_layers`, each layer with its own part of the cache).")
    if layers_unused:
        return (f"Where it goes wrong: {', '.join(f'`{n}`' for n in layers_unused)} never ran in this step: the "
                f"new token goes through every layer of `model.decoder_layers`, in order.")
    if unused:
        return (f"Where it goes wrong: `{unused[0]}` was never called in this step"
                + (" (the merged heads go through W_o before the residual sum)" if unused[0].endswith("W_o") else "")
                + ": decode_step computes what the layer computes, each projection applied as a module, "
                  "`attn.W_o(...)`.")
    rows = y_last.shape[0]
    for name in _linear_weights(model):
        if name not in used or name not in trace:
            continue
        got, want = _input_of(calls, name, rows), trace[name][0]
        if not close_enough(got, want if _projects_memory(name) else want[:, t], 1e-4, 1e-4):
            return _departure_cause(name, got, rows, replay)
    return ""


def _projects_memory(name: str) -> bool:
    return ".cross_attn.W_k" in name or ".cross_attn.W_v" in name


def _input_of(calls: list, name: str, rows: int) -> torch.Tensor:
    """What the map ``name`` was last applied to in a step, in float64: memory, or the newest position's vector."""
    applied = [applied for used, applied, _ in calls if used == name][-1].double()
    return applied if _projects_memory(name) else applied.reshape(rows, -1, applied.shape[-1])[:, -1]


def _departure_cause(name: str, got: torch.Tensor, rows: int, replay: Callable[[Slip], tuple]) -> str:
    """The known slip whose replay feeds ``name`` (the first map whose input differs) what the learner's step
    fed it, else where the step goes wrong."""
    slip = matching_slip(SLIPS, lambda s: _input_of(replay(s)[1], name, rows),
                         lambda value: close_enough(got, value, 1e-4, 1e-4))
    if slip is not None:
        return f"Likely cause: {slip.says}"
    return (f"Where it goes wrong: `{name}` is the first linear map whose input differs from model.decode's: "
            f"{_what_differs(name)}.")


#: what the input of a linear map is, by the map (the first whose name ends so); the first layer's queries, keys
#: and values take the new token's embedding
_INPUTS = (
    (("decoder_layers[0].self_attn.W_q", "decoder_layers[0].self_attn.W_k", "decoder_layers[0].self_attn.W_v"),
     "what the first layer receives for the new token differs from model.decode's: tgt_embed(y_last) * "
     "sqrt(d_model) + pe[t] (the positional encoding's dropout is off in eval mode)"),
    (("self_attn.W_q", "self_attn.W_k", "self_attn.W_v", "generator"),
     "the output of decoder layer {before}'s feed-forward sublayer, norm3(x + feed_forward(x)), differs"),
    (("self_attn.W_o",),
     "the new token's query, key and value are right, so what differs is what it attends over or how: the cached "
     "keys and values must be the earlier positions' own, kept unchanged and concatenated with the new ones along "
     "the positions; then softmax(q k^T / sqrt(d_k)) v per head, the softmax over the keys, and the heads merged"),
    (("cross_attn.W_q",), "the output of the self-attention sublayer, norm1(x + self_attention_output), differs"),
    (("cross_attn.W_k", "cross_attn.W_v"),
     "the cross-attention's keys and values are not computed from memory: W_k(memory) and W_v(memory), once, at "
     "step 0, then kept in the cache"),
    (("cross_attn.W_o",),
     "the cross-attention over memory differs although its query is right: keys and values from memory (computed "
     "at step 0, kept in the cache), the source padding mask (True = may attend, `src != model.pad_id`), "
     "softmax(q k^T / sqrt(d_k)) v per head"),
    (("feed_forward.linear1",),
     "the output of the cross-attention sublayer, norm2(x + cross_attention_output), differs"),
    (("feed_forward.linear2",), "the feed-forward network's hidden layer, relu(linear1(x)), differs"),
)


def _what_differs(name: str) -> str:
    i = int(name[len("decoder_layers["):name.index("]")]) if name.startswith("decoder_layers") else LAYERS
    return next(text for ends, text in _INPUTS if name.endswith(ends)).format(before=i - 1)


def _positions(check: Check, seen: dict[str, list[int]], t: int, src_len: int) -> None:
    """Each projection sees one new position per step; cross-attention keys and values only at step 0."""
    for name, calls in seen.items():
        cross_kv = ".cross_attn.W_k" in name or ".cross_attn.W_v" in name
        if cross_kv:
            if t > 0:
                check.fail(
                    f"At step {t}, {name} ran again on memory ({calls} positions): cross-attention keys and values "
                    f"are recomputed at every step. They depend only on memory: compute them at the first step, "
                    f"store them in the cache, and reuse them."
                )
            continue
        if any(n != 1 for n in calls) or len(calls) != 1:
            check.fail(
                f"At step {t}, {name} saw {' + '.join(str(n) for n in calls)} positions; with a cache it should see "
                f"exactly one, the newest token. Project only y_last's position, and concatenate its key and value "
                f"to the cached ones (the earlier positions' projections do not change)."
            )
    for i in range(LAYERS):
        for attn in ("self_attn", "cross_attn"):
            for proj in ("W_q", "W_k", "W_v", "W_o"):
                name = f"decoder_layers[{i}].{attn}.{proj}"
                if name not in seen and not (attn == "cross_attn" and proj in ("W_k", "W_v") and t > 0):
                    check.fail(f"At step {t}, {name} was never called: decode_step must use the model's own "
                               f"projections (W_q, W_k, W_v, W_o of each layer's self_attn and cross_attn).")


DECODE_STEP = Exercise(
    "decode_step", _check_decode_step,
    oracle="model.decode on the whole prefix (full recomputation, float64), on the checker's own model with the "
           "course's layout; forward hooks on every linear map count the positions each one sees",
    cases="a batch of 3 sentences of source lengths 5, 2 and 4 padded with pad id 2, 7 target tokens stepped one at "
          "a time; then the rows reordered as beam search does, two caches stepped in turn, each dropout in "
          "training mode at rate 1, and the inputs on a pretend GPU",
    slips=SLIPS, answer=_as_answer)

__all__ = ["check_decode_step"]
