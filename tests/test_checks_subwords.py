"""The checker of lesson 08 for the BPE merge loop: check_learn_bpe."""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict

import pytest
import torch

from course_utils.checks.subwords import check_learn_bpe
from helpers import expect


# --------------------------------------------------------------------------
# Correct implementations, in several styles.


def learn_bpe(word_counts, num_merges):
    """Tuples of symbols and a Counter; ties to the smallest pair."""
    words = {tuple(word): count for word, count in word_counts.items()}
    merges = []
    for _ in range(num_merges):
        pairs = Counter()
        for symbols, count in words.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        new_words = {}
        for symbols, count in words.items():
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + count
        words = new_words
    return merges


def learn_bpe_lists(word_counts, num_merges):
    """A list of [symbols, count] entries, a while loop, lists as pairs, sorted to find the best."""
    entries = [[list(w), c] for w, c in word_counts.items()]
    merges = []
    while len(merges) < num_merges:
        stats = defaultdict(int)
        for symbols, count in entries:
            for i in range(len(symbols) - 1):
                stats[(symbols[i], symbols[i + 1])] += count
        if not stats:
            return merges
        ranked = sorted(stats.items(), key=lambda item: (-item[1], item[0]))
        a, b = ranked[0][0]
        merges.append([a, b])
        for entry in entries:
            symbols, j = entry[0], 0
            merged = []
            while j < len(symbols):
                if j < len(symbols) - 1 and symbols[j] == a and symbols[j + 1] == b:
                    merged.append(a + b)
                    j += 2
                else:
                    merged.append(symbols[j])
                    j += 1
            entry[0] = merged
    return merges


def learn_bpe_sennrich(word_counts, num_merges):
    """Sennrich et al.'s regex style, with symbols kept apart by spaces (no symbol here holds a space)."""
    vocab = {" ".join(w): c for w, c in word_counts.items()}
    merges = []
    for _ in range(num_merges):
        stats = Counter()
        for word, freq in vocab.items():
            symbols = word.split()
            for i in range(len(symbols) - 1):
                stats[symbols[i], symbols[i + 1]] += freq
        if not stats:
            break
        top = max(stats.values())
        best = min(p for p in stats if stats[p] == top)
        merges.append(best)
        pattern = re.compile(r"(?<!\S)" + re.escape(" ".join(best)) + r"(?!\S)")
        vocab = {pattern.sub("".join(best), word): freq for word, freq in vocab.items()}
    return tuple(merges)


def learn_bpe_uses_randomness_and_torch(word_counts, num_merges):
    """Correct, but touches the global RNGs on the way (the checker must restore them and still pass)."""
    random.random()
    torch.rand(1)
    return learn_bpe(word_counts, num_merges)


def learn_bpe_space_joined_tiebreak(word_counts, num_merges):
    """Ties broken on "first second" strings: the space sorts before every symbol's letters, so this is tuple order."""
    words = {tuple(word): count for word, count in word_counts.items()}
    merges = []
    for _ in range(num_merges):
        pairs = Counter()
        for symbols, count in words.items():
            pairs.update({pair: count * n for pair, n in Counter(zip(symbols, symbols[1:])).items()})
        if not pairs:
            break
        top = max(pairs.values())
        best = min((p for p in pairs if pairs[p] == top), key=" ".join)
        merges.append(best)
        words = _spell_afresh(word_counts, merges)
    return merges


def _spell_afresh(word_counts, merges):
    """Every word spelled again from its characters with all the merges so far (slow, but correct)."""
    spelled = {}
    for word, count in word_counts.items():
        symbols = list(word)
        for pair in merges:
            symbols = _apply(symbols, pair)
        spelled[tuple(symbols)] = spelled.get(tuple(symbols), 0) + count
    return spelled


def learn_bpe_slice_assignment(word_counts, num_merges):
    """Lists of symbols edited in place with slice assignment, scanning left to right."""
    words = [[list(w), c] for w, c in word_counts.items()]
    merges = []
    while len(merges) < num_merges:
        pairs = Counter()
        for symbols, count in words:
            for i in range(len(symbols) - 1):
                pairs[symbols[i], symbols[i + 1]] += count
        if not pairs:
            break
        best = sorted(pairs.items(), key=lambda item: (-item[1], item[0]))[0][0]
        merges.append(best)
        for symbols, _ in words:
            i = 0
            while i < len(symbols) - 1:
                if (symbols[i], symbols[i + 1]) == best:
                    symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
                i += 1
    return merges


