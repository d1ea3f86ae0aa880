"""Checkers for lesson 00: vocabulary, encoding, decoding and padding.

The contracts (from the lesson):

* ``build_vocab(token_lists, min_freq=1) -> dict[str, int]``: ``<pad>``=0,
  ``<bos>``=1, ``<eos>``=2, ``<unk>``=3, then every token seen at least
  ``min_freq`` times; ids 0..n-1, each used once; the order of ordinary
  tokens is free.
* ``encode(tokens, vocab) -> list[int]``: ``[<bos>] + ids + [<eos>]``,
  unknown tokens as ``<unk>``.
* ``decode(ids, vocab) -> list[str]`` (a tuple is accepted too): drops
  ``<bos>`` and ``<pad>`` wherever they appear, stops at the first ``<eos>``.
* ``pad_batch(sequences, pad_id) -> LongTensor (B, L_max)``, padded on the right.

Expectations are computed here from the definitions (counting with
``collections.Counter``, looking ids up in the dictionary), never with the
course's own implementations. The test vocabulary gives ordinary tokens ids
that are not in the dictionary's insertion order, so looking a token up by
its position in the dict is told apart from looking up its id; encode and
decode also run against a second vocabulary, so a vocabulary kept outside the
function (or remembered from the first call) is caught. The data holds
sentences longer than 10 tokens and specials written as words (build_vocab:
``<unk>`` and ``<eos>``, which keep their ids; encode: each of the four, and a
sentence that itself starts with ``<bos>`` and ends with ``<eos>``), and
pad_batch meets lesson 06's lengths.

Each exercise is one ``Exercise`` declaration at the bottom. Its known slips
are ``Slip`` records, each mutant a learner's function (so that it is also the
slip's generated catalogue answer), replayed by the one matcher on the inputs
where the answer went wrong: arguments changed in place (``_ARGUMENT_SLIPS``:
the slip that changes the same argument), encode's wrong ids
(``ENCODE_SLIPS``, ``SPECIAL_WORD_SLIPS``), decode's wrong tokens
(``DECODE_SLIPS``), pad_batch's wrong shape and values (``PAD_SHAPE_SLIPS``,
``PAD_VALUE_SLIPS``). What an invariant shows (an id shared, a hole, a token
missing from every sentence but the first, <eos> in the output, ...) stays
named code beside the tables, tried before or after them in the order that
keeps the most specific message first.
"""

from __future__ import annotations

import copy
import inspect
import operator
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any, Callable

import torch

from ._core import Check, CheckResult, Raised, describe, fmt_shape, generator
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip

_PAD, _BOS, _EOS, _UNK = "<pad>", "<bos>", "<eos>", "<unk>"
_SPECIAL_IDS = {_PAD: 0, _BOS: 1, _EOS: 2, _UNK: 3}


def check_build_vocab(build_vocab: Callable) -> CheckResult:
    """Check ``build_vocab(token_lists, min_freq=1) -> dict[str, int]``."""
    return BUILD_VOCAB.check(build_vocab)


def check_encode(encode: Callable) -> CheckResult:
    """Check ``encode(tokens, vocab) -> list[int]`` with ``<bos>``, ``<eos>`` and ``<unk>``."""
    return ENCODE.check(encode)


def check_decode(decode: Callable) -> CheckResult:
    """Check ``decode(ids, vocab) -> list[str]``: drops ``<bos>``/``<pad>``, stops at ``<eos>``."""
    return DECODE.check(decode)


def check_pad_batch(pad_batch: Callable) -> CheckResult:
    """Check ``pad_batch(sequences, pad_id) -> LongTensor (B, L_max)`` padded on the right."""
    return PAD_BATCH.check(pad_batch)


# --------------------------------------------------------------------------
# Small helpers.


def _as_int(value: Any) -> int | None:
    """``value`` as a Python int if it is an integer (not a bool, not a float), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _show(items, limit: int = 8) -> str:
    items = list(items)
    plain = (str, int, float, list, tuple, type(None))
    text = ", ".join(repr(i) if isinstance(i, plain) else describe(i) for i in items[:limit])
    return "[" + text + (", ..." if len(items) > limit else "") + "]"


def _guarded(check: Check, fn: Callable, args: tuple, name: str) -> Any:
    """Call ``fn`` and fail if it changed any of its (list / dict) arguments, naming the slip that changes that one."""
    before = copy.deepcopy(args)
    result = check.call(fn, *args)
    changed = _changed_argument(name, before, args)
    if changed is not None:
        slip = matching_slip(_ARGUMENT_SLIPS[name], lambda slip: _changed_by(slip, name, before),
                             lambda label: label == changed)
        check.fail(slip.says if slip is not None else Diagnosis(f"Your {name} changed its argument `{changed}`.",
                                                                "Leave the inputs as they were."))
    return result


def _changed_argument(name: str, before: tuple, after: tuple) -> str | None:
    """The first of ``name``'s list / dict arguments that is not as it was (a dict's order counts)."""
    for label, old, new in zip(_ARG_LABELS[name], before, after):
        if old != new or (isinstance(old, dict) and list(old) != list(new)):
            return label
    return None


def _changed_by(slip: Slip, name: str, before: tuple) -> str | None:
    """The argument that the slip's mutant changes when it is given (copies of) the same inputs."""
    args = copy.deepcopy(before)
    slip.replay(None, *args)
    return _changed_argument(name, before, args)


_ARG_LABELS = {
    "build_vocab": ("token_lists",),
    "encode": ("tokens", "vocab"),
    "decode": ("ids", "vocab"),
    "pad_batch": ("sequences",),
}


# --------------------------------------------------------------------------
# The oracles: each exercise's definition, as the lesson states it.


def _build_vocab_oracle(token_lists: list[list[str]], min_freq: int = 1) -> dict[str, int]:
    """The specials at 0..3, then every token seen at least min_freq times, numbered in the order first seen."""
    counts = Counter(t for s in token_lists for t in s)
    vocab = dict(_SPECIAL_IDS)
    for token, count in counts.items():
        if count >= min_freq and token not in vocab:
            vocab[token] = len(vocab)
    return vocab


def _encode_oracle(tokens: list[str], vocab: dict[str, int]) -> list[int]:
    return [vocab[_BOS]] + [vocab.get(t, vocab[_UNK]) for t in tokens] + [vocab[_EOS]]


def _decode_oracle(ids: list[int], vocab: dict[str, int]) -> list[str]:
    itos = {i: t for t, i in vocab.items()}
    return _decoded(ids, vocab, itos.get, by_token=False)


def _pad_oracle(sequences: list[list[int]], pad_id: int, width: int | None = None) -> torch.Tensor:
    """The batch padded on the right to the longest sequence (or to ``width``, longer sequences cut there)."""
    width = max(len(s) for s in sequences) if width is None else width
    return torch.tensor([list(s[:width]) + [pad_id] * (width - len(s[:width])) for s in sequences], dtype=torch.long)


# --------------------------------------------------------------------------
# Slips that change an argument: each mutant is the oracle, changing that argument on the way.


def _sentences_extended(token_lists: list[list[str]], min_freq: int = 1) -> dict[str, int]:
    for sentence in token_lists:  # <eos> counted at the end of every sentence, appended to the caller's list
        sentence.append(_EOS)
    return _build_vocab_oracle(token_lists, min_freq)


def _frame_inserted(tokens: list[str], vocab: dict[str, int]) -> list[int]:
    tokens.insert(0, _BOS)
    tokens.append(_EOS)
    return [vocab.get(t, vocab[_UNK]) for t in tokens]


def _unknown_added(tokens: list[str], vocab: dict[str, int]) -> list[int]:
    ids = [vocab[_BOS]] + [vocab.setdefault(t, len(vocab)) for t in tokens] + [vocab[_EOS]]
    vocab["<a token nobody wrote>"] = len(vocab)  # and one more: the vocabulary grows whatever the tokens
    return ids


def _bos_popped(ids: list[int], vocab: dict[str, int]) -> list[str]:
    first = ids.pop(0) if ids else None
    return _decode_oracle(([] if first is None else [first]) + ids, vocab)


def _vocab_inverted_in_place(ids: list[int], vocab: dict[str, int]) -> list[str]:
    tokens = _decode_oracle(ids, vocab)
    for token, i in list(vocab.items()):
        vocab[i] = token
    return tokens


def _sequences_padded_in_place(sequences: list[list[int]], pad_id: int) -> torch.Tensor:
    longest = max(len(s) for s in sequences)
    for seq in sequences:
        seq += [pad_id] * (longest - len(seq))
    sequences.append([])  # and the caller's batch changes whatever the lengths
    return _pad_oracle(sequences[:-1], pad_id)


