"""Checker for lesson 08: the byte-pair-encoding merge loop.

The contract (from the lesson):

``learn_bpe(word_counts, num_merges) -> list[tuple[str, str]]``

* ``word_counts`` maps each word (a string) to how often it occurs; every
  word starts as the sequence of its characters.
* Each merge step counts every pair of adjacent symbols in every word,
  weighted by the word's count (a word ``"aaa"`` holds the pair ``("a", "a")``
  twice), on the words as the earlier merges left them.
* It merges the most frequent pair; among pairs with the same count, the
  smallest pair in Python's order of tuples (``min`` over ``(first, second)``).
* Merging replaces each occurrence of the pair in every word, left to right,
  by one symbol ``first + second`` (``"aaa"`` with ``("a", "a")`` becomes
  ``"aa", "a"``).
* It returns the merged pairs in order: ``num_merges`` of them, or fewer when
  every word is a single symbol before that. ``word_counts`` is left as it was.

The checker replays the learner's merges on several corpora and, at every
step, recounts the pairs itself from the definition above: each merge must be
a most frequent pair at its point, ties broken as the contract says. When a
merge is wrong it names the first one, shows the counts, and, when it can,
the likely cause: it compares the whole answer with what the usual mistakes
produce: the slip table ``SLIPS`` (stopping at pairs seen once, lowercasing,
counting each word once, not recounting after a merge, another tie-break:
largest, first seen, concatenated strings, first symbol only; merging only the
first occurrence in a word, merging runs from the right or overlapping
occurrences, replacing text across the boundaries of symbols; two of these at
once; one merge too many or too few), each a set of flags of the oracle
``_learn``, replayed by the one matcher. An end-of-word marker and a loop that
goes on when no pair is left are named by their own invariants.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any, Callable, Sequence

import torch

from ._core import Check, CheckResult, generator
from .exercise import Exercise
from .slips import Diagnosis, Slip, matching_slip

Pair = tuple[str, str]


def check_learn_bpe(learn_bpe: Callable) -> CheckResult:
    """Check ``learn_bpe(word_counts, num_merges) -> list of (str, str)`` merges, ties to the smallest pair."""
    return LEARN_BPE.check(learn_bpe)


# --------------------------------------------------------------------------
# The definition, and the usual mistakes, as one small simulator.


def _pair_counts(words: dict[tuple[str, ...], int], weighted: bool = True, counting: str = "pairs") -> Counter:
    """How often each pair of neighbouring symbols occurs (each word counted once unless ``weighted``).

    ``counting`` names three slips: "once per word" (a set of the word's pairs), "last pair skipped"
    (``range(len(symbols) - 2)``), "text" (``str.count`` of "first second" in the space-joined word).
    """
    counts: Counter = Counter()
    if counting == "text":  # every pair seen anywhere, counted as text in every word
        candidates = dict.fromkeys(p for spelling in words for p in zip(spelling, spelling[1:]))
        for pair in candidates:
            counts[pair] = sum(" ".join(spelling).count(" ".join(pair)) * (freq if weighted else 1)
                               for spelling, freq in words.items())
        return counts
    for spelling, freq in words.items():
        stop = len(spelling) - (2 if counting == "last pair skipped" else 1)
        pairs = [spelling[position : position + 2] for position in range(stop)]
        for pair in dict.fromkeys(pairs) if counting == "once per word" else pairs:
            counts[pair] += freq if weighted else 1
    return counts


def _merge(spelling: tuple[str, ...], pair: Pair, everywhere: bool = True, from_right: bool = False,
           whole_symbols: bool = True, overlapping: bool = False) -> tuple[str, ...]:
    """``spelling`` with ``pair`` joined, left to right (only its first occurrence unless ``everywhere``).

    Three mistakes: ``from_right`` scans from the end (``a a a`` becomes ``a aa``); ``whole_symbols=False``
    replaces the text ``"first second"`` in the space-joined word, which also matches inside longer symbols;
    ``overlapping`` joins a pair that shares its first symbol with the pair just joined (``a a a`` becomes
    ``aa aa``).
    """
    if not whole_symbols:
        return tuple(" ".join(spelling).replace(" ".join(pair), "".join(pair)).split())
    if from_right:  # the same scan on the mirrored word, with the mirrored pair
        mirrored = _merge(tuple(s[::-1] for s in reversed(spelling)), (pair[1][::-1], pair[0][::-1]), everywhere)
        return tuple(s[::-1] for s in reversed(mirrored))
    joined: list[str] = []
    position, done = 0, False
    while position < len(spelling):
        if spelling[position : position + 2] == pair and (everywhere or not done):
            joined.append("".join(pair))
            again = overlapping and spelling[position + 1 : position + 3] == pair
            position, done = position + (1 if again else 2), True
        else:
            joined.append(spelling[position])
            position += 1
    return tuple(joined)


def _merge_all(words: dict[tuple[str, ...], int], pair: Pair, **mistake: bool) -> dict[tuple[str, ...], int]:
    merged: Counter = Counter()
    for spelling, freq in words.items():
        merged[_merge(spelling, pair, **mistake)] += freq
    return dict(merged)


_TIE_BREAKS: dict[str, Callable[[list[Pair]], Pair]] = {
    "smallest": min,
    "largest": max,
    "first": lambda tied: tied[0],
    "concatenated": lambda tied: min(tied, key=lambda p: p[0] + p[1]),
    "first symbol": lambda tied: min(tied, key=lambda p: p[0]),  # then the first seen among those
}


def _best(counts: Counter, tie: str = "smallest") -> Pair:
    top = max(counts.values())
    return _TIE_BREAKS[tie]([p for p, c in counts.items() if c == top])


def _learn(word_counts: dict[str, int], num_merges: int, weighted: bool = True, recount: bool | str = True,
           tie: str = "smallest", min_count: int = 1, lowercase: bool = False, counting: str = "pairs",
           **mistake: bool) -> list[Pair]:
    """The contract (all defaults) or one of the usual mistakes."""
    if lowercase:
        lowered: Counter = Counter()
        for word, count in word_counts.items():
            lowered[word.lower()] += count
        word_counts = dict(lowered)
    words = {tuple(w): c for w, c in word_counts.items()}
    frozen = _pair_counts(words, weighted, counting)
    merges: list[Pair] = []
    while len(merges) < num_merges:
        counts = _pair_counts(words, weighted, counting) if recount is True else Counter({p: c for p, c in frozen.items() if p not in merges})
        counts = +counts
        if recount is False:  # stale counts, but only pairs still present in the words are merged ("never": any)
            present = _pair_counts(words)
            counts = Counter({p: c for p, c in counts.items() if p in present})
        if not counts or max(counts.values()) < min_count:
            break
        pair = _best(counts, tie)
        merges.append(pair)
        words = _merge_all(words, pair, **mistake)
    return merges


# --------------------------------------------------------------------------
# Inputs

# Chosen so that the usual mistakes choose differently from the contract:
# frequencies matter (a few frequent words against many rare ones), merged
# symbols make new pairs, several steps end in ties, "aaaa" repeats a pair.
# On the first corpus where a mistake goes wrong, no other mistake of
# SLIPS gives the same merges, so its cause can be named.
_CORPORA: list[tuple[str, dict[str, int], int]] = [
    ("a toy corpus", {"low": 5, "lower": 2, "newest": 6, "widest": 3}, 10),
    ("a corpus where one frequent word outweighs many rare ones",
     {"▁hat": 20, "▁cat": 1, "▁bat": 1, "▁mat": 1, "▁rat": 1, "▁sat": 1, "▁vat": 1, "▁hot": 4}, 6),
    ("a corpus full of ties", {"bd": 3, "ca": 3, "ab": 3, "dc": 3, "abcd": 1}, 6),
    ("a corpus with repeated letters", {"aaaa": 3, "aab": 2, "baa": 2, "bbbb": 1}, 6),
    ("a corpus with umlauts", {"▁müde": 4, "▁müder": 2, "▁mädchen": 3, "▁märchen": 2}, 8),
    # Runs of three equal symbols (the lesson's `a a a`): merged left to right they leave ('aa', 'a'), not ('a', 'aa').
    ("a corpus with runs of three equal letters", {"aaa": 4, "baaa": 2, "aaab": 1, "ab": 3}, 5),
    # After ('a', 'b') and ('b', 'c'), `ab c` holds the text "b c" across the end of the symbol 'ab'.
    ("a corpus where merged symbols meet", {"ab": 10, "abc": 4, "bc": 6, "xbc": 1}, 4),
    # Ties between pairs of longer symbols: ('c', 'd'), ('ab', 'e'), ('ab', 'c') tie, first seen in that order;
    # then ('a', 'c') < ('aa', 'b') as tuples, but "aab" < "ac" as strings.
    ("a corpus with ties between pairs that share their first symbol", {"cd": 3, "abe": 3, "abc": 3, "ab": 4}, 5),
    ("a corpus with ties between longer symbols", {"ac": 6, "aab": 6}, 4),
    ("a corpus with capital letters", {"The": 5, "the": 1, "They": 2, "then": 1}, 4),
    # After ('c', 'd') and ('b', 'c'), the word `b cd` holds the text "b c" followed by "d": a regex merge guarded
    # only on its left joins it.
    ("a corpus where a merged symbol starts a pair", {"cd": 10, "bcd": 1, "bc": 5}, 3),
]


# --------------------------------------------------------------------------
# The known slips

_STALE = Diagnosis(
    "Your merges follow the pair counts of the very first step.",
    "Count the pairs again after every merge, on the words as the merges left them (merged symbols make new pairs, "
    "and remove old ones).")
_SMALLEST = "Compare whole pairs, (first, second): `min(pairs, key=lambda p: (-counts[p], p))`."

#: the known slips, each a set of flags of ``_learn`` (the oracle), tried in this order once a merge is wrong
_SINGLE = (
    Slip("text across symbols", Diagnosis(
        "Your merge joins text across the boundaries of symbols: replacing the text 'first second' in a space-joined "
        "word (with str.replace, or a regex without a guard at each end) also matches where `first` is only the end "
        "of a longer symbol, or `second` only the start of one (merging ('b', 'c') turns `ab c` into `abc`, joining "
        "('ab', 'c'), a pair that was never chosen).",
        "Merge whole symbols: walk the list of symbols and join symbols[i] and symbols[i + 1] only when they equal "
        "(first, second); with a regex, guard both ends, r'(?<!\\S)' + re.escape('b c') + r'(?!\\S)'."),
        dict(whole_symbols=False)),
    Slip("unweighted", Diagnosis(
        "Your pair counts look like one per word, not weighted by how often the word occurs.",
        "Add the word's count (`counts[pair] += freq`) for every pair it holds, not 1."), dict(weighted=False)),
    Slip("stale counts", _STALE, dict(recount=False)),
    Slip("counts never updated", _STALE, dict(recount="never")),
    Slip("ties to the largest", Diagnosis(
        "Ties are broken the wrong way:",
        "among pairs with the same count, merge the SMALLEST one (`min` over the tied pairs, comparing (first, "
        "second)), not the largest."), dict(tie="largest")),
    Slip("ties to the first seen", Diagnosis(
        "Ties are broken by the order in which the pairs were first seen (`max(counts, key=counts.get)` or "
        "`most_common(1)`);", "the contract asks for the smallest tied pair: "
        "`min(pairs, key=lambda p: (-counts[p], p))`."), dict(tie="first")),
    Slip("first occurrence only", Diagnosis(
        "Your merge replaces only the first occurrence of the pair in each word;",
        "replace every occurrence, left to right (\"aaa\" with ('a', 'a') becomes ['aa', 'a'])."),
        dict(everywhere=False)),
    Slip("overlapping", Diagnosis(
        "Your merge joins overlapping occurrences: in a run of equal symbols, `a a a` with ('a', 'a') becomes "
        "['aa', 'aa'], the middle 'a' used twice.",
        "Once symbols i and i + 1 are joined, go on at i + 2: `a a a` becomes ['aa', 'a']."), dict(overlapping=True)),
    Slip("from the right", Diagnosis(
        "Your merge scans each word from the right: in a run of equal symbols the pair is joined left to right, so "
        "`a a a` with ('a', 'a') becomes ['aa', 'a'], not ['a', 'aa'], and the next step then counts the pair "
        "('aa', 'a'), not ('a', 'aa').",
        "Walk each word from its first symbol, and after a merge go on after the merged pair."),
        dict(from_right=True)),
    Slip("ties by concatenation", Diagnosis(
        "Ties are broken by comparing the concatenated pairs (first + second) instead of the pairs: as tuples, "
        "('a', 'c') comes before ('aa', 'b') because 'a' < 'aa', although 'ac' > 'aab'.",
        "Compare the tied pairs themselves, (first, second): `min(pairs, key=lambda p: (-counts[p], p))`."),
        dict(tie="concatenated")),
    Slip("ties by the first symbol", Diagnosis(
        "Ties are broken by the first symbol only: among tied pairs with the same first symbol, such as ('ab', 'e') "
        "and ('ab', 'c'), yours takes the one seen first.", _SMALLEST), dict(tie="first symbol")),
    Slip("once per word", Diagnosis(
        "Your counts take each pair once per word: a pair that occurs twice in one word (('a', 'a') in `a a a a`, or "
        "('a', 'b') in `a b a b`) must count twice, times the word's frequency.",
        "Count every position, not a set of the word's pairs."), dict(counting="once per word")),
    Slip("last pair skipped", Diagnosis(
        "Your counts skip the last pair of every word: the loop over positions stops one early.",
        "A word of n symbols has n - 1 pairs, at positions 0 to n - 2: `range(len(symbols) - 1)`."),
        dict(counting="last pair skipped")),
    Slip("counted as text", Diagnosis(
        "Your counts search the text of the space-joined word (str.count): the text 'first second' also matches "
        "where `first` is only the end of a longer symbol or `second` the start of one, and str.count skips "
        "overlapping matches (`a a a` holds the pair ('a', 'a') twice).",
        "Count the pairs of neighbouring symbols position by position."), dict(counting="text")),
    # Last: on some corpora a mistake above stops early too, and its own cause is the one to name.
    Slip("stops at pairs seen once", Diagnosis(
        "Your loop stops when the most frequent pair occurs only once (a habit of some BPE tools).",
        "The contract merges until it has made num_merges merges or no pair is left, pairs seen once included."),
        dict(min_count=2)),
    Slip("lowercases", Diagnosis(
        "Your learn_bpe lowercases the words: 'The' and 'the' are different words here.",
        "Learn the merges from the words exactly as they are given."), dict(lowercase=True)),
)


def _together(first: Slip, second: Slip) -> Slip:
    """Two slips at once (their flags together), each named."""
    return Slip(f"{first.name} + {second.name}", Diagnosis(
        f"Likely causes, two together:\n- {first.says}\n- {second.says}"), {**first.mutant, **second.mutant})


def _told_apart(slips: tuple[Slip, ...], after: tuple[Slip, ...]) -> tuple[Slip, ...]:
    """The slips whose merges, on the fixed corpora, differ from those of every slip before them (``after``, then
    the earlier ones of ``slips``): a slip the corpora cannot tell from an earlier one would never be named."""
    def merges(slip: Slip) -> tuple:
        return tuple(tuple(slip.replay(_learn, word_counts, num_merges)) for _, word_counts, num_merges in _CORPORA)

    seen = {merges(slip) for slip in after}
    kept = []
    for slip in slips:
        own = merges(slip)
        if own not in seen:
            seen.add(own)
            kept.append(slip)
    return tuple(kept)


#: two slips at once, each named: tried once no single slip matches (the pairs the corpora tell apart)
_TWO_AT_ONCE = _told_apart(tuple(_together(first, second) for i, first in enumerate(_SINGLE) for second in _SINGLE[i + 1:]
                                 if not set(first.mutant) & set(second.mutant)), after=_SINGLE)

#: a loop that runs once too often or once too few: tried last
_OFF_BY_ONE = (
    Slip("one merge too many", Diagnosis("One merge too many: your loop runs num_merges + 1 times.",
                                         "Make exactly num_merges merges."),
         lambda word_counts, num_merges: _learn(word_counts, num_merges + 1)),
    Slip("one merge too few", Diagnosis("One merge too few: your loop stops after num_merges - 1 merges.",
                                        "Make exactly num_merges merges (fewer only when no pair is left)."),
         lambda word_counts, num_merges: _learn(word_counts, max(num_merges - 1, 0))),
)

SLIPS = _SINGLE + _TWO_AT_ONCE + _OFF_BY_ONE


def _as_answer(slip: Slip) -> Callable:
    """The slip made into a learner's learn_bpe (for the generated catalogue tests)."""
    def slipped_learn_bpe(word_counts: dict[str, int], num_merges: int) -> list[Pair]:
        return slip.replay(_learn, dict(word_counts), num_merges)

    return slipped_learn_bpe


def _drawn_corpus(seed: int) -> tuple[str, dict[str, int], int]:
    """A corpus drawn at random (``generator(seed)``: a grading run's hidden seed draws another): four to eight words
    of one to seven letters from a small alphabet (so pairs repeat, and tie), their counts, and num_merges."""
    g = generator(seed)
    alphabet = "abcdeü▁"
    words: dict[str, int] = {}
    for n in torch.randint(1, 8, (int(torch.randint(4, 9, (), generator=g)),), generator=g).tolist():
        word = "".join(alphabet[i] for i in torch.randint(0, len(alphabet), (n,), generator=g).tolist())
        words[word] = words.get(word, 0) + int(torch.randint(1, 11, (), generator=g))
    num_merges = int(torch.randint(3, 11, (), generator=g))
    return f"a corpus drawn at random, {_describe_words(words)} with num_merges={num_merges}", words, num_merges


def _describe_words(words: dict[str, int]) -> str:
    return "{" + ", ".join(f"{w!r}: {c}" for w, c in words.items()) + "}"


def _as_pairs(check: Check, value: Any, where: str) -> list[Pair]:
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Sequence):
        check.fail(f"Your learn_bpe returned {type(value).__name__} for {where}: return a list of merged pairs, "
                   f"such as [('e', 's'), ('es', 't')].")
    pairs: list[Pair] = []
    for i, item in enumerate(value):
        if isinstance(item, str) or not isinstance(item, Sequence) or len(item) != 2 or not all(isinstance(s, str) for s in item):
            check.fail(f"Merge number {i + 1} of your learn_bpe ({item!r}, for {where}) is not a pair of two strings.\n"
                       f"Each merge is the pair of symbols that was merged, such as ('e', 's'), not the merged symbol 'es'.")
        pairs.append((item[0], item[1]))
    return pairs


