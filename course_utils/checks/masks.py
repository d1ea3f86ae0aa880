"""Checkers for lesson 02: padding, causal and target masks.

Masks are boolean and True means "may attend", as in
``F.scaled_dot_product_attention``. Each checker compares the learner's mask
with the meaning stated in the exercise, on several batch sizes, lengths and
pad ids (including a pad id other than 0 with real tokens equal to 0). When
the values are wrong, the known slips (``PADDING_SLIPS``, ``CAUSAL_SLIPS``,
``TARGET_SLIPS``: mutants of the meaning) are replayed only to *name* the
cause; where several give the wrong mask, the one that also gives the learner's
masks for the other batches is named. The target mask is also used as ``attn_mask`` in PyTorch's attention
to show what leaks when it is wrong.

What the rest of the course relies on (``contracts.CONTRACTS``) is checked as
well: a single sentence (B = 1) and sentences of one token (L = 1), where a
bare ``squeeze()`` drops an axis, lengths of 64 and more, a batch of the same
shape as an earlier one but other padding (a mask cached between calls), tokens on a GPU (pretended where
there is none: the mask must come back on the tokens' device), and, for the
target mask, the learner's own padding and causal masks first, when it uses them.
"""

from __future__ import annotations

import inspect
import re
from typing import Callable

import torch
import torch.nn.functional as F

from . import stages
from ._core import Check, CheckResult, fmt_shape, generator
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip

_BOOL_NOTE = (
    "Masks are boolean (True = may attend): build them with comparisons such as `tokens != pad_id` "
    "or `torch.tril(...)` on a bool tensor, or convert with `.bool()`."
)

_PREFIX = Diagnosis(
    "Your mask marks the first n positions of each sentence as real (n = its number of real tokens), which "
    "is right only when the padding sits at the end; here some sentences are padded at the start or in the middle.",
    "Compare every token with the pad id instead: `tokens != pad_id`.")

_SQUEEZE_FIX = (
    "Never squeeze without naming the axis: build the axes with `unsqueeze(...)` or indexing with None "
    "(`(tokens != pad_id)[:, None, None, :]`), or use `view(B, 1, 1, L)` with explicit sizes (B, L = tokens.shape)."
)
_BARE_SQUEEZE = re.compile(r"\bsqueeze\(\s*\)|torch\.squeeze\(\s*[^,()]*\)")

_SIZES = (5, 4, 1, 8, 64, 130)  # causal masks: small, one, lesson 06's max_len and more


def check_padding_mask(make_padding_mask: Callable) -> CheckResult:
    """Check ``make_padding_mask(tokens, pad_id) -> bool (B, 1, 1, L)``, True at real tokens."""
    return PADDING_MASK.check(make_padding_mask)


def check_causal_mask(make_causal_mask: Callable) -> CheckResult:
    """Check ``make_causal_mask(size) -> bool (size, size)``, True on and below the diagonal."""
    return CAUSAL_MASK.check(make_causal_mask)


def check_target_mask(make_target_mask: Callable) -> CheckResult:
    """Check ``make_target_mask(tokens, pad_id) -> bool (B, 1, L, L)``: padding on the key axis AND causal."""
    return TARGET_MASK.check(make_target_mask)


def _check_make_padding_mask(check: Check, make_padding_mask: Callable) -> None:
    check.callable_(make_padding_mask, "make_padding_mask")
    for i, (tokens, pad_id) in enumerate(_BATCHES):
        _padding_case(check, make_padding_mask, tokens.clone(), pad_id, _BATCHES[:i])
    for tokens, pad_id in _drawn_batches(11):
        _padding_case(check, make_padding_mask, tokens, pad_id, _BATCHES)
    check.ok("returns a bool mask of shape (B, 1, 1, L)")
    check.ok("True at real tokens, False at padding, for any pad id (also when real tokens equal 0)")
    check.ok("works for several batch sizes and lengths, from a single token to 70, and for a new batch of an "
             "earlier batch's shape")
    _device_stage(check, make_padding_mask, "make_padding_mask", *_BATCHES[0])
    check.ok("tokens on a GPU give a mask on that GPU")