_ARGUMENT_SLIPS = {
    "build_vocab": (Slip("changes token_lists", Diagnosis(
        "Your build_vocab changed its input `token_lists` (the sentences it was given).",
        "Count the tokens without editing the lists: no `append`, `remove`, `sort()` or `pop` on them."),
        _sentences_extended),),
    "encode": (
        Slip("changes tokens", Diagnosis(
            "Your encode changed its input `tokens` in place.",
            "Build a new list instead of inserting <bos> / <eos> into the caller's list "
            "(`tokens.insert(0, ...)` or `tokens.append(...)` edits the caller's sentence)."), _frame_inserted),
        Slip("changes vocab", Diagnosis(
            "Your encode changed the vocabulary: it added or changed entries of `vocab`.",
            "A token that is not in the vocabulary must be encoded as the id of <unk>, not added to the vocabulary "
            "(avoid `vocab.setdefault(...)` and `vocab[token] = ...`)."), _unknown_added),
    ),
    "decode": (
        Slip("changes ids", Diagnosis(
            "Your decode changed its input `ids` in place (for example with `ids.pop(0)` or `ids.remove(...)`).",
            "Read the ids without editing the caller's list."), _bos_popped),
        Slip("changes vocab", Diagnosis("Your decode changed the vocabulary `vocab`.",
                                        "Build a separate id -> token mapping instead."), _vocab_inverted_in_place),
    ),
    "pad_batch": (Slip("changes sequences", Diagnosis(
        "Your pad_batch changed its input `sequences`: the caller's lists now hold pad ids.",
        "Likely cause: `seq += [pad_id] * k` or `seq.extend(...)` on the input lists. Build new lists "
        "(`seq + [pad_id] * k`) or fill a new tensor instead."), _sequences_padded_in_place),),
}


# --------------------------------------------------------------------------
# build_vocab

# Sentences chosen so that counts separate the usual mistakes:
#   - tokens seen exactly once, some only in the first or the last sentence;
#   - "sehr" occurs twice, but in one sentence only (count 2, sentence count 1);
#   - "Berlin" keeps its capital letter (build_vocab must not change tokens);
#   - counts 1, 2, 3 and more, for min_freq 1, 2 and 3.
_SENTENCES = [
    ["müde", "kinder", "schlafen", "."],
    ["der", "hund", "schläft", "."],
    ["die", "katze", "schläft", "nicht", "."],
    ["der", "hund", "sieht", "die", "katze", "."],
    ["sehr", "sehr", "gut", "!"],
    ["der", "zug", "fährt", "nach", "Berlin", "."],
    ["der", "hund", "ist", "groß", "."],
    ["grüße", "aus", "köln", "?"],
]


# A first call on other sentences: a vocabulary kept between calls (a mutable
# default argument, a global dict) then shows these tokens in later results.
_WARM_UP = [["ente", "schwimmt", "."]]
_WARM_UP_ONLY = {"ente", "schwimmt"}

_SHARED_STATE = (
    "The vocabulary survives from one call of build_vocab to the next.\n"
    "Likely cause: a mutable default argument (`def build_vocab(token_lists, min_freq=1, vocab={})`) "
    "or a dict defined outside the function: the same dict is reused and keeps growing. "
    "Create a new dict inside the function on every call."
)


# Checked last, once the rest holds: a sentence of 13 tokens with two specials written as words.
_LONG_SENTENCE = ["ein", "<unk>", "steht", "im", "text", ",", "und", "ein", "<eos>", "mitten", "im", "satz", ":",
                  "<br>"]  # '<br>' only looks like a special
_LITERAL_SPECIALS = {t for t in _LONG_SENTENCE if t in _SPECIAL_IDS}


def _expected_tokens(min_freq: int, sentences: list[list[str]] = _SENTENCES) -> set[str]:
    """The ordinary tokens seen at least min_freq times (a special in the data is not a new token)."""
    counts = Counter(t for s in sentences for t in s)
    return {t for t, c in counts.items() if c >= min_freq} - set(_SPECIAL_IDS)


def _check_build_vocab(check: Check, build_vocab: Callable) -> None:
    check.callable_(build_vocab, "build_vocab")
    counts = Counter(t for s in _SENTENCES for t in s)
    sentence_counts = Counter(t for s in _SENTENCES for t in set(s))
    returned = [_guarded(check, build_vocab, (copy.deepcopy(_WARM_UP),), "build_vocab")]

    def run(**kwargs: Any) -> dict:
        call = "build_vocab(token_lists" + "".join(f", {k}={v}" for k, v in kwargs.items()) + ")"
        raw = _guarded(check, build_vocab, (copy.deepcopy(_SENTENCES), *kwargs.values()), "build_vocab")  # by
        # position, as lesson 00 calls it
        if raw is not None and any(raw is earlier for earlier in returned):
            check.fail(f"{_SHARED_STATE}\n{call} returned the very same dict object as an earlier call.")
        returned.append(raw)  # kept alive, so no two results can share an identity by accident
        vocab = _vocab_result(check, raw, call)
        _no_growth_on_lookup(check, raw, call)
        return vocab

    vocab = run(min_freq=1)
    check.ok("returns a dict from tokens (str) to ids (int)")
    _specials_in_place(check, vocab)
    _ids_contiguous(check, vocab)
    for min_freq in (1, 2, 3, 100):
        vocab = run(min_freq=min_freq)
        _specials_in_place(check, vocab, f" (with min_freq={min_freq})")
        _token_set(check, vocab, min_freq, counts, sentence_counts)
        _ids_contiguous(check, vocab, f" (with min_freq={min_freq})", filtered=min_freq > 1)
    check.ok("min_freq=1, 2, 3 keep exactly the tokens seen at least that often; a large min_freq keeps only the specials")
    vocab = run()
    _specials_in_place(check, vocab, " (without min_freq)")
    _token_set(check, vocab, 1, counts, sentence_counts, default_call=True)
    _ids_contiguous(check, vocab, " (without min_freq)")
    check.ok("without min_freq, every token is kept (min_freq defaults to 1)")
    _check_literal_specials(check, build_vocab)
    _check_drawn_corpus(check, build_vocab)
    # recorded last: every call above could still have broken them
    check.ok("the four special tokens have ids 0, 1, 2, 3 (<pad>, <bos>, <eos>, <unk>)")
    check.ok("ids are 0..n-1, each used once")
    check.ok("leaves the sentences it is given unchanged")


# Words the drawn cases pick from: the data's, and others that no fixed case holds.
_WORDS = sorted({t for s in _SENTENCES for t in s}) + ["vogel", "baum", "haus", "Rhein", "singt", "am", ",", "ein"]


def _drawn_corpus(seed: int) -> tuple[list[list[str]], int]:
    """Sentences and a min_freq drawn at random (``generator(seed)``: a grading run's hidden seed draws others)."""
    g = generator(seed)
    sentences = [[_WORDS[int(i)] for i in torch.randint(0, len(_WORDS), (int(n),), generator=g)]
                 for n in torch.randint(1, 13, (int(torch.randint(4, 10, (), generator=g)),), generator=g)]
    return sentences, int(torch.randint(1, 4, (), generator=g))


def _check_drawn_corpus(check: Check, build_vocab: Callable) -> None:
    """Sentences drawn at random, with a random min_freq: the same rules hold."""
    sentences, min_freq = _drawn_corpus(61)
    call = f"build_vocab(token_lists, min_freq={min_freq}) on {len(sentences)} sentences drawn at random"
    raw = _guarded(check, build_vocab, (copy.deepcopy(sentences), min_freq), "build_vocab")
    vocab = _vocab_result(check, raw, call)
    when = f" (on sentences drawn at random, min_freq={min_freq}: {_show(sentences, 3)})"
    _specials_in_place(check, vocab, when)
    _token_set(check, vocab, min_freq, Counter(t for s in sentences for t in s),
               Counter(t for s in sentences for t in set(s)), sentences=sentences)
    _ids_contiguous(check, vocab, when, filtered=min_freq > 1)


def _check_literal_specials(check: Check, build_vocab: Callable) -> None:
    """A corpus may hold '<unk>' or '<eos>' as words, and sentences longer than 10 tokens: the specials keep their ids."""
    sentences = copy.deepcopy(_SENTENCES) + [list(_LONG_SENTENCE)]
    when = f" (when a sentence contains {' and '.join(repr(t) for t in sorted(_LITERAL_SPECIALS))} as words)"
    vocab = _vocab_result(check, _guarded(check, build_vocab, (sentences,), "build_vocab"), "build_vocab(token_lists)")
    _specials_in_place(check, vocab, when)
    missing = _expected_tokens(1, sentences) - set(vocab)
    if missing == {"<br>"}:
        check.fail(
            "build_vocab(token_lists) leaves out '<br>', a word of the data that only looks like a special token.\n"
            "Only the four specials are special: skip a token when it is already in vocab (`if token not in vocab`), "
            "not because of how it is written."
        )
    if missing:
        check.fail(
            f"build_vocab(token_lists) misses tokens of a sentence of {len(_LONG_SENTENCE)} tokens: "
            f"{_show(sorted(missing))}.\nKeep every token of every sentence, whatever its length."
        )
    _ids_contiguous(check, vocab, when)
    check.ok("specials written as words in the data keep their ids, other words in <...> get their own; sentences "
             "longer than 10 tokens are counted whole")


def _no_growth_on_lookup(check: Check, vocab: Any, call: str) -> None:
    """Fail if looking up an unknown token adds it (a ``defaultdict``); tried on a copy."""
    try:
        probe = copy.copy(vocab)
        before = len(probe)
        value = probe["<a token nobody wrote>"]
        grew = len(probe) != before
    except Exception:  # KeyError is the normal answer; an uncopyable mapping cannot grow either
        return
    if grew:
        check.fail(
            f"{call} returned a {type(vocab).__name__} that adds every token it is asked about: looking up a "
            f"made-up token inserted it, with the value {value!r}.\n"
            f"encode would then give unknown tokens new ids instead of <unk>, and the vocabulary would keep growing. "
            f"Return a plain dict (for example `return dict(vocab)`), or number the tokens without a defaultdict."
        )