def _verify_merges(check: Check, learn_bpe: Callable, merges: list[Pair], word_counts: dict[str, int], num_merges: int,
                   where: str) -> None:
    """Fail at the first merge that is not a most frequent pair (smallest on ties) at its point."""
    if len(merges) > num_merges:
        _fail(check, f"Your learn_bpe returned {len(merges)} merges for {where}, but num_merges={num_merges}: make "
                     f"exactly num_merges merges (fewer only when no pair is left).", learn_bpe, merges, word_counts, num_merges)
    words = {tuple(w): c for w, c in word_counts.items()}
    for step, pair in enumerate(merges, start=1):
        counts = _pair_counts(words)
        if not counts:
            check.fail(f"Your learn_bpe returned {len(merges)} merges for {where}, but after {step - 1} every word "
                       f"is already a single symbol: there is nothing left to merge. Stop the loop when no pair is left.")
        top = max(counts.values())
        expected = min(p for p, c in counts.items() if c == top)
        if pair != expected:
            _fail(check, _wrong_merge(step, pair, counts, merges, where), learn_bpe, merges, word_counts, num_merges)
        words = _merge_all(words, pair)
    if len(merges) < num_merges and _pair_counts(words):
        _fail(check, f"Your learn_bpe returned {len(merges)} merges for {where} with num_merges={num_merges}, but "
                     f"pairs were left to merge: do exactly num_merges merges (fewer only when no pair is left).",
              learn_bpe, merges, word_counts, num_merges)