def _check_make_causal_mask(check: Check, make_causal_mask: Callable) -> None:
    check.callable_(make_causal_mask, "make_causal_mask")
    for i, size in enumerate(_SIZES):
        _causal_case(check, make_causal_mask, size, _SIZES[:i])
    for size in _drawn_sizes(12):
        _causal_case(check, make_causal_mask, size, _SIZES)
    check.ok("returns a bool mask of shape (size, size)")
    check.ok("True on and below the diagonal (each position sees itself and the past)")
    check.ok(f"works for sizes {', '.join(str(n) for n in sorted(_SIZES))}, called one after the other")
    stages.fixed_device(check, lambda: make_causal_mask(5), "make_causal_mask", "", code=make_causal_mask, advice=(
        "Create it on the CPU, with no `device=` (`torch.ones(size, size, dtype=torch.bool)`), and let the caller "
        "move it: `make_causal_mask(L).to(tokens.device)`, as make_target_mask does."))


def _check_make_target_mask(check: Check, make_target_mask: Callable) -> None:
    check.callable_(make_target_mask, "make_target_mask")
    _components_first(check, make_target_mask)
    for i, (tokens, pad_id) in enumerate(_BATCHES):
        _target_case(check, make_target_mask, tokens.clone(), pad_id, _BATCHES[:i])
    for tokens, pad_id in _drawn_batches(13):
        _target_case(check, make_target_mask, tokens, pad_id, _BATCHES)
    check.ok("returns a bool mask of shape (B, 1, L, L)")
    check.ok("padding on the key axis AND causal, for any pad id (also when real tokens equal 0)")
    check.ok("works for lengths from 1 to 70, and for a new batch of an earlier batch's shape")
    _device_stage(check, make_target_mask, "make_target_mask", *_BATCHES[0])
    check.ok("tokens on a GPU give a mask on that GPU")


# --------------------------------------------------------------------------
# The inputs.


def _long_batch() -> torch.Tensor:
    """(2, 70): 66 real tokens then 4 pads, and 12 real tokens then 58 pads (lesson 06's lengths and more)."""
    tokens = torch.arange(70).repeat(2, 1) % 17 + 1  # (2, 70), no token equal to the pad id 0
    tokens[0, 66:] = 0
    tokens[1, 12:] = 0
    return tokens


# Token batches: (tokens, pad_id). Mostly right-padded; the fourth is padded on the left, so a
# mask that marks "the first n positions" or trusts the first token to be real is caught.
_BATCHES = [
    (torch.tensor([[1, 7, 4, 9, 2, 0], [1, 5, 2, 0, 0, 0], [1, 6, 3, 8, 5, 2]]), 0),
    (torch.tensor([[1, 0, 5, 0, 2, 3, 3], [4, 0, 2, 3, 3, 3, 3]]), 3),  # pad id 3, real tokens equal to 0
    (torch.tensor([[6, 0, 2, 1, 1], [0, 4, 0, 0, 2], [9, 2, 1, 1, 1], [5, 5, 1, 1, 1]]), 1),
    (torch.tensor([[2, 2, 0, 5, 1], [2, 0, 4, 4, 7], [6, 1, 0, 3, 9]]), 2),  # left padding, pad id 2
    (torch.tensor([[4, 9, 7, 0, 0]]), 0),  # one sentence (B = 1): a bare squeeze() drops the batch axis
    (torch.tensor([[2]]), 0),  # one sentence of one token
    (torch.tensor([[5], [2], [3]]), 2),  # sentences of one token (L = 1), one of them padding
    (torch.tensor([[1, 7, 4, 0, 0, 0], [1, 5, 2, 9, 9, 2], [1, 0, 0, 0, 0, 0]]), 0),  # the first batch's shape
    (_long_batch(), 0),
]


def _drawn_batches(seed: int) -> list[tuple[torch.Tensor, int]]:
    """Two batches drawn at random (``generator(seed)``: a grading run's hidden seed draws others): random sizes,
    pad id and tokens, pads at random positions (left, right and inside), one batch padded on the right only."""
    g = generator(seed)
    batches = []
    for right_only in (False, True):
        B, L = int(torch.randint(2, 7, (), generator=g)), int(torch.randint(3, 25, (), generator=g))
        pad_id = int(torch.randint(0, 6, (), generator=g))
        tokens = torch.randint(0, 12, (B, L), generator=g)  # (B, L)
        tokens[tokens == pad_id] = pad_id + 6  # no real token equal to the pad id; some equal to 0
        if right_only:
            lengths = torch.randint(1, L + 1, (B, 1), generator=g)  # (B, 1) real tokens per sentence
            pads = torch.arange(L)[None, :] >= lengths  # (B, L)
        else:
            pads = torch.rand(B, L, generator=g) < 0.35  # (B, L)
        tokens[pads] = pad_id
        batches.append((tokens, pad_id))
    return batches