CORRECT = [learn_bpe, learn_bpe_lists, learn_bpe_sennrich, learn_bpe_uses_randomness_and_torch,
           learn_bpe_space_joined_tiebreak, learn_bpe_slice_assignment]


@pytest.mark.parametrize("implementation", CORRECT, ids=lambda f: f.__name__)
def test_correct_implementations_pass(implementation):
    expect(check_learn_bpe(implementation), "passed")


def test_the_stub_is_not_attempted():
    def stub(word_counts, num_merges):
        raise NotImplementedError()

    expect(check_learn_bpe(stub), "not attempted")


def test_a_crash_is_an_error_with_the_call():
    def crashes(word_counts, num_merges):
        return [max(word_counts)[0:2]] + [word_counts["missing"]]

    expect(check_learn_bpe(crashes), "error", "KeyError")


def test_running_out_of_pairs_with_an_error_is_an_error():
    def max_of_empty(word_counts, num_merges):
        words = {tuple(w): c for w, c in word_counts.items()}
        merges = []
        for _ in range(num_merges):
            pairs = Counter(p for s, c in words.items() for p in zip(s, s[1:]) for _ in range(c))
            best = min(pairs, key=lambda p: (-pairs[p], p))  # ValueError once no pair is left
            merges.append(best)
            words = {tuple(_apply(s, best)): c for s, c in words.items()}
        return merges

    expect(check_learn_bpe(max_of_empty), "error", "ValueError", "no pairs left", "if not pairs: break")


def test_the_checker_leaves_the_rng_alone():
    random.seed(1)
    torch.manual_seed(1)
    before = (random.getstate(), torch.get_rng_state())
    check_learn_bpe(learn_bpe_uses_randomness_and_torch)
    assert random.getstate() == before[0] and torch.equal(torch.get_rng_state(), before[1])


# --------------------------------------------------------------------------
# Wrong implementations, each with the words of its diagnosis.


def _apply(symbols, pair, everywhere=True):
    out, i, done = [], 0, False
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == tuple(pair) and (everywhere or not done):
            out.append(symbols[i] + symbols[i + 1])
            i, done = i + 2, True
        else:
            out.append(symbols[i])
            i += 1
    return out


def _variant(count_pair=None, choose=None, apply=None, steps=lambda n: n, recount=True, min_count=1, spell=tuple,
             pairs_of=lambda symbols: zip(symbols, symbols[1:])):
    """learn_bpe with one part swapped for a mistake."""

    def implementation(word_counts, num_merges):
        words = {spell(w): c for w, c in word_counts.items()}
        merges, first_counts = [], None
        for _ in range(steps(num_merges)):
            pairs = Counter()
            for symbols, count in words.items():
                for pair in pairs_of(symbols):
                    pairs[pair] += count_pair(count) if count_pair else count
            if first_counts is None:
                first_counts = pairs
            if not recount:
                present = set(pairs)
                pairs = Counter({p: c for p, c in first_counts.items() if p in present and p not in merges})
            if not pairs or max(pairs.values()) < min_count:
                break
            best = choose(pairs) if choose else min(pairs, key=lambda p: (-pairs[p], p))
            merges.append(best)
            words_new = {}
            for symbols, count in words.items():
                key = tuple(apply(symbols, best) if apply else _apply(symbols, best))
                words_new[key] = words_new.get(key, 0) + count
            words = words_new
        return merges

    return implementation


def _str_count_variant(word_counts, num_merges):
    """Counts each pair seen anywhere by searching the text of every space-joined word."""
    words = {tuple(w): c for w, c in word_counts.items()}
    merges = []
    for _ in range(num_merges):
        seen = {pair for symbols in words for pair in zip(symbols, symbols[1:])}
        if not seen:
            break
        counts = {pair: sum(" ".join(s).count(" ".join(pair)) * c for s, c in words.items()) for pair in seen}
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words_new = {}
        for symbols, count in words.items():
            key = tuple(_apply(symbols, best))
            words_new[key] = words_new.get(key, 0) + count
        words = words_new
    return merges