def _wrong_merge(step: int, pair: Pair, counts: Counter, merges: list[Pair], where: str) -> str:
    """The figures of a wrong merge: what it counts at its point, and the pair that wins there."""
    seen = counts.get(pair, 0)
    top = max(counts.values())
    tied = sorted(p for p, c in counts.items() if c == top)
    return (
        f"At merge {step} (for {where}), your learn_bpe merged {pair!r}, which occurs {seen} "
        f"time{'' if seen == 1 else 's'} at that point"
        + (" (it is not a pair of adjacent symbols in any word then: did the earlier merges join "
           "first + second into one symbol, in that order, everywhere?)" if seen == 0 else "")
        + f"; the most frequent pair occurs {top} times"
        + (f" (tied: {', '.join(map(repr, tied))}; the smallest, {tied[0]!r}, wins)" if len(tied) > 1
           else f": {tied[0]!r}")
        + f".\nYour merges so far: {merges[:step]!r}."
    )


def _fail(check: Check, figures: str, learn_bpe: Callable, merges: list[Pair], word_counts: dict[str, int],
          num_merges: int) -> None:
    """Fail with the likely cause first (a marker of its own, or the slip whose merges are the learner's), then
    ``figures``; with ``figures`` alone when no cause is known.

    The slip named is the one that gives the learner's merges on this corpus and on every fixed corpus the learner's
    function answers (two slips together can look like one of them on a single corpus); failing that, the first that
    gives them on this corpus.
    """
    foreign = _foreign_symbols(merges, word_counts)
    if foreign is not None:
        check.fail(foreign.showing(figures))
    here = [(word_counts, num_merges, merges)]
    slip = _slip_agreeing(here + _answers_elsewhere(check, learn_bpe)) or _slip_agreeing(here)
    check.fail(slip.says.showing(figures) if slip is not None else figures)