def _drawn_sizes(seed: int) -> list[int]:
    """Two causal-mask sizes drawn at random, other than the fixed ones (a grading run's hidden seed draws others)."""
    pool = torch.tensor([n for n in range(2, 100) if n not in _SIZES])
    return [int(n) for n in pool[torch.randperm(len(pool), generator=generator(seed))[:2]]]


def _prefix(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, L): True at the first (number of real tokens) positions of each row."""
    count = (tokens != pad_id).sum(1, keepdim=True)
    return torch.arange(tokens.shape[1])[None, :] < count


# --------------------------------------------------------------------------
# Shared steps.


def _as_mask(check: Check, value, name: str, shape: tuple, shape_hint: str) -> torch.Tensor:
    """Type and shape (stop if wrong); a non-bool dtype is a problem but its meaning is still checked."""
    mask = check.tensor(value, name, shape=shape, finite=False, shape_hint=shape_hint)
    if mask.dtype != torch.bool:
        title = name[0].upper() + name[1:]
        check.problem(f"{title} has dtype {mask.dtype}, but it should be torch.bool.\n{_BOOL_NOTE}")
        mask = mask.detach() != 0
    return mask.detach()


def _describe_cells(actual: torch.Tensor, expected: torch.Tensor, axes: str, limit: int = 4) -> str:
    """The first few entries where two boolean masks differ, by index."""
    wrong = (actual != expected).nonzero().tolist()
    lines = [f"  {len(wrong)} of {expected.numel()} entries differ, for example:"]
    for index in wrong[:limit]:
        lines.append(
            f"    [{', '.join(str(i) for i in index)}] ({axes}): expected {bool(expected[tuple(index)])}, "
            f"got {bool(actual[tuple(index)])}"
        )
    return "\n".join(lines)


def _same_mask(mask: torch.Tensor) -> Callable[[torch.Tensor], bool]:
    """``agrees`` for :func:`matching_slip`: a mask of the same shape and values."""
    return lambda wrong: wrong.shape == mask.shape and torch.equal(wrong, mask)


def _learner_mask(check: Check, fn: Callable, tokens: torch.Tensor, pad_id: int) -> torch.Tensor | None:
    """The learner's mask for another batch, as booleans (None when it does not come back as a tensor)."""
    out = check.attempt(fn, tokens.clone(), pad_id)
    if not isinstance(out, torch.Tensor):
        return None
    return out.detach() if out.dtype == torch.bool else out.detach() != 0


def _slip_of(check: Check, fn: Callable, slips: tuple[Slip, ...], tokens: torch.Tensor, pad_id: int,
             mask: torch.Tensor) -> Slip | None:
    """The slip that gives this mask. Where several do (a slip of the pad id does not show for pad_id 0), the one
    that also gives the learner's masks for the course's other batches is named."""
    seen = [(tokens, pad_id, mask)] + [(t, p, m) for t, p in _BATCHES
                                      if (m := _learner_mask(check, fn, t, p)) is not None]

    def everywhere(replays: list) -> bool:
        return all(_same_mask(m)(wrong) for wrong, (_, _, m) in zip(replays, seen))

    return (matching_slip(slips, lambda s: [s.replay(None, t, p) for t, p, _ in seen], everywhere)
            or matching_slip(slips, lambda s: s.replay(None, tokens, pad_id), _same_mask(mask)))


def _wrong_values(check: Check, what: str, tokens: torch.Tensor, pad_id: int, says: Diagnosis, cells: str) -> None:
    check.fail(f"The {what} has the wrong values for {_inputs_text(tokens, pad_id)}.\n{says.showing(cells)}")


def _below(size: int, diagonal: int = 0) -> torch.Tensor:
    """Boolean (size, size): True where column <= row + diagonal (a plain comparison, no torch.tril)."""
    i = torch.arange(size)
    return i[None, :] <= i[:, None] + diagonal