def _stale_counts(word_counts, num_merges):
    """The counts of the first step, each merged pair deleted from them: a pair gone from the words can win."""
    words = {tuple(w): c for w, c in word_counts.items()}
    pairs = Counter(p for s, c in words.items() for p in zip(s, s[1:]) for _ in range(c))
    merges = []
    while len(merges) < num_merges and +pairs:
        pairs = +pairs
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        del pairs[best]
        words = {tuple(_apply(s, best)): c for s, c in words.items()}
    return merges


def _apply_overlapping(symbols, pair):
    """A pair sharing its first symbol with the one just joined is joined too: a a a becomes aa aa."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == tuple(pair):
            out.append(symbols[i] + symbols[i + 1])
            i += 1 if tuple(symbols[i + 1 : i + 3]) == tuple(pair) else 2
        else:
            out.append(symbols[i])
            i += 1
    return out


WRONG = {
    "unweighted counts": (_variant(count_pair=lambda count: 1), ["merge", "one per word", "counts[pair] += freq"]),
    "ties to the largest pair": (_variant(choose=lambda p: max(p, key=lambda q: (p[q], q))), ["ties", "smallest"]),
    "ties to the first seen (max by count)": (_variant(choose=lambda p: max(p, key=p.get)), ["ties", "first seen", "min(pairs"]),
    "ties to the first seen (most_common)": (_variant(choose=lambda p: p.most_common(1)[0][0]), ["first seen"]),
    "the least frequent pair": (_variant(choose=lambda p: min(p, key=lambda q: (p[q], q))), ["merge 1", "most frequent pair occurs"]),
    "counts from the first step only": (_variant(recount=False), ["count the pairs again after every merge"]),
    "merges only the first occurrence in a word": (_variant(apply=lambda s, p: _apply(s, p, everywhere=False)), ["only the first occurrence"]),
    "one merge too many": (_variant(steps=lambda n: n + 1), ["one merge too many"]),
    "one merge too few": (_variant(steps=lambda n: max(n - 1, 0)), ["one merge too few"]),
    "the merged symbol without its parts' order": (_variant(apply=lambda s, p: _apply_reversed(s, p)), ["merge"]),
    "merges a run of equal symbols from the right": (
        _variant(apply=lambda s, p: _apply_from_right(s, p)), ["from the right", "['aa', 'a']", "left to right"]),
    "merges by string replacement across symbol boundaries": (
        _variant(apply=lambda s, p: " ".join(s).replace(" ".join(p), "".join(p)).split()),
        ["across", "boundar", "whole symbols"]),
    "ties by the concatenated pair": (
        _variant(choose=lambda p: min((q for q in p if p[q] == max(p.values())), key=lambda q: q[0] + q[1])),
        ["ties", "concatenat", "(first, second)"]),
    "ties by the first symbol only": (
        _variant(choose=lambda p: min((q for q in p if p[q] == max(p.values())), key=lambda q: q[0])),
        ["ties", "first symbol", "(first, second)"]),
    "stops when the best pair occurs only once": (_variant(min_count=2), ["occurs only once", "pairs seen once"]),
    "lowercases the words": (
        lambda word_counts, num_merges: learn_bpe(_lowered(word_counts), num_merges), ["lowercases", "'The'"]),
    "an end-of-word symbol": (_variant(spell=lambda w: (*w, "</w>")), ["'</w>'", "in none of the words"]),
    "a regex merge guarded on its right only": (
        _variant(apply=lambda s, p: re.sub(re.escape(" ".join(p)) + r"(?!\S)", "".join(p), " ".join(s)).split()),
        ["across", "guard both ends"]),
    # a third hidden set: how the pairs are counted
    "each pair once per word": (_variant(pairs_of=lambda s: set(zip(s, s[1:]))), ["once per word", "count twice"]),
    "the last pair of each word skipped": (
        _variant(pairs_of=lambda s: [(s[i], s[i + 1]) for i in range(len(s) - 2)]), ["skip the last pair",
                                                                                      "range(len(symbols) - 1)"]),
    "pairs counted as text with str.count": (_str_count_variant, ["str.count", "overlapping", "position by position"]),
    "a regex merge guarded on its left only": (
        _variant(apply=lambda s, p: re.sub(r"(?<!\S)" + re.escape(" ".join(p)), "".join(p), " ".join(s)).split()),
        ["across", "guard both ends"]),
    # a sixth hidden set
    "counts from the first step, merged pairs deleted": (_stale_counts, ["count the pairs again after every merge"]),
    "overlapping occurrences merged": (_variant(apply=lambda s, p: _apply_overlapping(s, p)),
                                       ["overlapping", "['aa', 'aa']", "i + 2"]),
    # a learner walkthrough: two slips at once are both named
    "unweighted counts and ties to the first seen": (
        _variant(count_pair=lambda count: 1, choose=lambda p: max(p, key=p.get)),
        ["two together", "one per word", "first seen"]),
}


def _lowered(word_counts):
    lowered = Counter()
    for word, count in word_counts.items():
        lowered[word.lower()] += count
    return dict(lowered)


def _apply_from_right(symbols, pair):
    """Every occurrence merged, but scanning from the end: a a a with ('a', 'a') becomes a aa."""
    out, i = [], len(symbols) - 1
    while i >= 0:
        if i >= 1 and (symbols[i - 1], symbols[i]) == tuple(pair):
            out.append(symbols[i - 1] + symbols[i])
            i -= 2
        else:
            out.append(symbols[i])
            i -= 1
    return out[::-1]


def _apply_reversed(symbols, pair):
    """Merges into second + first: the next counts then differ from the contract's."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == tuple(pair):
            out.append(symbols[i + 1] + symbols[i])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