def _vocab_result(check: Check, vocab: Any, call: str) -> dict:
    if vocab is None:
        check.fail(f"{call} returned None. Did you forget `return vocab`?")
    if isinstance(vocab, tuple) and len(vocab) == 2 and isinstance(vocab[0], Mapping):
        check.fail(
            f"{call} returned a tuple of two things (a {type(vocab[0]).__name__} "
            f"and {describe(vocab[1])}), for example (stoi, itos).\n"
            f"Return only the dict token -> id; decode builds the id -> token direction itself."
        )
    if not isinstance(vocab, Mapping):
        extra = ""
        if isinstance(vocab, (list, tuple)):
            extra = (
                "\nA list of tokens maps ids to tokens, but the lesson needs the other direction: "
                "a dict such as {'<pad>': 0, '<bos>': 1, ..., 'hund': 7}."
            )
        check.fail(f"{call} should return a dict (token -> id), but returned {describe(vocab)}.{extra}")
    items = list(vocab.items())
    if items and all(_as_int(k) is not None for k, _ in items) and all(isinstance(v, str) for _, v in items):
        check.fail(
            f"{call} returned a dict from ids to tokens (for example {items[0][0]!r}: {items[0][1]!r}).\n"
            f"The vocabulary maps the other way, token -> id: {{'<pad>': 0, '<bos>': 1, ...}}."
        )
    bad_keys = [k for k, _ in items if not isinstance(k, str)]
    if bad_keys:
        check.fail(f"The keys of the vocabulary should be tokens (str), but some are not: {_show(bad_keys)}.")
    tensors = [(k, v) for k, v in items if isinstance(v, torch.Tensor)]
    if tensors:
        k, v = tensors[0]
        check.fail(
            f"The ids of the vocabulary should be plain Python ints, but for example {k!r} maps to a "
            f"{describe(v)}.\nNumber the tokens with ints (`len(vocab)` or a counter); tensors come later, in pad_batch."
        )
    bad_values = [(k, v) for k, v in items if _as_int(v) is None]
    if bad_values:
        k, v = bad_values[0]
        check.fail(
            f"The values of the vocabulary should be integer ids, but for example {k!r} maps to {describe(v)}.\n"
            f"Assign each token a whole number: its position when you number the tokens."
        )
    return {k: _as_int(v) for k, v in items}


def _specials_in_place(check: Check, vocab: dict, when: str = "") -> None:
    missing = [s for s in _SPECIAL_IDS if s not in vocab]
    if missing:
        check.fail(
            f"The vocabulary{when} lacks the special token{'s' if len(missing) > 1 else ''} {', '.join(missing)}.\n"
            f"Start the vocabulary with the four specials <pad>, <bos>, <eos>, <unk> (ids 0, 1, 2, 3), "
            f"then add the ordinary tokens."
        )
    wrong = {s: vocab[s] for s, i in _SPECIAL_IDS.items() if vocab[s] != i}
    if wrong:
        actual = ", ".join(f"{s}={vocab[s]}" for s in _SPECIAL_IDS)
        hint = "Give them ids in this order: <pad>=0, <bos>=1, <eos>=2, <unk>=3"
        if when.startswith(" (when a sentence contains") and all(v >= 4 for v in wrong.values()):
            hint = (
                f"The sentences contain {', '.join(repr(t) for t in sorted(wrong))} literally, as a word, and your "
                f"build_vocab numbered it again as a new token, which moved the special. Skip tokens that are "
                f"already in the vocabulary (`if token not in vocab`), so the specials keep 0, 1, 2, 3"
            )
        elif all(v >= 4 for v in wrong.values()):
            hint = "The specials come first, before any ordinary token"
        elif sorted(vocab[s] for s in _SPECIAL_IDS) == [0, 1, 2, 3]:
            hint = "They are in the wrong order (a set does not keep order); number them as a list: <pad>=0, <bos>=1, <eos>=2, <unk>=3"
        check.fail(
            f"The special tokens{when} have the wrong ids.\n"
            f"  expected: <pad>=0, <bos>=1, <eos>=2, <unk>=3\n"
            f"  actual:   {actual}\n"
            f"{hint}. Other code (padding masks, decoding) relies on these ids."
        )


def _ids_contiguous(check: Check, vocab: dict, when: str = "", filtered: bool = False) -> None:
    ids = list(vocab.values())
    n = len(vocab)
    repeated = sorted(i for i, c in Counter(ids).items() if c > 1)
    counts = Counter(t for s in _SENTENCES for t in s)
    ordinary = [t for t in vocab if t not in _SPECIAL_IDS]
    if repeated and ordinary and all(vocab[t] == counts[t] for t in ordinary):
        t = ordinary[0]
        check.fail(
            f"The vocabulary{when} maps each token to how often it occurs, not to an id: for example "
            f"{t!r} -> {vocab[t]}, and {t!r} occurs {counts[t]} time{'s' if counts[t] != 1 else ''}.\n"
            f"Use the counts only to decide which tokens to keep; then give each kept token the next free id (len(vocab))."
        )
    if repeated:
        i = repeated[0]
        sharing = [t for t, j in vocab.items() if j == i]
        extra = ""
        if i < 4:
            extra = "\nIds 0..3 belong to the special tokens: number the ordinary tokens from 4 on (for example from len(vocab))."
        check.fail(
            f"{len(sharing)} tokens share an id{when}: {_show(sharing)} all have id {i}. Every token needs its own id.{extra}"
        )
    if sorted(ids) != list(range(n)):
        outside = sorted(i for i in ids if not 0 <= i < n)
        gaps = sorted(set(range(n)) - set(ids))
        if filtered:  # with min_freq=1 the ids were contiguous: the holes come from the tokens left out
            check.fail(
                f"The ids{when} have holes: for {n} tokens they should be exactly 0..{n - 1}, contiguous (they "
                f"become rows of an embedding table of size len(vocab)).\n"
                f"  ids missing: {_show(gaps)}; ids too large: {_show(outside)}\n"
                f"With min_freq=1 the ids were fine, so the tokens are numbered before the rare ones are filtered out "
                f"(for example `for i, (token, count) in enumerate(counts.items())` followed by `if count >= min_freq`). "
                f"Give each kept token the next free id, `len(vocab)`, when you add it."
            )
        check.fail(
            f"The ids{when} should be exactly 0..{n - 1} for {n} tokens (contiguous: they become rows of an "
            f"embedding table of size len(vocab)).\n"
            f"  ids missing: {_show(gaps)}; ids too large: {_show(outside)}\n"
            f"Likely cause: numbering the ordinary tokens from the wrong start (off by one), or counting a "
            f"token twice while numbering. Number new tokens with `len(vocab)` as you add them."
        )


def _token_set(check: Check, vocab: dict, min_freq: int, counts: Counter, sentence_counts: Counter, default_call: bool = False,
               sentences: list[list[str]] = _SENTENCES) -> None:
    expected = _expected_tokens(min_freq, sentences)
    actual = set(vocab) - set(_SPECIAL_IDS)
    missing = expected - actual
    extra = actual - expected
    call = "build_vocab(token_lists)" if default_call else f"build_vocab(token_lists, min_freq={min_freq})"
    if extra:
        _extra_tokens(check, call, extra, counts, min_freq)
    if missing:
        _missing_tokens(check, call, missing, expected, actual, counts, sentence_counts, min_freq, default_call)


def _extra_tokens(check: Check, call: str, extra: set[str], counts: Counter, min_freq: int) -> None:
    """Tokens the vocabulary should not hold: from an earlier call, changed ones, or ones seen too rarely."""
    unseen = {t for t in extra if t not in counts}
    if unseen and unseen <= _WARM_UP_ONLY:
        check.fail(
            f"{_SHARED_STATE}\n{call} contains {_show(sorted(unseen))}, tokens that only an earlier call of "
            f"build_vocab (on other sentences) was given."
        )
    if unseen:
        chars = all(len(t) == 1 for t in unseen)
        lowered = any(t != s and t == s.lower() for t in unseen for s in counts)
        cause = (
            "These look like single characters: did you iterate over a string instead of over the list of tokens?"
            if chars
            else "It changed tokens (for example lowercased them): keep every token exactly as given."
            if lowered
            else "Add only the tokens of the sentences."
        )
        check.fail(f"{cause}\n{call} contains tokens that are not in the sentences: {_show(sorted(unseen))}.")
    rare = sorted(extra, key=lambda t: (counts[t], t))
    check.fail(
        f"{call} keeps tokens seen fewer than {min_freq} times: {_show(rare)} "
        f"(seen {counts[rare[0]]} time{'s' if counts[rare[0]] != 1 else ''}).\n"
        f"Keep a token only if its count is at least min_freq; is min_freq used at all?"
    )