def _inputs_text(tokens: torch.Tensor, pad_id: int) -> str:
    if tokens.numel() > 24:
        return f"a batch of shape {tuple(tokens.shape)} with {int((tokens == pad_id).sum())} pads, pad_id = {pad_id}"
    return f"tokens = {tokens.tolist()}, pad_id = {pad_id}"


def _stale(earlier: list, tokens: torch.Tensor, mask: torch.Tensor, build: Callable) -> Diagnosis | None:
    """The mask is an earlier call's, on a batch of the same shape: state kept between calls (named by comparing
    with earlier answers, not a slip of the oracle)."""
    for old, old_pad in earlier:
        if old.shape == tokens.shape and not torch.equal(old, tokens) and _same_mask(mask)(build(old, old_pad)):
            return Diagnosis(
                f"Your mask is the one of an earlier call ({_inputs_text(old, old_pad)}), not of these tokens: "
                f"something is kept between calls (a cache keyed on the batch's shape, or a global).",
                "Build the mask from each call's own tokens.")
    return None


def _long_hint(length: int) -> str:
    if length < 64:
        return ""
    return (f"This batch is long (L = {length}): if shorter ones worked, a size is fixed somewhere (a table of "
            f"positions built once for a few). Build everything from the tokens' own shape.")


def _bare_squeeze(fn: Callable) -> bool:
    """Whether the learner's source calls ``squeeze`` without naming an axis."""
    try:
        return bool(_BARE_SQUEEZE.search(inspect.getsource(fn)))
    except Exception:  # noqa: BLE001 - no source (a builtin, a REPL lambda, an odd callable): only the hedged note
        return False


def _size_one_note(fn: Callable, tokens: torch.Tensor) -> str:
    """Every earlier batch (none with an axis of size 1) worked: name the usual cause, a bare squeeze."""
    B, L = tokens.shape
    which = ["B = 1 (a single sentence)"] * (B == 1) + ["L = 1 (sentences of one token)"] * (L == 1)
    if not which:
        return ""
    axes = " and ".join(["the batch axis"] * (B == 1) + ["the length axis"] * (L == 1))
    return (
        f"Every earlier batch worked, and this one has {' and '.join(which)}: an axis of size 1 is treated "
        f"differently. "
        + ("Your code calls `squeeze` without a dim, which" if _bare_squeeze(fn) else
           "The usual cause is a bare `.squeeze()` (without a dim), which")
        + f" removes every axis of size 1, so here it removes {axes} too. {_SQUEEZE_FIX}"
    )


def _squeezed_note(fn: Callable, shape: tuple, expected: tuple) -> str:
    """An axis of size 1 is missing from the result and the code squeezes without a dim: say so."""
    lost_only_ones = len(shape) < len(expected) and [d for d in shape if d != 1] == [d for d in expected if d != 1]
    if lost_only_ones and _bare_squeeze(fn):
        return (f" Your code calls `squeeze` without a dim, which removes every axis of size 1, this one too. "
                f"{_SQUEEZE_FIX}")
    return ""


def _device_stage(check: Check, fn: Callable, what: str, tokens: torch.Tensor, pad_id: int) -> None:
    """Tokens on a GPU (pretended where there is none): the mask comes back on that GPU."""
    stages.on_gpu(check, fn, tokens.clone(), pad_id, what=what, inputs="the tokens", outputs=("the mask",),
                  source="tokens")


# --------------------------------------------------------------------------
# Padding mask.


def _padding_case(check: Check, fn: Callable, tokens: torch.Tensor, pad_id: int, earlier: list) -> None:
    B, L = tokens.shape
    size_one = _size_one_note(fn, tokens)
    value = check.call(fn, tokens, pad_id, hint=(_long_hint(L) + "\n" + size_one).strip())
    shape = tuple(getattr(value, "shape", ()))
    hint = size_one or _padding_shape_hint(shape, B, L) + _squeezed_note(fn, shape, (B, 1, 1, L))
    mask = _as_mask(check, value, "the padding mask", (B, 1, 1, L), hint)
    expected = (tokens != pad_id).reshape(B, 1, 1, L)
    if torch.equal(mask, expected):
        return
    says = (_stale(earlier, tokens, mask, lambda t, p: (t != p).reshape(B, 1, 1, L))
            or getattr(_slip_of(check, fn, PADDING_SLIPS, tokens, pad_id, mask), "says", None)
            or Diagnosis("True must mark the real tokens (those different from pad_id)."))
    _wrong_values(check, "padding mask", tokens, pad_id, says, _describe_cells(mask, expected, "batch, 1, 1, key"))