@pytest.mark.parametrize("name", list(WRONG))
def test_wrong_implementations_fail_with_their_cause(name):
    implementation, phrases = WRONG[name]
    expect(check_learn_bpe(implementation), "failed", *phrases)


def test_returning_merged_symbols_instead_of_pairs():
    def symbols_not_pairs(word_counts, num_merges):
        return ["".join(p) for p in learn_bpe(word_counts, num_merges)]

    expect(check_learn_bpe(symbols_not_pairs), "failed", "not a pair of two strings", "not the merged symbol")


def test_returning_something_that_is_not_a_list():
    expect(check_learn_bpe(lambda word_counts, num_merges: {p: 1 for p in learn_bpe(word_counts, num_merges)}),
           "failed", "return a list of merged pairs")


def test_changing_the_input_dictionary():
    def pops(word_counts, num_merges):
        merges = learn_bpe(word_counts, num_merges)
        word_counts.clear()
        return merges

    expect(check_learn_bpe(pops), "failed", "changed its input `word_counts`")


def test_dropping_the_one_letter_words_from_the_input():
    def drops_single_symbols(word_counts, num_merges):  # words with no pair, removed from the caller's dict
        merges = learn_bpe(word_counts, num_merges)
        for word in [w for w in word_counts if len(w) == 1]:
            word_counts.pop(word)
        return merges

    expect(check_learn_bpe(drops_single_symbols), "failed", "changed its input `word_counts`", "one-letter word")


def test_ignoring_num_merges_and_merging_everything():
    def everything(word_counts, num_merges):
        return learn_bpe(word_counts, 1000)

    expect(check_learn_bpe(everything), "failed", "merges")


def test_depending_on_the_order_of_the_words():
    def first_word_wins(word_counts, num_merges):
        # ties broken by the position of the pair's first word: a mistake nobody listed in the messages
        order = {w: i for i, w in enumerate(word_counts)}
        words = [(list(w), c, order[w]) for w, c in word_counts.items()]
        merges = []
        for _ in range(num_merges):
            pairs, first = Counter(), {}
            for symbols, count, position in words:
                for pair in zip(symbols, symbols[1:]):
                    pairs[pair] += count
                    first.setdefault(pair, position)
            if not pairs:
                break
            best = min(pairs, key=lambda p: (-pairs[p], first[p], p))
            merges.append(best)
            words = [(_apply(s, best), c, pos) for s, c, pos in words]
        return merges

    expect(check_learn_bpe(first_word_wins), "failed", "the smallest")