def _missing_tokens(check: Check, call: str, missing: set[str], expected: set[str], actual: set[str], counts: Counter,
                    sentence_counts: Counter, min_freq: int, default_call: bool) -> None:
    """Tokens the vocabulary lacks: the invariant their counts and sentences break names the cause."""
    lost = sorted(missing, key=lambda t: (counts[t], t))
    first_only = {t for t in _SENTENCES[0]} - {t for s in _SENTENCES[1:] for t in s}
    last_only = {t for t in _SENTENCES[-1]} - {t for s in _SENTENCES[:-1] for t in s}
    once_per_sentence = {t for t in expected if sentence_counts[t] < min_freq <= counts[t]}
    kept = expected & actual
    # every kept token is at least as frequent as every missing one: a cut after the n most common
    capped = bool(kept) and min(counts[t] for t in kept) >= max(counts[t] for t in missing)
    cap_text = (
        f"a capped vocabulary: it keeps {len(kept)} of the {len(expected)} tokens seen at least "
        f"{min_freq} time{'s' if min_freq != 1 else ''}, the most frequent ones. `counts.most_common(n)` returns "
        f"only n tokens; call `most_common()` without a number (or loop over all the counts), since min_freq alone decides"
    )
    if default_call:
        cause = "With min_freq given explicitly this worked, so the default is wrong: the default of min_freq is 1 (keep every token)."
    elif all(not t.isalnum() for t in missing):
        cause = (
            "The missing tokens are punctuation: punctuation marks are tokens too (the model must learn to "
            "produce '.' and '?'). Keep every token, without an isalpha / isalnum filter."
        )
    elif missing <= first_only:
        cause = "Only tokens of the first sentence are missing: does your loop skip the first sentence?"
    elif missing <= last_only:
        cause = "Only tokens of the last sentence are missing: does your loop stop one sentence early (the loop stops early)?"
        if capped:
            cause = (
                "Only tokens of the last sentence are missing. Either the loop stops early (one sentence too soon), "
                f"or this is {cap_text}."
            )
    elif missing <= once_per_sentence:
        cause = (
            f"{_show(sorted(missing))} occur{'s' if len(missing) == 1 else ''} {min_freq} times, but in fewer "
            f"sentences: count every occurrence of a token, not once per sentence (avoid set(sentence))."
        )
    elif missing == {t for t in expected if counts[t] == min_freq}:
        cause = (
            f"The missing tokens occur exactly {min_freq} time{'s' if min_freq != 1 else ''}: a token is kept "
            f"when its count is at least min_freq, so compare with `>=`, not `>`."
        )
    elif capped:
        cause = f"This looks like {cap_text}."
    else:
        cause = "Count every token of every sentence, then keep those with count >= min_freq."
    check.fail(
        f"{cause}\n{call} misses tokens seen at least {min_freq} time{'s' if min_freq != 1 else ''}: {_show(lost)} "
        f"(for example {lost[0]!r} is seen {counts[lost[0]]} time{'s' if counts[lost[0]] != 1 else ''})."
    )


# --------------------------------------------------------------------------
# encode / decode: a vocabulary whose ids are NOT in insertion order.

_VOCAB = {
    "<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3,
    "katze": 9, "der": 5, "hund": 11, ".": 4, "schläft": 7, "die": 10, "sieht": 6, "nicht": 8, "maus": 12,
}
# A second vocabulary (same specials, other ids): catches a vocabulary kept
# outside the function, or the first one seen remembered between calls.
_VOCAB_2 = {
    "<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3,
    "maus": 4, "nicht": 5, "die": 6, "schläft": 7, "katze": 8, "sieht": 9, "hund": 10, "der": 11, ".": 12, "ente": 13,
}
_OWN_VOCAB = (
    "Likely cause: a vocabulary of its own (a global dict, or the first vocabulary it was given, remembered "
    "between calls) instead of the `vocab` argument. Look every id up in the `vocab` passed to this call."
)


def _ids_result(check: Check, value: Any, call: str) -> list[int]:
    if value is None:
        check.fail(f"{call} returned None. Did you forget a `return` statement?")
    if isinstance(value, torch.Tensor):
        check.fail(
            f"{call} should return a list of ints, but returned a {describe(value)}.\n"
            f"Keep encode to plain lists: turning a batch of sentences into one tensor is pad_batch's job."
        )
    if isinstance(value, tuple):
        check.fail(
            f"{call} returned a tuple ({_show(value)[1:-1]}); return a list instead.\n"
            f"The ids are used as a list later (the next cell does `ids + [...]`, which fails for a tuple): "
            f"build a list, or wrap the result in list(...)."
        )
    if not isinstance(value, list):
        check.fail(f"{call} should return a list of ints, but returned {describe(value)}.")
    odd = [v for v in value if not isinstance(v, (str, torch.Tensor, type(None))) and _as_int(v) is None]
    if odd:
        check.fail(f"{call} should return integer ids, but returned {_show(value)}.")
    if any(v is None for v in value):
        check.fail(
            f"{call} returned None in place of some ids: {_show(value)}.\n"
            f"`vocab.get(token)` gives None for a token that is not in the vocabulary. Give it a default: "
            f"`vocab.get(token, vocab['<unk>'])`."
        )
    if _UNK in value and all(v == _UNK or not isinstance(v, str) for v in value):
        check.fail(
            f"{call} put the string '<unk>' where a token is unknown: {_show(value)}.\n"
            f"Use the id of <unk> instead of the token itself: `vocab.get(token, vocab['<unk>'])`."
        )
    if any(isinstance(v, str) for v in value):
        check.fail(
            f"{call} returned tokens ({_show(value)}), not ids.\n"
            f"Look each token up in the vocabulary: vocab[token] is its id."
        )
    if any(isinstance(v, torch.Tensor) for v in value):
        check.fail(
            f"{call} returned a list of tensors ({describe(next(v for v in value if isinstance(v, torch.Tensor)))}, ...), "
            f"but the ids should be plain Python ints.\nLook the ids up as ints (`vocab[token]`), or use `.item()` / `.tolist()`."
        )
    ints = [_as_int(v) for v in value]
    if any(v is None for v in ints):
        check.fail(f"{call} should return integer ids, but returned {_show(value)}.")
    return ints


def _check_encode(check: Check, encode: Callable) -> None:
    check.callable_(encode, "encode")
    v = _VOCAB
    tokens = ["die", "katze", "sieht", "die", "maus", "."]  # 'die' twice
    want = _encode_oracle(tokens, v)
    got = _ids_result(check, _guarded(check, encode, (list(tokens), dict(v)), "encode"), "encode(tokens, vocab)")
    check.ok("returns a list of int ids")
    if got != want:
        shown = f"  tokens:   {tokens}\n  expected: {want}\n  actual:   {got}"
        slip = matching_slip(ENCODE_SLIPS, lambda slip: slip.replay(None, list(tokens), dict(v)),
                             lambda wrong: wrong == got)
        check.fail(slip.says.showing(shown) if slip is not None else f"{_encode_cause(got, want, v)}\n{shown}")
    check.ok("adds <bos> first and <eos> last, and looks the ids up in the vocabulary (not by position)")
    _encode_second_vocabulary(check, encode, tokens)
    _encode_unknown_tokens(check, encode)
    _encode_edge_cases(check, encode)
    _encode_drawn(check, encode)
    check.ok("leaves its inputs (tokens, vocab) unchanged")


def _by_position(tokens: list[str], vocab: dict[str, int]) -> list[int]:
    """Each token's position among the dict's keys, which is not its id."""
    return [list(vocab).index(t) for t in tokens]


_BY_POSITION = Diagnosis(
    "The ids are the tokens' positions in the dict, not their ids.",
    "The id of a token is vocab[token]; the order in which a dict stores its keys is not the numbering.")

#: encode's known slips, each a learner's encode, tried in order once the ids of the first sentence are wrong
ENCODE_SLIPS = (
    Slip("eos twice", Diagnosis("<eos> is added twice at the end:", "add it once, after the id of the last token."),
         lambda tokens, vocab: _encode_oracle(tokens, vocab) + [vocab[_EOS]]),
    Slip("punctuation dropped", Diagnosis("The punctuation ('.') was dropped:",
                                          "punctuation marks are tokens too; encode every token."),
         lambda tokens, vocab: _encode_oracle([t for t in tokens if t.isalnum()], vocab)),
    Slip("reversed", Diagnosis("The ids are in reverse order:", "keep the tokens in the order they were given."),
         lambda tokens, vocab: _encode_oracle(tokens[::-1], vocab)),
    Slip("deduplicated", Diagnosis(
        "The repeated token 'die' appears only once:",
        "every occurrence needs its own id, in place (no set or dict.fromkeys on the tokens)."),
        lambda tokens, vocab: _encode_oracle(list(dict.fromkeys(tokens)), vocab)),
    Slip("no specials", Diagnosis("<bos> and <eos> are missing.",
                                  "Add the id of <bos> at the start and the id of <eos> at the end."),
         lambda tokens, vocab: _encode_oracle(tokens, vocab)[1:-1]),
    Slip("no bos", Diagnosis("The id of <bos> (1) is missing at the start."),
         lambda tokens, vocab: _encode_oracle(tokens, vocab)[1:]),
    Slip("no eos", Diagnosis("The id of <eos> (2) is missing at the end."),
         lambda tokens, vocab: _encode_oracle(tokens, vocab)[:-1]),
    Slip("swapped", Diagnosis("<bos> and <eos> are swapped:", "<bos> (1) starts the sentence, <eos> (2) ends it."),
         lambda tokens, vocab: [vocab[_EOS]] + _encode_oracle(tokens, vocab)[1:-1] + [vocab[_BOS]]),
    Slip("by position", _BY_POSITION,
         lambda tokens, vocab: [vocab[_BOS]] + _by_position(tokens, vocab) + [vocab[_EOS]]),
    Slip("by position, no frame", _BY_POSITION, _by_position),
    Slip("by position, counted from 1", _BY_POSITION,
         lambda tokens, vocab: [vocab[_BOS]] + [p + 1 for p in _by_position(tokens, vocab)] + [vocab[_EOS]]),
)


def _encode_cause(got: list[int], want: list[int], v: dict[str, int]) -> str:
    """What the wrong ids of the first sentence show, when no slip of the table gives them (invariants)."""
    if len(got) > len(want) and got[: len(want)] == want and set(got[len(want):]) == {v[_PAD]}:
        return "encode added padding after <eos>: return just the sentence; padding a batch is pad_batch's job."
    if len(got) == len(want) and got[0] != v[_BOS]:
        return f"The first id should be vocab['<bos>'] = {v[_BOS]}, not {got[0]}."
    if len(got) == len(want) and got[-1] != v[_EOS]:
        return f"The last id should be vocab['<eos>'] = {v[_EOS]}, not {got[-1]}."
    return "encode returned the wrong ids. Expected [vocab['<bos>']] + [vocab[t] for each token] + [vocab['<eos>']]."