def _keys(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, 1, 1, L): True at the tokens that are not ``pad_id``, the padding mask."""
    return (tokens != pad_id)[:, None, None, :]


#: the padding mask's slips, mutants ``(tokens, pad_id) -> (B, 1, 1, L)``
PADDING_SLIPS = (
    Slip("inverted", Diagnosis(
        "Your mask is True at the padding and False at the real tokens: the polarity is inverted.",
        "True means 'may attend', so it must be True at real tokens (`tokens != pad_id`)."),
        lambda tokens, pad_id: ~_keys(tokens, pad_id)),
    Slip("token 0 as padding", Diagnosis(
        "Your mask treats the token 0 as padding whatever the pad id, so 0 is hidden even where it is a real token: "
        "the pad id 0 is hard-coded.", "Compare with the `pad_id` argument."),
        lambda tokens, pad_id: _keys(tokens, 0)),
    Slip("True at 0", Diagnosis(
        "Your mask is True where the token is 0, whatever the pad id: the pad id 0 is hard-coded and the polarity is "
        "inverted.", "Use `tokens != pad_id`: True at real tokens."), lambda tokens, pad_id: ~_keys(tokens, 0)),
    Slip("all True", Diagnosis("Your mask is True everywhere, so padding is never hidden.",
                               "It must be False where the token equals pad_id."),
         lambda tokens, pad_id: torch.ones_like(_keys(tokens, pad_id))),
    Slip("first n", _PREFIX, lambda tokens, pad_id: _prefix(tokens, pad_id)[:, None, None, :]),
    Slip("cut at first pad", Diagnosis(
        "Your mask hides everything from the first pad on (a cumulative product or sum, or a `break` at the first "
        "pad), which is right only when the padding sits at the end; here some sentences are padded at the start or "
        "in the middle.", "Compare every token with the pad id: `tokens != pad_id`."),
        lambda tokens, pad_id: _keys(tokens, pad_id).long().cumprod(-1).bool()),
)


def _padding_shape_hint(shape: torch.Size, B: int, L: int) -> str:
    shape = tuple(shape)
    if shape == (B, L):
        return (
            "Add a head axis and a query axis so the mask broadcasts over the scores (B, num_heads, L_q, L): "
            "shape (B, 1, 1, L)."
        )
    if shape in ((B, 1, L), (1, B, L)):
        return "One axis short: the scores have a head axis and a query axis, so the mask needs shape (B, 1, 1, L)."
    if len(shape) == 4 and shape[:3] == (B, 1, 1) and shape[3] < L:
        return (
            f"It has {shape[3]} positions for tokens of length {L}: a size is fixed somewhere (a table of positions "
            f"built for a few). Build the mask from the tokens themselves, `tokens != pad_id`."
        )
    if shape == (B, 1, L, 1):
        return (
            "This puts the tokens on the query axis; padding hides *keys*, so the tokens go on the last axis: "
            "(B, 1, 1, L)."
        )
    return "Shape (B, 1, 1, L): one row per sentence, the tokens on the last (key) axis."


# --------------------------------------------------------------------------
# Causal mask.


def _causal_case(check: Check, fn: Callable, size: int, earlier: tuple[int, ...]) -> None:
    value = check.call(fn, size, hint=_long_hint(size))
    hint = _causal_shape_hint(getattr(value, "shape", ()), size, earlier)
    mask = _as_mask(check, value, "the causal mask", (size, size), hint)
    expected = _below(size)
    if torch.equal(mask, expected):
        return
    slip = matching_slip(CAUSAL_SLIPS, lambda s: s.replay(None, size), _same_mask(mask))
    says = slip.says if slip is not None else Diagnosis("Row i (a query) must be True exactly for the columns j <= i.")
    check.fail(f"The causal mask has the wrong values for size = {size}.\n"
               f"{says.showing(_describe_cells(mask, expected, 'query, key'))}")


#: the causal mask's slips, mutants ``size -> (size, size)``
CAUSAL_SLIPS = (
    Slip("diagonal hidden", Diagnosis(
        "The diagonal is False, so a position cannot attend to itself (and the first row is empty, which gives NaN "
        "in a softmax).", "Keep the diagonal: True on *and* below it."), lambda size: _below(size, -1)),
    Slip("one ahead", Diagnosis(
        "Each position can also see the next one (True just above the diagonal): an off-by-one that leaks one future "
        "token.", "Only the diagonal and below should be True."), lambda size: _below(size, 1)),
    Slip("upper", Diagnosis(
        "Your mask is True on and *above* the diagonal: upper-triangular (or transposed), so each position sees the "
        "future and not the past.", "Row i (the query) must be True for columns j <= i: lower-triangular."),
        lambda size: ~_below(size, -1)),
    Slip("inverted", Diagnosis(
        "Your mask is True strictly above the diagonal and False elsewhere: the polarity is inverted.",
        "True means 'may attend': the past and the position itself, on and below the diagonal."),
        lambda size: ~_below(size)),
    Slip("all True", Diagnosis("Your mask is True everywhere, so nothing is hidden: every position sees the future."),
         lambda size: torch.ones(size, size, dtype=torch.bool)),
)


def _causal_shape_hint(shape: torch.Size, size: int, earlier: tuple[int, ...] = ()) -> str:
    shape = tuple(shape)
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] in earlier:
        return (
            f"It has the shape of the mask for size = {shape[0]}, an earlier call: is the size hard-coded, or the "
            f"mask kept (cached) from an earlier call? Build it from each call's own `size` (a cache is fine only "
            f"when it is keyed by the size, such as `functools.lru_cache`)."
        )
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] < size and all(n <= shape[0] for n in earlier):
        return (
            f"It was called with size = {size} but has {shape[0]} rows: it looks built for {shape[0]} positions "
            f"(a fixed-size table, sliced), and right only below that. Build it from `size`."
        )
    if len(shape) > 2 and shape[-2:] == (size, size) and all(d == 1 for d in shape[:-2]):
        return (
            "It has extra leading axes of size 1. Return just (size, size): broadcasting adds the batch and "
            "head axes when the mask is combined with a padding mask or the scores."
        )
    if len(shape) == 2 and shape[0] == shape[1]:
        return f"It was called with size = {size}: is the size hard-coded instead of taken from the argument?"
    return "One row per query position, one column per key position: (size, size)."


# --------------------------------------------------------------------------
# Target mask.


def _growing(check: Check, fn: Callable, tokens: torch.Tensor, pad_id: int, shape: tuple) -> str:
    """A mask with too many axes that gains one more on a second call: an in-place change of a kept tensor."""
    if len(shape) <= 4:
        return ""
    again = check.attempt(fn, tokens.clone(), pad_id)
    if not isinstance(again, torch.Tensor) or again.dim() <= len(shape):
        return ""
    return (f"Called again on the same tokens, your mask gains another axis ({fmt_shape(shape)}, then "
            f"{fmt_shape(again.shape)}): something changes a tensor kept between calls in place, such as "
            f"`unsqueeze_` on the causal mask that a cached make_causal_mask (`functools.lru_cache`) returns every "
            f"time. Use `unsqueeze` (no underscore), which returns a new view and leaves the cached mask alone.")


def _components_first(check: Check, fn: Callable) -> None:
    """If the learner's make_target_mask calls their own padding or causal mask, check those first."""
    parts = {"make_padding_mask": (check_padding_mask, "make_padding_mask"),
             "make_causal_mask": (check_causal_mask, "make_causal_mask")}
    stages.components_first(check, "make_target_mask", stages.called_parts(fn, parts))