def _slip_agreeing(evidence: list[tuple[dict[str, int], int, list[Pair]]]) -> Slip | None:
    """The first slip whose merges are the learner's on every (word_counts, num_merges, merges) of ``evidence``,
    replayed corpus by corpus (a slip that disagrees on the first is not replayed on the others)."""
    return matching_slip(SLIPS, lambda slip: (slip.replay(_learn, wc, n) for wc, n, _ in evidence),
                         lambda wrong: all(next(wrong) == merges for *_, merges in evidence))


def _answers_elsewhere(check: Check, learn_bpe: Callable) -> list[tuple[dict[str, int], int, list[Pair]]]:
    """The learner's merges on every fixed corpus where its function returns a list of pairs (called quietly)."""
    answers = []
    for _, word_counts, num_merges in _CORPORA:
        value = check.attempt(learn_bpe, copy.deepcopy(word_counts), num_merges, what="learn_bpe")
        if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and all(
                isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2
                and all(isinstance(symbol, str) for symbol in item) for item in value):
            answers.append((word_counts, num_merges, [(first, second) for first, second in value]))
    return answers


def _foreign_symbols(merges: list[Pair], word_counts: dict[str, int]) -> Diagnosis | None:
    """Symbols made of characters that are in none of the words: a marker added to every word (an invariant)."""
    letters = set("".join(word_counts))
    foreign = sorted({symbol for pair in merges for symbol in pair if not set(symbol) <= letters})
    if not foreign:
        return None
    return Diagnosis(f"Your merges hold symbols made of characters that are in none of the words "
                     f"({', '.join(map(repr, foreign[:3]))}): an end-of-word marker such as '</w>', or a separator.",
                     "Each word starts as the sequence of its own characters, nothing added.")