def _drawn_vocab(g: torch.Generator) -> dict[str, int]:
    """The specials at 0..3, then the words of _VOCAB and a few others under ids in a random order."""
    words = [t for t in _VOCAB if t not in _SPECIAL_IDS] + ["vogel", "baum", "Rhein"]
    order = torch.randperm(len(words), generator=g).tolist()
    return {**_SPECIAL_IDS, **{words[i]: 4 + n for n, i in enumerate(order)}}


def _encode_drawn(check: Check, encode: Callable) -> None:
    """A vocabulary and a sentence drawn at random (``generator``: a grading run's hidden seed draws others), with
    unknown words."""
    g = generator(62)
    v = _drawn_vocab(g)
    tokens = [_WORDS[int(i)] for i in torch.randint(0, len(_WORDS), (int(torch.randint(1, 20, (), generator=g)),),
                                                     generator=g)]
    want = [v[_BOS]] + [v.get(t, v[_UNK]) for t in tokens] + [v[_EOS]]
    got = _ids_result(check, _guarded(check, encode, (list(tokens), dict(v)), "encode"), "encode(tokens, vocab)")
    if got != want:
        check.fail(f"encode gave the wrong ids for a sentence and a vocabulary drawn at random.\n  tokens:   {tokens}\n"
                   f"  vocab:    {v}\n  expected: {want}\n  actual:   {got}\nExpected [vocab['<bos>']] + "
                   f"[vocab[t] for each token, vocab['<unk>'] for a token not in vocab] + [vocab['<eos>']].")


def _encode_second_vocabulary(check: Check, encode: Callable, tokens: list[str]) -> None:
    v2 = _VOCAB_2
    want = [v2[_BOS]] + [v2[t] for t in tokens] + [v2[_EOS]]
    got = _ids_result(check, _guarded(check, encode, (list(tokens), dict(v2)), "encode"), "encode(tokens, vocab)")
    if got != want:
        check.fail(
            f"{_OWN_VOCAB}\nWith a second, different vocabulary, encode gave the wrong ids.\n"
            f"  tokens:   {tokens}\n  vocab:    {v2}\n  expected: {want}\n  actual:   {got}"
        )
    check.ok("uses the vocabulary it is given (also a second, different one)")


def _encode_unknown_tokens(check: Check, encode: Callable) -> None:
    v = _VOCAB
    unknown = ["die", "ente", "sieht", "den", "hund", "."]
    want = [v[_BOS], v["die"], v[_UNK], v["sieht"], v[_UNK], v["hund"], v["."], v[_EOS]]
    probe = check.attempt(encode, list(unknown), dict(v), what="encode")
    if isinstance(probe, Raised) and isinstance(probe.exception, KeyError):  # a diagnosis, not just a traceback
        check.fail(
            f"encode raised KeyError: {probe.exception} for a token that is not in the vocabulary.\n"
            f"Unknown tokens must become the id of <unk>: `vocab.get(token, vocab['<unk>'])`."
        )
    got = _ids_result(check, _guarded(check, encode, (list(unknown), dict(v)), "encode"), "encode(tokens, vocab)")
    if got != want:
        shown = f"  tokens:   {unknown}  ('ente' and 'den' are not in the vocabulary)\n  expected: {want}\n  actual:   {got}"
        if len(got) == len(want) - 2:
            cause = "Unknown tokens were dropped; each one must become the id of <unk> (3), so the sentence keeps its length."
        elif len(got) == len(want) and got[2] == got[4] == v[_PAD]:
            cause = "Unknown tokens became 0, the id of <pad>; they should get the id of <unk>, vocab['<unk>'] = 3."
        elif len(got) == len(want) and got[2] == got[4]:
            cause = f"Unknown tokens became {got[2]}; they should get the id of <unk>, vocab['<unk>'] = {v[_UNK]}."
        else:
            cause = "Each unknown token should become vocab['<unk>'] and every known token its own id."
        check.fail(f"{cause}\nencode handles unknown tokens wrongly.\n{shown}")

    capital = ["Hund", "."]
    got = _ids_result(check, _guarded(check, encode, (list(capital), dict(v)), "encode"), "encode(tokens, vocab)")
    if got != [v[_BOS], v[_UNK], v["."], v[_EOS]]:
        check.fail(
            f"encode(['Hund', '.'], vocab) should give {[v[_BOS], v[_UNK], v['.'], v[_EOS]]} ('Hund' with a capital H "
            f"is not in the vocabulary), but gave {got}.\n"
            f"encode should look tokens up exactly as given; lowercasing is the tokenizer's job."
        )
    check.ok("maps tokens missing from the vocabulary to <unk> and never changes the vocabulary")


_LONG_TOKENS = ["der", "hund", "schläft", "nicht", "und", "die", "katze", "sieht", "die", "maus", "nicht", "im", "garten", "."]
_VERY_LONG_TOKENS = _LONG_TOKENS * 11  # 154 tokens: longer than any fixed cut at 64, 100 or 128
# Each special written as a word inside a sentence, then all four at once in a sentence that itself starts
# with '<bos>' and ends with '<eos>': each is a token like any other, looked up with vocab[token].
_SPECIAL_WORD_SENTENCES = [
    ["der", _EOS, "hund", "."],
    ["die", _PAD, "katze", "schläft", "."],
    ["der", "hund", _BOS, "sieht", "."],
    ["die", "maus", _UNK, "nicht", "."],
    [_BOS, "die", _PAD, "katze", _UNK, "sieht", _EOS, "die", "maus", _EOS],
]


def _encode_edge_cases(check: Check, encode: Callable) -> None:
    """An empty sentence, sentences of 14 and 154 tokens, and each special token written as a word."""
    v = _VOCAB
    got = _ids_result(check, _guarded(check, encode, ([], dict(v)), "encode"), "encode([], vocab)")
    if got != [v[_BOS], v[_EOS]]:
        check.fail(f"encode([], vocab) should be [{v[_BOS]}, {v[_EOS]}] (just <bos> and <eos>), but it is {got}.")
    check.ok("an empty sentence becomes [<bos>, <eos>]")
    for tokens in [_LONG_TOKENS, _VERY_LONG_TOKENS, *_SPECIAL_WORD_SENTENCES]:
        want = _encode_oracle(tokens, v)
        got = _ids_result(check, _guarded(check, encode, (list(tokens), dict(v)), "encode"), "encode(tokens, vocab)")
        if got != want:
            _edge_case_failure(check, tokens, v, got, want)
    # one line, as the lesson's stored output shows it; it covers all four specials written as words
    check.ok("encodes sentences of any length, and special tokens written as words like any other token")


def _edge_case_failure(check: Check, tokens: list[str], v: dict[str, int], got: list[int], want: list[int]) -> None:
    """Fail with what encode did to a long sentence or to a special written as a word, then the ids."""
    if len(got) != len(want):
        head = (f"encode returned {len(got)} ids for {len(tokens)} tokens; it should return {len(want)} "
                f"(<bos>, one id per token, <eos>).")
    else:
        wrong = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
        head = (f"encode returned the right number of ids ({len(got)}) for {len(tokens)} tokens, but the wrong ids at "
                f"position{'s' if len(wrong) > 1 else ''} {', '.join(map(str, wrong))}.")
    figures = f"{head}\n  tokens:   {_show(tokens, 16)}\n  expected: {_show(want, 16)}\n  actual:   {_show(got, 16)}"
    if tokens in (_LONG_TOKENS, _VERY_LONG_TOKENS):
        check.fail(f"A sentence of {len(tokens)} tokens: encode every token, however long the sentence (no fixed "
                   f"length, no cut).\n{figures}")
    slip = matching_slip(SPECIAL_WORD_SLIPS, lambda slip: slip.replay(None, list(tokens), dict(v)),
                         lambda wrong: wrong == got)
    check.fail(slip.says.showing(figures) if slip is not None else f"{_special_word_cause(tokens, got, v)}\n{figures}")


_LOOKUP = "A special inside `tokens` is a token like any other: it gets its own id, vocab[token]."


def _frame_dropped(start: bool, end: bool) -> Slip:
    """The slip of an encode that drops a <bos> word starting the tokens (``start``) and an <eos> word ending them
    (``end``), as if the sentence were already framed; its mutant gives the oracle's ids unless both are there."""
    edges = " and ".join([f"start with '{_BOS}'"] * start + [f"end with '{_EOS}'"] * end)

    def framed_once(tokens: list[str], vocab: dict[str, int]) -> list[int]:
        first = start and tokens[:1] == [_BOS]
        last = end and tokens[-1:] == [_EOS] and len(tokens) > first
        if (start and not first) or (end and not last):
            return _encode_oracle(tokens, vocab)
        return _encode_oracle(tokens[int(first): len(tokens) - int(last)], vocab)

    return Slip(f"drops the given frame: {edges}", Diagnosis(
        f"The tokens {edges} as words, and {'those words were' if start and end else 'that word was'} dropped.",
        "encode always adds its own <bos> and <eos> around the tokens, whatever they hold: the result then has <bos> "
        f"(or <eos>) twice, which is right. Do not check whether the sentence is already framed.\n{_LOOKUP}"),
        framed_once)