def _target_case(check: Check, fn: Callable, tokens: torch.Tensor, pad_id: int, earlier: list) -> None:
    B, L = tokens.shape
    size_one = _size_one_note(fn, tokens)
    hint = size_one or (  # a causal mask of size B instead of L crashes only where B != L
        f"The padding mask (B, 1, 1, L) and the causal mask (L, L) broadcast to (B, 1, L, L) = "
        f"{fmt_shape((B, 1, L, L))}: the causal mask's size is the length L = tokens.size(1), not the batch size "
        f"tokens.size(0)." if B != L else "")
    value = check.call(fn, tokens, pad_id, hint=(_long_hint(L) + "\n" + hint).strip())
    shape = tuple(getattr(value, "shape", ()))
    hint = _growing(check, fn, tokens, pad_id, shape) or size_one or _target_shape_hint(shape, B, L) + _squeezed_note(
        fn, shape, (B, 1, L, L))
    mask = _as_mask(check, value, "the target mask", (B, 1, L, L), hint)
    keys = (tokens != pad_id).reshape(B, 1, 1, L)
    expected = keys & _below(L)
    if torch.equal(mask, expected):
        return
    says = (_stale(earlier, tokens, mask, lambda t, p: (t != p).reshape(B, 1, 1, L) & _below(L))
            or getattr(_slip_of(check, fn, TARGET_SLIPS, tokens, pad_id, mask), "says", None)
            or _leaks_named(mask, tokens, pad_id))
    _wrong_values(check, "target mask", tokens, pad_id, says, _describe_cells(mask, expected, "batch, 1, query, key"))