def _call_on_a_copy(check: Check, learn_bpe: Callable, word_counts: dict, num_merges: int, where: str) -> Any:
    """learn_bpe on a copy of word_counts, which must come back as it was (its words, counts and order)."""
    given = copy.deepcopy(word_counts)
    value = check.call(learn_bpe, given, num_merges, what=f"learn_bpe({_describe_words(word_counts)}, {num_merges})",
                       hint=_empty_hint)
    if given != word_counts or list(given) != list(word_counts):
        check.fail(f"Your learn_bpe changed its input `word_counts` (for {where}). Work on a copy of the words "
                   f"(e.g. a dict from each word's tuple of symbols to its count), and leave the argument as it was.")
    return value


def _empty_hint(exc: BaseException) -> str:
    """A max or min of no pairs at all: the loop went on after the last pair was merged."""
    if isinstance(exc, ValueError) and "empty" in str(exc):
        return ("Likely cause: your loop goes on once every word is a single symbol, so there are no pairs left and "
                "`max` / `min` of an empty collection raises. Stop when no pair is left (`if not pairs: break`): "
                "learn_bpe returns fewer than num_merges merges then.")
    return ""


def _check_learn_bpe(check: Check, learn_bpe: Callable) -> None:
    check.callable_(learn_bpe, "learn_bpe")
    for where, word_counts, num_merges in _CORPORA:
        value = _call_on_a_copy(check, learn_bpe, word_counts, num_merges, where)
        merges = _as_pairs(check, value, where)
        _verify_merges(check, learn_bpe, merges, word_counts, num_merges, where)
    check.ok("every merge is the most frequent pair of adjacent symbols at its point, counted with the word frequencies")
    check.ok("ties go to the smallest pair, and every occurrence of a merged pair is replaced")

    # Stopping: more merges asked for than there are pairs, and none.
    words = {"ab": 2, "b": 1, "abc": 1}  # "b": a word of one symbol, which has no pair
    value = _call_on_a_copy(check, learn_bpe, words, 50, "a corpus with a one-letter word")
    merges = _as_pairs(check, value, "a corpus that runs out of pairs")
    _verify_merges(check, learn_bpe, merges, words, 50, "{'ab': 2, 'b': 1, 'abc': 1} with num_merges=50")
    value = check.call(learn_bpe, dict(words), 0, what="learn_bpe({'ab': 2, 'b': 1, 'abc': 1}, 0)")
    if list(_as_pairs(check, value, "num_merges=0")):
        check.fail(f"With num_merges=0 your learn_bpe returned {value!r}: it should merge nothing and return [].")
    check.ok("stops when no pair is left, and merges nothing when asked for 0 merges")

    # The order of the dictionary must not matter (the tie-break is on the pairs, not on what was seen first).
    where, word_counts, num_merges = _CORPORA[2]
    reordered = dict(reversed(list(word_counts.items())))
    value = check.call(learn_bpe, dict(reordered), num_merges, what=f"learn_bpe({_describe_words(reordered)}, {num_merges})")
    _verify_merges(check, learn_bpe, _as_pairs(check, value, "the same words in another order"), reordered,
                   num_merges, f"{where}, in another order")
    check.ok("does not depend on the order of the words, and leaves word_counts unchanged")

    # A corpus the learner never saw under a grading run's hidden seed, once everything above holds.
    where, word_counts, num_merges = _drawn_corpus(71)
    value = _call_on_a_copy(check, learn_bpe, word_counts, num_merges, where)
    _verify_merges(check, learn_bpe, _as_pairs(check, value, where), word_counts, num_merges, where)


LEARN_BPE = Exercise(
    "learn_bpe", _check_learn_bpe,
    oracle="the merge loop of the lesson's contract, written here from its definition (_learn with no flags); each "
           "learner's merge is recounted from the definition at its point",
    cases="eleven fixed corpora chosen so that the known slips merge differently (frequencies, ties, runs of equal "
          "letters, merged symbols that meet, capitals), a corpus that runs out of pairs, num_merges=0, the words in "
          "another order, and a corpus drawn from the check's seed",
    slips=SLIPS, answer=_as_answer)

__all__ = ["check_learn_bpe"]