def _special_dropped(special: str) -> Slip:
    return Slip(f"drops the word {special}", Diagnosis(
        f"The '{special}' written as a word was dropped:",
        f"encode every token of the sentence, specials included. {_LOOKUP}"),
        lambda tokens, vocab: _encode_oracle([t for t in tokens if t != special], vocab))


def _stopped_at(special: str, ending: str) -> Slip:
    """An encode that stops at the first ``special`` among the tokens: with its own <eos> after the tokens before it
    (``ending`` "eos"), without it ("none"), or with the special's id kept last ("special")."""
    def stopped(tokens: list[str], vocab: dict[str, int]) -> list[int]:
        if special not in tokens:
            return _encode_oracle(tokens, vocab)
        ids = _encode_oracle(tokens[: tokens.index(special) + (ending == "special")], vocab)
        return ids if ending == "eos" else ids[:-1]

    return Slip(f"stops at the word {special}" + ("" if ending == "eos" else f", {ending} last"), Diagnosis(
        f"encode stopped at the '{special}' written as a word: the tokens after it are missing.",
        f"Only encode adds the final <eos>; a {special!r} inside the tokens is looked up like any other token, and "
        f"the loop goes on."), stopped)


#: what encode does to specials written as words, each a learner's encode, tried in order on those sentences
SPECIAL_WORD_SLIPS = (
    _frame_dropped(True, True), _frame_dropped(True, False), _frame_dropped(False, True),
    *(slip for special in _SPECIAL_IDS for slip in (
        _special_dropped(special), *(_stopped_at(special, ending) for ending in ("eos", "none", "special")))),
)


def _special_word_cause(tokens: list[str], got: list[int], v: dict) -> str:
    """Name what encode did to a special written as a word, when no slip gives its ids: an id replaced (invariant)."""
    ids = [v.get(t, v[_UNK]) for t in tokens]
    bos, eos = v[_BOS], v[_EOS]
    for s in (s for s in _SPECIAL_IDS if s in tokens):
        word = f"'{s}' written as a word"
        at = {i + 1 for i, t in enumerate(tokens) if t == s}
        wrong = {i for i, (mine, right) in enumerate(zip(got, [bos, *ids, eos])) if mine != right}
        if len(got) == len(ids) + 2 and wrong and wrong <= at and len({got[i] for i in wrong}) == 1:
            x = got[min(wrong)]
            extra = f" {_LOOKUP}"
            if s == _PAD and x == v[_UNK]:
                extra = (
                    " `vocab.get(token) or vocab['<unk>']` treats the id 0 as missing, because 0 is falsy: "
                    "use `vocab.get(token, vocab['<unk>'])` (or compare with `is None`)."
                )
            elif x == v[_UNK]:
                extra = f" It was treated as an unknown token, but it is in the vocabulary. {_LOOKUP}"
            return f"The {word} became {x}, not its id vocab[{s!r}] = {v[s]}.{extra}"
    return f"{_LOOKUP} Expected [vocab['<bos>']] + [vocab.get(t, vocab['<unk>']) for t in tokens] + [vocab['<eos>']]."


def _tokens_result(check: Check, value: Any, call: str) -> list[str]:
    if value is None:
        check.fail(f"{call} returned None. Did you forget a `return` statement?")
    if isinstance(value, str):
        check.fail(
            f"{call} returned one string ({value!r}), but it should return a list of tokens such as ['der', 'hund'].\n"
            f"Joining tokens into text comes later (detokenize)."
        )
    if isinstance(value, torch.Tensor) or not isinstance(value, (list, tuple)):
        check.fail(f"{call} should return a list of tokens (str), but returned {describe(value)}.")
    if value and all(_as_int(t) is not None for t in value):
        check.fail(f"{call} returned ids ({_show(value)}), not tokens. Map every id back to its token.")
    if not all(isinstance(t, str) for t in value):
        check.fail(f"{call} should return tokens (str), but returned {_show(value)}.")
    return list(value)


def _decoded(ids: list[int], v: dict, token_of: Callable[[int], Any], by_token: bool) -> list:
    """decode's rule with ``token_of`` as the lookup, the specials recognised by token (or by id)."""
    out = []
    for i in ids:
        t = token_of(i)
        if (t == _EOS) if by_token else (i == v[_EOS]):
            break
        if not ((t in (_BOS, _PAD)) if by_token else (i in (v[_BOS], v[_PAD]))):
            out.append(t)
    return out


def _decode_drawn(check: Check, decode: Callable) -> None:
    """Ids and a vocabulary drawn at random (``generator``: a grading run's hidden seed draws others): <bos>, <pad>,
    <unk> and <eos> anywhere among them."""
    g = generator(63)
    v = _drawn_vocab(g)
    itos = {i: t for t, i in v.items()}
    ids = torch.randint(0, len(v), (int(torch.randint(0, 16, (), generator=g)),), generator=g).tolist()
    want = _decoded(ids, v, itos.get, by_token=False)
    got = _tokens_result(check, _guarded(check, decode, (list(ids), dict(v)), "decode"), f"decode({ids}, vocab)")
    if got != want:
        check.fail(f"decode returned the wrong tokens for ids and a vocabulary drawn at random.\n  ids:      {ids}\n"
                   f"  vocab:    {v}\n  expected: {want}\n  actual:   {got}\nExpected: skip <bos> and <pad>, stop "
                   f"at the first <eos>, and turn every other id into its token.")


#: (ids, what it tests): decode's fixed cases, read with _VOCAB, then the first two with _VOCAB_2
_DECODE_CASES = [
    ([1, 5, 11, 6, 10, 9, 4, 2], "a whole sentence: <bos> ... <eos>"),
    ([1, 5, 11, 7, 4, 2, 0, 0, 0], "padding after <eos>"),
    ([10, 9, 7, 2], "no <bos> at the start"),
    ([1, 10, 12, 8, 7, 0, 0], "no <eos>, padding at the end"),
    ([1, 5, 11, 2, 10, 9, 7, 2], "more ids after the first <eos>"),
    ([1, 3, 11, 7, 2], "an <unk> in the sentence"),
    ([1, 2, 0], "an empty sentence"),
    ([1, 2, 5, 11, 0], "<eos> right after <bos>, more ids after it"),
    ([], "no ids at all"),
    ([1, 5, 0, 11, 7, 4, 2, 0], "a <pad> in the middle"),
    ([1, 10, 9, 1, 6, 10, 12, 2], "a second <bos> in the middle"),
]
_DECODE_CASES += [(ids, what + ", with a second vocabulary") for ids, what in _DECODE_CASES[:2]]


def _check_decode(check: Check, decode: Callable) -> None:
    check.callable_(decode, "decode")
    so_far: list[str] = []  # every expected token of the earlier calls, in order
    for ids, what in _DECODE_CASES:
        v = _VOCAB_2 if what.endswith("second vocabulary") else _VOCAB
        want = _decode_oracle(ids, v)
        got = _tokens_result(check, _guarded(check, decode, (list(ids), dict(v)), "decode"), f"decode({ids}, vocab)")
        so_far, earlier = so_far + want, so_far
        if got != want:
            _decode_failure(check, ids, what, v, got, want, earlier)
    _decode_drawn(check, decode)
    check.ok("turns ids back into tokens with the inverse of the vocabulary")
    check.ok("drops <bos> and <pad> and stops at the first <eos>")
    check.ok("keeps <unk>, and handles sentences without <bos>, without <eos>, and empty ones")
    check.ok("drops <pad> and <bos> wherever they appear, and uses the vocabulary it is given")
    check.ok("leaves its inputs (ids, vocab) unchanged")


def _decode_failure(check: Check, ids: list[int], what: str, v: dict[str, int], got: list[str], want: list[str],
                    earlier: list[str]) -> None:
    """Fail with what decode's wrong tokens show: an invariant they break, else a known slip, else what is expected."""
    shown = f"  ids ({what}): {ids}\n  expected: {want}\n  actual:   {got}"
    if v is _VOCAB_2:
        check.fail(f"{_OWN_VOCAB}\ndecode returned the wrong tokens with a second, different vocabulary.\n{shown}\n"
                   f"  vocab: {v}")
    cause = _decode_cause(ids, what, v, got, want, earlier)
    if cause is None:
        slip = matching_slip(DECODE_SLIPS, lambda slip: slip.replay(None, list(ids), dict(v)),
                             lambda wrong: wrong == got)
        if slip is not None:
            check.fail(slip.says.showing(shown))
        cause = _decode_late_cause(ids, what, v, got, want)
    check.fail(f"{cause}\n{shown}")


def _decode_cause(ids: list[int], what: str, v: dict[str, int], got: list[str], want: list[str],
                  earlier: list[str]) -> str | None:
    """The invariants checked before the slips: state kept between calls, and <eos>, <bos>, <pad> in the output."""
    itos = {i: t for t, i in v.items()}
    tail = ids[ids.index(v[_EOS]) + 1:] if v[_EOS] in ids else []
    after_eos = [itos[i] for i in tail if i not in (v[_BOS], v[_PAD], v[_EOS])]
    if earlier and got == earlier + want:
        return ("The tokens of the earlier calls are still there, before this sentence's: a list is kept from one call "
                "to the next, such as a mutable default argument (`def decode(ids, vocab, out=[])`) or a list outside "
                "the function. Start a new list inside decode on every call.")
    if _EOS in got:
        return "<eos> ends the sentence: stop before it, without adding it to the tokens."
    if after_eos and got[-len(after_eos):] == after_eos:
        return "Tokens after the first <eos> were kept: stop at the first <eos> (break out of the loop)."
    if _BOS in got:
        return ("<bos> should be dropped wherever it appears, not only as the first id." if "second <bos>" in what
                else "<bos> should be dropped: it only marks the start.")
    if _PAD in got:
        return ("<pad> should be dropped wherever it appears, not only at the end." if "<pad> in the middle" in what
                else "<pad> should be dropped: padding is not part of the sentence.")
    if "<pad> in the middle" in what and got == want[: len(got)] and len(got) < len(want):
        return "Decoding stopped at <pad>: <pad> is skipped wherever it appears; only <eos> ends the sentence."
    return None