def _leaks_named(mask: torch.Tensor, tokens: torch.Tensor, pad_id: int) -> Diagnosis:
    """No slip gives this mask: say what leaks through it in PyTorch's attention (an invariant, not a slip)."""
    leaks = _leaks(mask, tokens, pad_id)
    return Diagnosis("Used as attn_mask in F.scaled_dot_product_attention: " + "; ".join(leaks) + "." if leaks else
                     "It must be True exactly where the key is a real token and not after the query.")


def _target(keys: Callable, causal: Callable, combine: Callable = torch.logical_and) -> Callable:
    """A target-mask mutant: ``combine(keys(tokens, pad_id), causal(L))``, (B, 1, L, L)."""
    def mutant(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
        B, L = tokens.shape
        return combine(keys(tokens, pad_id), causal(L)).expand(B, 1, L, L)

    return mutant


def _queries(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, 1, L, 1): the padding put on the query axis."""
    return (tokens != pad_id)[:, None, :, None]


def _everything(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return torch.ones(tokens.shape[0], 1, 1, tokens.shape[1], dtype=torch.bool)


#: the target mask's slips, mutants ``(tokens, pad_id) -> (B, 1, L, L)``
TARGET_SLIPS = (
    Slip("inverted", Diagnosis("The whole mask is inverted:", "True means 'may attend' (a real, earlier-or-same key)."),
         _target(_keys, _below, lambda k, c: ~(k & c))),
    Slip("query axis", Diagnosis(
        "Your mask hides the rows of padded positions (the padding is applied on the query axis), so those rows are "
        "all False: they have nothing to attend to, which gives NaN in a softmax with -inf.", "Padding hides *keys* "
        "only (the key axis, columns): the padding mask has shape (B, 1, 1, L) and broadcasts over the rows."),
        _target(_queries, _below)),
    Slip("OR", Diagnosis(
        "The padding and causal parts are combined with OR: a position may then attend to anything that is either "
        "real or in the past.", "Combine them with AND (`&`): both must allow it."),
        _target(_keys, _below, torch.logical_or)),
    Slip("no causal", Diagnosis("Only the padding part is there: every position still sees the future.",
                                "AND it with the causal mask."),
         _target(_keys, lambda L: torch.ones(L, L, dtype=torch.bool))),
    Slip("no padding", Diagnosis("Only the causal part is there: padded keys can still be attended.",
                                 "AND it with the padding mask (True at tokens != pad_id, on the key axis)."),
         _target(_everything, _below)),
    Slip("hard-coded 0", Diagnosis(
        "Your mask hides the token 0 whatever the pad id, so 0 is hidden even where it is a real token: the pad id 0 "
        "is hard-coded.", "Compare with the `pad_id` argument."), _target(lambda t, p: _keys(t, 0), _below)),
    Slip("padding inverted", Diagnosis("The padding part is inverted: it keeps padded keys and hides real ones.",
                                       "True must mark real tokens (`tokens != pad_id`)."),
         _target(lambda t, p: ~_keys(t, p), _below)),
    Slip("causal inverted", Diagnosis("The causal part is inverted:", "True must be on and below the diagonal."),
         _target(_keys, lambda L: ~_below(L))),
    Slip("causal transposed", Diagnosis(
        "The causal part is upper-triangular (transposed): each position sees the future instead of the past.",
        "Use the lower triangle, True where key position <= query position."), _target(_keys, lambda L: ~_below(L, -1))),
    Slip("diagonal hidden", Diagnosis("The causal part hides the diagonal:",
                                      "a position must be able to attend to itself."),
         _target(_keys, lambda L: _below(L, -1))),
    Slip("both axes", Diagnosis(
        "Your mask also hides the rows of padded positions (padding on the query axis as well as on the key axis), "
        "so those rows are all False: a softmax over a row of -inf gives NaN, which then spreads.",
        "Padding hides *keys* only: AND the causal mask with a (B, 1, 1, L) padding mask."),
        _target(lambda t, p: _keys(t, p) & _queries(t, p), _below)),
    Slip("first n", _PREFIX, _target(lambda t, p: _prefix(t, p)[:, None, None, :], _below)),
)


def _target_shape_hint(shape: torch.Size, B: int, L: int) -> str:
    shape = tuple(shape)
    if shape == (B, L, L):
        return "The head axis is missing: (B, 1, L, L), so the mask broadcasts over the heads."
    if shape == (B, 1, 1, L):
        return "This is the shape of a padding mask alone; combine it with the (L, L) causal mask to get (B, 1, L, L)."
    if shape == (L, L) or shape == (1, 1, L, L):
        return "The batch axis is missing: the padding differs from sentence to sentence, so the mask is (B, 1, L, L)."
    return "Shape (B, 1, L, L): sentence, head axis of size 1, query position, key position."


def _leaks(mask: torch.Tensor, tokens: torch.Tensor, pad_id: int) -> list[str]:
    """Use the mask as attn_mask in PyTorch's attention and say what the output depends on."""
    B, L = tokens.shape
    g = generator(5)
    q, k, v = (torch.randn(B, 2, L, 3, generator=g, dtype=torch.float64) for _ in range(3))
    base = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    real = tokens != pad_id
    found = []
    for t in range(L - 1):  # change every key/value after position t
        k2, v2 = k.clone(), v.clone()
        k2[:, :, t + 1:] += 1.0
        v2[:, :, t + 1:] += 1.0
        out = F.scaled_dot_product_attention(q, k2, v2, attn_mask=mask)
        rows = slice(0, t + 1)
        if not torch.allclose(out[:, :, rows], base[:, :, rows], equal_nan=True):
            found.append(f"the output at position {t} changes when a later token changes (the future leaks)")
            break
    k2, v2 = k.clone(), v.clone()
    pad = (~real)[:, None, :, None].expand_as(k2)
    k2[pad] += 1.0
    v2[pad] += 1.0
    out = F.scaled_dot_product_attention(q, k2, v2, attn_mask=mask)
    keep = real[:, None, :, None].expand_as(out)
    if bool(pad.any()) and not torch.allclose(out[keep], base[keep], equal_nan=True):
        found.append("the output at real tokens changes when a padding token changes (padding leaks)")
    if bool(base[keep].isnan().any()):
        found.append("some real positions attend to nothing at all, which gives NaN in the softmax")
    return found


# --------------------------------------------------------------------------
# The declarations


def _token_answer(slip: Slip) -> Callable:
    """A slip of a mask of tokens made into a learner's function (for the generated catalogue tests)."""
    return lambda tokens, pad_id: slip.replay(None, tokens, pad_id)


PADDING_MASK = Exercise(
    "make_padding_mask", _check_make_padding_mask,
    oracle="tokens != pad_id, as (B, 1, 1, L)",
    cases="nine fixed batches (pad ids 0 to 3, real tokens equal to 0, left padding, B = 1, L = 1, the first batch's "
          "shape again, L = 70) and two drawn from the check's seed; tokens on a GPU",
    slips=PADDING_SLIPS, answer=_token_answer)

CAUSAL_MASK = Exercise(
    "make_causal_mask", _check_make_causal_mask,
    oracle="column <= row, (size, size)",
    cases=f"sizes {', '.join(str(n) for n in _SIZES)} called in turn, two drawn from the check's seed; a fixed device",
    slips=CAUSAL_SLIPS, answer=lambda slip: lambda size: slip.replay(None, size))

TARGET_MASK = Exercise(
    "make_target_mask", _check_make_target_mask,
    oracle="(tokens != pad_id) on the key axis AND column <= row, as (B, 1, L, L)",
    cases="the padding mask's batches; the learner's own padding and causal masks first, when it calls them",
    slips=TARGET_SLIPS, answer=_token_answer)