def _read_by_position(ids: list[int], vocab: dict[str, int], by_token: bool) -> list:
    """decode with each id read as a position among the dict's keys (the specials recognised by token, or by id)."""
    keys = list(vocab)
    return _decoded(ids, vocab, lambda i: keys[i] if i < len(keys) else None, by_token)


def _without_trailing_pads(ids: list[int], vocab: dict[str, int]) -> list[int]:
    """The ids without the padding at their end."""
    end = len(ids)
    while end and ids[end - 1] == vocab[_PAD]:
        end -= 1
    return ids[:end]


_DECODE_BY_POSITION = Diagnosis(
    "The tokens are looked up by position in the dict.",
    "Build the inverse mapping first, id -> token (`{i: t for t, i in vocab.items()}`), and look each id up there.")

#: decode's known slips, each a learner's decode, tried in order once the invariants above hold
DECODE_SLIPS = (
    Slip("unk as question mark", Diagnosis(
        "<unk> was shown as '?':",
        "keep the token '<unk>' itself (turning it into text is a display choice for later)."),
        lambda ids, vocab: ["?" if t == _UNK else t for t in _decode_oracle(ids, vocab)]),
    Slip("by position", _DECODE_BY_POSITION, lambda ids, vocab: _read_by_position(ids, vocab, by_token=True)),
    Slip("by position, specials by id", _DECODE_BY_POSITION,
         lambda ids, vocab: _read_by_position(ids, vocab, by_token=False)),
    Slip("first id dropped", Diagnosis(
        "The first token was removed although it is not <bos>:",
        "drop <bos> by its id, not by its position (ids[1:])."), lambda ids, vocab: _decode_oracle(ids[1:], vocab)),
    Slip("last id cut", Diagnosis(
        "The last token was removed although there is no <eos>:",
        "stop at <eos> by its id, not by cutting off the end (ids[1:-1])."),
        lambda ids, vocab: _decode_oracle(_without_trailing_pads(ids, vocab)[:-1], vocab)),  # last id taken as <eos>
    Slip("unk dropped", Diagnosis("<unk> should stay in the output as the token '<unk>':",
                                  "only <bos> and <pad> are dropped."),
         lambda ids, vocab: [t for t in _decode_oracle(ids, vocab) if t != _UNK]),
)


def _decode_late_cause(ids: list[int], what: str, v: dict[str, int], got: list[str], want: list[str]) -> str:
    """The invariants checked after the slips: ids read by position in other ways, and a stop at <unk>."""
    by_position = [list(v)[i] for i in ids if i < len(v)]
    if got and set(got) <= set(v) and any(t in by_position for t in got) and len(got) == len(want):
        return str(_DECODE_BY_POSITION)
    if what == "an <unk> in the sentence" and len(got) < len(want):
        return "Decoding stopped at <unk>; only <eos> ends the sentence."
    return ("decode returned the wrong tokens. Expected: skip <bos> and <pad>, stop at the first <eos>, and turn every "
            "other id into its token.")


# --------------------------------------------------------------------------
# pad_batch


def _check_pad_batch(check: Check, pad_batch: Callable) -> None:
    check.callable_(pad_batch, "pad_batch")
    # The longest sequence is neither the first nor the largest in list order (max(sequences) is [9, 2]);
    # 0 is a real token; pad_id is not 0.
    sequences = [[5, 0, 7], [8, 6, 9, 4, 3, 12], [0], [9, 2]]
    pad_id = 13
    out = _pad(check, pad_batch, sequences, pad_id)
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.Tensor):
        check.fail(
            f"pad_batch returned a tuple of two things (a {describe(out[0])} and a {describe(out[1])}), perhaps "
            f"(batch, lengths).\nReturn only the padded batch; the lengths can be recovered from it (ids != pad_id)."
        )
    if isinstance(out, (list, tuple)) and not isinstance(out, torch.Tensor):
        check.fail(
            f"pad_batch should return a torch.Tensor, but returned {describe(out)}.\n"
            f"Turn the padded rows into one tensor: torch.tensor(rows, dtype=torch.long)."
        )
    if not isinstance(out, torch.Tensor):
        check.fail(f"pad_batch should return a torch.Tensor, but returned {describe(out)}." + ("\nDid you forget a `return` statement?" if out is None else ""))
    _pad_shape(check, out, sequences, pad_id)
    if out.dtype != torch.long:
        check.fail(
            f"pad_batch returned dtype {str(out.dtype).replace('torch.', '')}, but ids must be torch.long (int64): "
            f"embedding layers only accept integer ids.\nPass dtype=torch.long when you create the tensor."
        )
    _pad_values(check, out, sequences, pad_id)
    first = out.clone()
    _check_more_batches(check, pad_batch)
    if not torch.equal(out, first):
        check.fail(
            f"The batch pad_batch returned first ({_show(first.tolist(), 4)}) changed when pad_batch was called "
            f"again: it is now {_show(out.tolist(), 4)}.\nEach call must return a new tensor: no buffer, global or "
            f"cache shared between calls (lesson 06 keeps many batches at once)."
        )
    # recorded last: every batch above could still have broken them
    check.ok("returns a tensor of shape (B, L_max): one row per sequence, as wide as the longest")
    check.ok("dtype is torch.long")
    check.ok("keeps every id in place and pads on the right with pad_id (also when pad_id is not 0 and 0 is a real id)")
    check.ok("handles pad_id = 0, an empty sequence, equal lengths, a single sequence of length 1, 70 ids, and "
             "150 ids as large as 69,586")
    check.ok("returns a new tensor at every call (a batch is not changed by the next call)")
    check.ok("leaves the input lists unchanged")


_MAX_OF_LISTS = Diagnosis(
    "`max(sequences)` is not the longest sequence: Python compares lists element by element, so it returns the "
    "largest in dictionary order.", "Use `max(len(s) for s in sequences)` (or `max(sequences, key=len)`).")


def _max_of_lists_figures(sequences: list, width: int) -> str:
    return (f"Here that is {max(sequences)}, {width} ids, while the longest has {max(len(s) for s in sequences)}.")


def _pad(check: Check, pad_batch: Callable, sequences: list, pad_id: int, what: str = "") -> Any:
    """One guarded call; a crash ends the check with a hint tied to its usual cause."""
    out = check.attempt(pad_batch, copy.deepcopy(sequences), pad_id, what="pad_batch")
    if not isinstance(out, Raised) or isinstance(out.exception, NotImplementedError):
        return _guarded(check, pad_batch, (copy.deepcopy(sequences), pad_id), "pad_batch")
    largest, longest = max(sequences), max(len(s) for s in sequences)
    code = _source(pad_batch)  # max over the lists themselves, max(sequences), not over their lengths
    if (re.search(r"\bmax\(\s*[A-Za-z_]\w*\s*\)", code) and len(largest) != longest
            and not isinstance(out.exception, NameError)):
        check.error(f"{out.message}\nHint: {_MAX_OF_LISTS.cause} {_max_of_lists_figures(sequences, len(largest))} "
                    f"{_MAX_OF_LISTS.fix}")
    if what == "an empty sequence":
        exc = out.exception
        check.fail(
            f"pad_batch({sequences}, pad_id={pad_id}) raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}\n"
            f"An empty sequence becomes a row of pad ids. If you build a tensor per sequence, "
            f"note that torch.tensor([]) is a float tensor: pass dtype=torch.long."
        )
    check.error(out.message)


def _source(fn: Callable) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def _pad_shape(check: Check, out: torch.Tensor, sequences: list, pad_id: int, what: str = "") -> None:
    """Fail with the likely cause unless ``out`` is (B, L_max)."""
    B, L = len(sequences), max(len(s) for s in sequences)
    shape = tuple(out.shape)
    if shape == (B, L):
        return
    shown = ("pad_batch returned the wrong shape" + (f" with {what}" if what else "") + f".\n  sequences: "
             f"{_show(sequences, 4)} (B = {B}, longest = {L})\n  expected shape: {fmt_shape((B, L))}\n  actual shape:"
             f"   {fmt_shape(shape)}")
    if len(shape) == 3 and shape[:2] == (B, L):
        check.fail(f"The result has 3 dimensions: the batch should be 2-D, (B, L_max), one id per position. Remove the "
                   f"extra dimension of size {shape[2]} (no unsqueeze, no list around each id).\n{shown}")
    if len(shape) != 2:
        check.fail(f"The result should be 2-D, (B, L_max), but it has {len(shape)} dimension(s).\n{shown}")
    slip = matching_slip(PAD_SHAPE_SLIPS, lambda slip: slip.replay(None, copy.deepcopy(sequences), pad_id),
                         lambda wrong: tuple(wrong.shape) == shape)
    if slip is not None:
        check.fail(slip.says.showing((_max_of_lists_figures(sequences, shape[1]) + "\n" if slip.name == "max of lists"
                                      else "") + shown))
    if shape[0] == B and shape[1] > L:
        cause = f"There are {shape[1] - L} column(s) too many: pad to exactly the longest length, max(len(s) for s in sequences)."
    elif shape[0] == B and shape[1] < L:
        cause = (
            f"The rows are cut to a fixed maximum of {shape[1]} ids, but the longest sequence has {L}: pad_batch "
            f"pads to the longest sequence and never drops ids."
        )
    elif shape[0] < B:
        cause = "Some sequences are missing: every sequence gets its own row."
    else:
        cause = "Expected one row per sequence and as many columns as the longest sequence has ids."
    check.fail(f"{cause}\n{shown}")


#: pad_batch's known slips of shape, each a learner's pad_batch, told apart by the shape of the batch
PAD_SHAPE_SLIPS = (
    Slip("transposed", Diagnosis("The result is transposed:",
                                 "one row per sequence, so (B, L_max). With pad_sequence, pass batch_first=True."),
         lambda sequences, pad_id: _pad_oracle(sequences, pad_id).T),
    Slip("max of lists", _MAX_OF_LISTS,
         lambda sequences, pad_id: _pad_oracle(sequences, pad_id, width=len(max(sequences)))),
    Slip("width of the first", Diagnosis(
        "The width is the length of the first sequence;", "it should be the length of the longest one."),
        lambda sequences, pad_id: _pad_oracle(sequences, pad_id, width=len(sequences[0]))),
    Slip("cut to the shortest", Diagnosis(
        "The width is the length of the shortest sequence: the longer ones were cut. `zip(*sequences)` stops at the "
        "shortest sequence;", "pad every sequence up to the longest instead (for example "
        "itertools.zip_longest(..., fillvalue=pad_id))."),
        lambda sequences, pad_id: _pad_oracle(sequences, pad_id, width=min(len(s) for s in sequences))),
)


def _check_more_batches(check: Check, pad_batch: Callable) -> None:
    """pad_id 0; an empty sequence (first: a dtype taken from the first row is float then); equal lengths;
    a single sequence of length 1; lesson 06's lengths."""
    long = [list(range(3, 73)), [5, 6]]  # 70 ids: lesson 06 pads sentences up to max_len = 64 and beyond
    # 150 ids up to 69,586 (a BPE vocabulary of lesson 08 has thousands of ids): no cut at 128, no narrow dtype
    very_long = [[5, 300], [3 + 467 * i for i in range(150)]]
    for seqs, pid, what in (
        ([[4, 5], [6]], 0, "pad_id = 0"),
        ([[], [3, 4], [5]], 9, "an empty sequence"),
        ([[1, 2, 3], [4, 5, 6]], 7, "sequences of equal length"),
        ([[6]], 2, "a single sequence of length 1"),
        (long, 1, "a sequence of 70 ids"),
        (very_long, 1, "a sequence of 150 ids up to 69,586"),
        (*_drawn_sequences(64), "a batch drawn at random"),
    ):
        out = _pad(check, pad_batch, seqs, pid, what)
        if not isinstance(out, torch.Tensor):
            check.fail(f"With {what}, pad_batch should return a torch.long tensor, but returned {describe(out)}.")
        if what == "an empty sequence" and out.dim() == 2 and out.shape[0] == len(seqs) - 1:
            check.fail(
                f"With {what}, pad_batch({seqs}, pad_id={pid}) returned a tensor of shape {fmt_shape(out.shape)}.\n"
                f"An empty sequence must still get its row (all pad ids)."
            )
        _pad_shape(check, out, seqs, pid, what)
        if out.dtype != torch.long:
            check.fail(
                f"With {what}, pad_batch({_show(seqs, 4)}, pad_id={pid}) returned dtype "
                f"{str(out.dtype).replace('torch.', '')}, not torch.long.\n"
                f"torch.tensor([]) is a float tensor: pass dtype=torch.long when you make a tensor from a sequence."
            )
        _pad_values(check, out, seqs, pid, what)


def _drawn_sequences(seed: int) -> tuple[list[list[int]], int]:
    """Sequences of random lengths and ids, and a pad id, drawn at random (``generator(seed)``: a grading run's
    hidden seed draws others)."""
    g = generator(seed)
    lengths = torch.randint(0, 16, (int(torch.randint(1, 7, (), generator=g)),), generator=g).tolist()
    return [torch.randint(0, 1000, (n,), generator=g).tolist() for n in lengths], int(torch.randint(0, 50, (), generator=g))


def _pad_values(check: Check, out: torch.Tensor, sequences: list, pad_id: int, what: str = "") -> None:
    L = out.shape[1]
    rows = [r.tolist() for r in out]
    want = [list(s) + [pad_id] * (L - len(s)) for s in sequences]
    if rows == want:
        return
    shown = (f"pad_batch returned the wrong values.\n  sequences: {_show(sequences, 6)}, pad_id = {pad_id}"
             + (f" ({what})" if what else "") + f"\n  expected: {_show(want, 6)}\n  actual:   {_show(rows, 6)}")
    slip = matching_slip(PAD_VALUE_SLIPS, lambda slip: slip.replay(None, copy.deepcopy(sequences), pad_id),
                         lambda wrong: wrong.tolist() == rows)
    if slip is not None:
        check.fail(slip.says.showing(shown))
    fills = {x for r, s in zip(rows, sequences) for x in r[len(s):]}
    if len(fills) == 1 and pad_id not in fills and rows == [list(s) + [*fills] * (L - len(s)) for s in sequences]:
        fill = fills.pop()
        cause = f"The padding is {fill}, but pad_id is {pad_id}: fill with the pad_id argument, not with a fixed {fill}."
    elif sorted(map(tuple, rows)) == sorted(map(tuple, want)):
        cause = "The rows are in a different order from the sequences: row i must hold sequence i (do not sort them)."
    elif all(a == b for r, w in zip(rows, want) for a, b in zip(r, w) if b < 256):
        cause = (
            "Only the ids of 256 and more are wrong: they passed through a dtype too narrow to hold them (uint8, "
            "int16, a numpy array of small integers) before becoming torch.long. Build the batch in torch.long "
            "from the start; a vocabulary of real text has thousands of ids."
        )
    else:
        cause = "Row i should hold sequence i, followed by pad_id up to the longest length."
    check.fail(f"{cause}\n{shown}")


#: pad_batch's known slips of values, each a learner's pad_batch, tried once the shape and dtype are right
PAD_VALUE_SLIPS = (
    Slip("left padding", Diagnosis("The padding is on the left.",
                                   "Put the ids first and the pad ids after them (right padding)."),
         lambda sequences, pad_id: _pad_oracle([s[::-1] for s in sequences], pad_id).flip(-1)),
    Slip("zeros become pad", Diagnosis(
        "The real id 0 became pad_id: 0 is an ordinary token here.",
        "Decide where the padding goes by position (after the end of each sequence), not by value "
        "(no torch.where(batch == 0, pad_id, batch))."),
        lambda sequences, pad_id: _pad_oracle(sequences, 0).masked_fill(_pad_oracle(sequences, 0) == 0, pad_id)),
)


# --------------------------------------------------------------------------
# The exercises, declared.


def _as_answer(slip: Slip) -> Callable:
    """The slip made into a learner's function (for the generated catalogue tests): every mutant here is one."""
    return slip.mutant


BUILD_VOCAB = Exercise(
    "build_vocab", _check_build_vocab,
    oracle="the definition: Counter over every token, the four specials at 0..3, then every token seen at least "
           "min_freq times, ids 0..n-1",
    cases="eight fixed sentences (counts 1, 2, 3 and more; a token twice in one sentence; capitals) with min_freq 1, "
          "2, 3, 100 and the default, a warm-up call on other sentences, specials written as words in a sentence of "
          "14 tokens, and sentences drawn from the check's seed",
    slips=_ARGUMENT_SLIPS["build_vocab"], answer=_as_answer)

ENCODE = Exercise(
    "encode", _check_encode,
    oracle="[vocab['<bos>']] + [vocab.get(t, vocab['<unk>']) for t in tokens] + [vocab['<eos>']]",
    cases="a vocabulary whose ids are not in insertion order and a second one, unknown tokens, a capital letter, an "
          "empty sentence, sentences of 14 and 154 tokens, each special written as a word, and a sentence and a "
          "vocabulary drawn from the check's seed",
    slips=_ARGUMENT_SLIPS["encode"] + ENCODE_SLIPS + SPECIAL_WORD_SLIPS, answer=_as_answer)

DECODE = Exercise(
    "decode", _check_decode,
    oracle="the inverse of the vocabulary, <bos> and <pad> dropped wherever they are, a stop at the first <eos>",
    cases="eleven fixed id lists (<eos>, <bos>, <pad>, <unk> in every place, none, empty), two of them with a second "
          "vocabulary, and ids and a vocabulary drawn from the check's seed",
    slips=_ARGUMENT_SLIPS["decode"] + DECODE_SLIPS, answer=_as_answer)

PAD_BATCH = Exercise(
    "pad_batch", _check_pad_batch,
    oracle="a torch.long tensor (B, L_max): row i is sequence i followed by pad_id",
    cases="a batch whose longest sequence is neither first nor max(sequences), 0 a real id and pad_id 13; pad_id 0, "
          "an empty sequence, equal lengths, one sequence of length 1, 70 ids, 150 ids up to 69,586, and a batch "
          "drawn from the check's seed",
    slips=_ARGUMENT_SLIPS["pad_batch"] + PAD_SHAPE_SLIPS + PAD_VALUE_SLIPS, answer=_as_answer)
